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
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
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
// the function it depends on): the answer is SUCCESS, node-drainer's hooks
// are gone from the listed and the tagged groups; another tool's hook on
// them and the hook of our name on a group tagged with another value are
// kept. With fn, the deployed function's sweep then runs once (the function
// still exists: the rules and the function go after the resource), whose
// effect uninstall_clean_sam reads after the stack's delete.
// With sc nil the groups are made here: a tagged group with node-drainer's
// hook (put by the test, as the sweep puts it) and another tool's, and a
// group tagged with another value carrying a hook of node-drainer's name.
func (r *samRun) uninstall(t *testing.T, ctx context.Context, sc *uninstallScene, fn *deployedFunction) {
	t.Helper()
	if sc == nil {
		p := r.resolved(t, "LifecycleHooks")
		sc = &uninstallScene{key: fmt.Sprint(p["AsgTagKey"]), value: fmt.Sprint(p["AsgTagValue"]), ours: []string{fmt.Sprint(p["TerminateHookName"])},
			listed: samASGs, tagged: "sam-uninstall-tagged", foreign: "sam-uninstall-other"}
		for g, v := range map[string]string{sc.tagged: sc.value, sc.foreign: "not-" + sc.value} {
			if _, err := env.CreateASG(ctx, harness.ASGSpec{Name: g, Size: 0, Tags: map[string]string{sc.key: v}}); err != nil {
				t.Fatal(err)
			}
		}
		deleteGroupsAtEnd(t, ctx, sc.tagged, sc.foreign)
		// as the sweep puts it: naming the deployment (its function) in its
		// NotificationMetadata, the mark a removal takes its own hooks by
		if _, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{
			AutoScalingGroupName: aws.String(sc.tagged), LifecycleHookName: aws.String(sc.ours[0]),
			LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE"),
			NotificationMetadata: aws.String(`{"node-drainer":["` + fmt.Sprint(p["Owner"]) + `"]}`)}); err != nil {
			t.Fatal(err)
		}
		putHook(t, ctx, sc.tagged, otherToolHook)
		putHook(t, ctx, sc.foreign, sc.ours[0])
	}

	answers := make(chan map[string]any, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
		var a map[string]any
		_ = json.NewDecoder(req.Body).Decode(&a)
		answers <- a
	}))
	defer srv.Close()
	r.deleteDependents(t, ctx)
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
		if h := slices.DeleteFunc(hookNames(t, ctx, a), func(n string) bool { return n == otherToolHook }); len(h) != 0 {
			t.Errorf("listed group %s still has %v after the stack's Delete", a, h)
		}
	}
	if h := hookNames(t, ctx, sc.tagged); !slices.Equal(h, []string{otherToolHook}) {
		t.Errorf("tagged group: %v after the stack's Delete, want another tool's hook alone", h)
	}
	if h := hookNames(t, ctx, sc.foreign); !slices.Equal(h, sc.ours[:1]) {
		t.Errorf("a group tagged %s=%s (not ours): %v, want its hook kept", sc.key, "not-"+sc.value, h)
	}
	if fn != nil {
		sweepDeployed(t, ctx, *fn)
	}
}

// deleteDependents deletes what CloudFormation deletes before the stack's
// LifecycleHooks: the resources that depend on it (DependsOn, Ref,
// Fn::GetAtt), an order the emulator's DeleteStack, one step, does not
// play. The test knows how to delete an event rule (a template that orders
// the sweep's rule before the removal); another type fails it.
func (r *samRun) deleteDependents(t *testing.T, ctx context.Context) {
	t.Helper()
	eb := eventbridge.NewFromConfig(env.AWS.AWSConfig())
	for _, id := range slices.Sorted(maps.Keys(r.resources())) {
		res := r.resources()[id]
		if id == "LifecycleHooks" || !dependsOn(res, "LifecycleHooks") {
			continue
		}
		if on, err := r.eval.active(res); err != nil || !on {
			continue
		}
		if res["Type"] != "AWS::Events::Rule" {
			t.Fatalf("%s (%v) depends on LifecycleHooks: CloudFormation deletes it first, and test/install does not know how", id, res["Type"])
		}
		name, bus := r.eval.refs[id], fmt.Sprint(r.resolved(t, id)["EventBusName"])
		in := &eventbridge.ListTargetsByRuleInput{Rule: aws.String(name)}
		if bus != "<nil>" && bus != "" {
			in.EventBusName = aws.String(bus)
		}
		tg, err := eb.ListTargetsByRule(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, x := range tg.Targets {
			ids = append(ids, aws.ToString(x.Id))
		}
		if len(ids) > 0 {
			if _, err := eb.RemoveTargets(ctx, &eventbridge.RemoveTargetsInput{Rule: aws.String(name), EventBusName: in.EventBusName, Ids: ids}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := eb.DeleteRule(ctx, &eventbridge.DeleteRuleInput{Name: aws.String(name), EventBusName: in.EventBusName}); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s (rule %s) depends on LifecycleHooks: deleted before its Delete, as CloudFormation orders it", id, name)
	}
}

// dependsOn says whether a template resource depends on the resource id:
// DependsOn, Ref or Fn::GetAtt.
func dependsOn(res map[string]any, id string) bool {
	switch d := res["DependsOn"].(type) {
	case string:
		if d == id {
			return true
		}
	case []any:
		if slices.Contains(d, any(id)) {
			return true
		}
	}
	b, _ := json.Marshal(res["Properties"])
	s := string(b)
	for _, form := range []string{`{"Ref":"` + id + `"}`, `"Fn::GetAtt":["` + id + `"`, `"` + id + `.`, "${" + id + "}", "${" + id + "."} {
		if strings.Contains(s, form) {
			return true
		}
	}
	return false
}
