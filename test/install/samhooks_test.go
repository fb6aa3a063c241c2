package install

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// The stack's Custom::LifecycleHooks, served as CloudFormation serves it:
// a request to the function (the real bootstrap, as the stack made it),
// answered on the request's ResponseURL. The emulator's CloudFormation
// holds the stack in CREATE_IN_PROGRESS until the answer reaches its
// cfnresponse endpoint; its own invocation of the function needs a
// container runtime this machine does not have, so the test is Lambda's
// side: it sends the request the emulator's CloudFormation would.

// hookRequest serves one request of kind to the stack's LifecycleHooks
// with its resolved properties (old: an Update's previous ones) and returns
// the function's outcome; responseURL receives the answer.
func (r *samRun) hookRequest(t *testing.T, ctx context.Context, kind string, old map[string]any, responseURL string) {
	t.Helper()
	r.customRequest(t, ctx, "LifecycleHooks", kind, old, responseURL)
}

// customRequest serves one request of kind to the stack's custom resource
// id (of type Custom::<id>: LifecycleHooks, LifecycleHooksRelease), as
// hookRequest does.
func (r *samRun) customRequest(t *testing.T, ctx context.Context, id, kind string, old map[string]any, responseURL string) {
	t.Helper()
	cf := cloudformation.NewFromConfig(env.AWS.AWSConfig())
	rs, err := cf.DescribeStackResources(ctx, &cloudformation.DescribeStackResourcesInput{StackName: aws.String(r.stackID)})
	if err != nil {
		t.Fatal(err)
	}
	if r.eval == nil {
		r.eval = newCfnEval(r.tmpl, r.params, moto.Region, moto.AccountID, samStackName)
	}
	for _, res := range rs.StackResources {
		if res.LogicalResourceId != nil && res.PhysicalResourceId != nil {
			r.eval.refs[*res.LogicalResourceId] = *res.PhysicalResourceId
		}
	}
	fnName := r.eval.refs["NodeDrainerFunction"]
	f, err := lambda.NewFromConfig(env.AWS.AWSConfig(), func(o *lambda.Options) { o.APIOptions = append(o.APIOptions, stringEnvironment) }).
		GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(fnName)})
	if err != nil {
		t.Fatalf("the stack's function %q: %v", fnName, err)
	}
	// what the stack's resources answer to Fn::GetAtt, for the properties
	// and the access entry
	r.eval.attrs["NodeDrainerFunction.Arn"] = aws.ToString(f.Configuration.FunctionArn)
	r.eval.attrs["FunctionRole.Arn"] = aws.ToString(f.Configuration.Role)
	raw := maps.Clone(r.props(id))
	delete(raw, "ServiceToken")
	v, err := r.eval.resolve(raw)
	if err != nil {
		t.Fatalf("resolving %s: %v", id, err)
	}
	props, _ := cfnStrings(v).(map[string]any)
	props["ServiceToken"] = aws.ToString(f.Configuration.FunctionArn)
	req := map[string]any{
		"RequestType": kind, "ServiceToken": props["ServiceToken"], "ResponseURL": responseURL, "StackId": r.stackID,
		"RequestId": fmt.Sprintf("%s-%d", strings.ToLower(kind), time.Now().UnixNano()), "LogicalResourceId": id,
		"ResourceType": "Custom::" + id, "ResourceProperties": props,
	}
	if kind != "Create" {
		req["PhysicalResourceId"] = "node-drainer-lifecycle-hooks"
	}
	if old != nil {
		req["OldResourceProperties"] = old
	}
	payload, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var fnLog harness.LogBuffer
	rt := r.startFunction(t, ctx, fnName, io.MultiWriter(testWriter{t}, &fnLog))
	defer rt.Stop()
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatalf("%s request: %v", kind, err)
	}
	t.Logf("%s %s: the function answered %s (%s)", id, kind, out.Action, out.Detail)
	if out.Event != "stack-resource" || out.Action != "lifecycle-hooks" {
		t.Fatalf("%s request: outcome %+v, want a stack resource's lifecycle-hooks", kind, out)
	}
}

// cfnResponseURL is the emulator's CloudFormation endpoint for the answers
// of a stack's custom resources.
func (r *samRun) cfnResponseURL() string {
	return env.AWS.URL() + "/cloudformation_" + moto.Region + "/cfnresponse?stack=" + url.QueryEscape(r.stackID)
}

// uninstall serves the stack's Delete to its custom resource (before the
// emulator deletes the stack, as CloudFormation deletes the resource before
// the function it depends on) with a tagged group carrying node-drainer's
// hook (as the sweep puts it) and another tool's, and a group tagged with
// another value carrying a hook of node-drainer's name: the answer is
// SUCCESS; node-drainer's hooks are gone from the listed and the tagged
// groups; the other tool's hook and the other group's are kept.
func (r *samRun) uninstall(t *testing.T, ctx context.Context) {
	t.Helper()
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	p := r.resolved(t, "LifecycleHooks")
	key, value, ours := fmt.Sprint(p["AsgTagKey"]), fmt.Sprint(p["AsgTagValue"]), fmt.Sprint(p["TerminateHookName"])
	tagged, other := "sam-uninstall-tagged", "sam-uninstall-other"
	for g, v := range map[string]string{tagged: value, other: "not-" + value} {
		if _, err := env.CreateASG(ctx, harness.ASGSpec{Name: g, Size: 0, Tags: map[string]string{key: v}}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_, _ = asc.DeleteAutoScalingGroup(context.WithoutCancel(ctx), &autoscaling.DeleteAutoScalingGroupInput{AutoScalingGroupName: aws.String(g), ForceDelete: aws.Bool(true)})
		}()
	}
	// as the sweep puts it: naming the deployment (its function) in its
	// NotificationMetadata, the mark a removal takes its own hooks by
	if _, err := asc.PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{AutoScalingGroupName: aws.String(tagged), LifecycleHookName: aws.String(ours),
		LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE"),
		NotificationMetadata: aws.String(`{"node-drainer":["` + fmt.Sprint(p["Owner"]) + `"]}`)}); err != nil {
		t.Fatal(err)
	}
	putHook(t, ctx, tagged, "another-tool-terminate")
	putHook(t, ctx, other, ours)

	answers := make(chan map[string]any, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
		var a map[string]any
		_ = json.NewDecoder(req.Body).Decode(&a)
		answers <- a
	}))
	defer srv.Close()
	r.hookRequest(t, ctx, "Delete", nil, srv.URL)
	select {
	case a := <-answers:
		if a["Status"] != "SUCCESS" {
			t.Errorf("Delete answered %v", a)
		}
	case <-ctx.Done():
		t.Fatal("the Delete request was never answered")
	}
	for _, a := range samASGs {
		if h := hookNames(t, ctx, a); len(h) != 0 {
			t.Errorf("listed group %s still has %v after the stack's Delete", a, h)
		}
	}
	if h := hookNames(t, ctx, tagged); !slices.Equal(h, []string{"another-tool-terminate"}) {
		t.Errorf("tagged group: %v after the stack's Delete, want another tool's hook alone", h)
	}
	if h := hookNames(t, ctx, other); !slices.Equal(h, []string{ours}) {
		t.Errorf("a group tagged %s=%s (not ours): %v, want its hook kept", key, "not-"+value, h)
	}
}
