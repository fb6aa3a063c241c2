package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/hooks/hookstest"
)

// cfnServer plays CloudFormation's side of a custom resource: the presigned
// URL the answer is PUT to.
type cfnServer struct {
	*httptest.Server
	answers chan cfn.Response
}

func newCFNServer(t *testing.T) *cfnServer {
	s := &cfnServer{answers: make(chan cfn.Response, 4)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		var resp cfn.Response
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPut || json.Unmarshal(body, &resp) != nil {
			t.Errorf("answer: %s %s", r.Method, body)
		}
		s.answers <- resp
	}))
	t.Cleanup(s.Close)
	return s
}

func stackPayload(t *testing.T, url string, kind cfn.RequestType, props, old map[string]any) []byte {
	t.Helper()
	req := map[string]any{
		"RequestType": kind, "ResponseURL": url, "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/node-drainer/1",
		"RequestId": "r-1", "ResourceType": "Custom::LifecycleHooks", "LogicalResourceId": "LifecycleHooks",
		"ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:node-drainer", "ResourceProperties": props,
	}
	if kind != cfn.RequestCreate {
		req["PhysicalResourceId"] = "node-drainer-lifecycle-hooks"
	}
	if old != nil {
		req["OldResourceProperties"] = old
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hookProps(groups ...string) map[string]any {
	return map[string]any{"ServiceToken": "x", "AsgNames": groups, "TerminateHookName": "node-drainer-terminate", "LaunchHookName": "node-drainer-launch",
		"CreateTerminateHook": "true", "CreateLaunchHook": "false", "HeartbeatTimeout": "300", "AsgTagKey": groupTagKey, "AsgTagValue": "true"}
}

// The stack's custom resource: Create puts the hooks on the listed groups
// and fails on a name that is no group (nothing put); Update removes the
// hooks of a group no longer listed; Delete removes ours from listed and
// tagged groups, never another tool's hook; every request is answered.
func TestStackResourceHooks(t *testing.T) {
	srv := newCFNServer(t)
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}, {AutoScalingGroupName: aws.String("green")}, taggedGroup("tagged", "true"), taggedGroup("other", "false")}
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{
		"tagged": {markedBy("node-drainer-terminate", "node-drainer"), {LifecycleHookName: aws.String("nth-terminate")}},
		"other":  {markedBy("node-drainer-terminate", "node-drainer")},
	}}
	h := deployment(e, hp, "node-drainer", nil)
	call := func(kind cfn.RequestType, props, old map[string]any) cfn.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out, err := h.Serve(ctx, stackPayload(t, srv.URL, kind, props, old))
		if err != nil || out.Event != "stack-resource" {
			t.Fatalf("%s: %+v, %v", kind, out, err)
		}
		select {
		case r := <-srv.answers:
			if r.PhysicalResourceID != "node-drainer-lifecycle-hooks" || r.LogicalResourceID != "LifecycleHooks" || r.RequestID != "r-1" {
				t.Errorf("%s answered %+v", kind, r)
			}
			return r
		default:
			t.Fatalf("%s: no answer reached CloudFormation", kind)
			return cfn.Response{}
		}
	}

	if r := call(cfn.RequestCreate, hookProps("blue", "missing"), nil); r.Status != cfn.StatusFailed || !strings.Contains(r.Reason, "missing") || len(hp.Puts) != 0 {
		t.Fatalf("create with a missing group: %s %q, puts %v; want FAILED naming it, nothing put", r.Status, r.Reason, hp.Puts)
	}
	if r := call(cfn.RequestCreate, hookProps("blue", "green"), nil); r.Status != cfn.StatusSuccess ||
		!slices.Equal(hp.Puts, []string{"blue/node-drainer-terminate/autoscaling:EC2_INSTANCE_TERMINATING", "green/node-drainer-terminate/autoscaling:EC2_INSTANCE_TERMINATING"}) {
		t.Fatalf("create: %s %q, puts %v", r.Status, r.Reason, hp.Puts)
	}
	if r := call(cfn.RequestUpdate, hookProps("blue"), hookProps("blue", "green")); r.Status != cfn.StatusSuccess || !slices.Equal(hp.Deletes, []string{"green/node-drainer-terminate"}) {
		t.Fatalf("update dropping green: %s %q, deletes %v", r.Status, r.Reason, hp.Deletes)
	}
	hp.Deletes = nil
	if r := call(cfn.RequestDelete, hookProps("blue"), nil); r.Status != cfn.StatusSuccess {
		t.Fatalf("delete: %s %q", r.Status, r.Reason)
	}
	slices.Sort(hp.Deletes)
	// the other value's group carries a hook this deployment's mark names:
	// put while it carried the tag's value, which changed since
	if !slices.Equal(hp.Deletes, []string{"blue/node-drainer-terminate", "other/node-drainer-terminate", "tagged/node-drainer-terminate"}) {
		t.Errorf("delete removed %v; want blue's, the tagged group's and the one it marked on the other value's group, not nth's", hp.Deletes)
	}
	if len(hp.Have["tagged"]) != 1 || aws.ToString(hp.Have["tagged"][0].LifecycleHookName) != "nth-terminate" || len(hp.Have["other"]) != 0 {
		t.Errorf("left %v", hp.Have)
	}
}

// A request that is not CloudFormation's is an event as before; a bad
// heartbeat is a FAILED answer that changes nothing.
func TestStackRequestRecognised(t *testing.T) {
	sweep := []byte(`{"version":"0","id":"ev-1","detail-type":"Scheduled Event","source":"aws.events","account":"123456789012","time":"2026-01-01T00:00:00Z","region":"us-east-1","resources":[],"detail":{}}`)
	if _, ok := stackRequest(sweep); ok || Request(sweep) {
		t.Error("a sweep event taken for a stack request")
	}
	srv := newCFNServer(t)
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}}
	hp := &hookstest.AutoScaling{Groups: e.asg}
	h := deployment(e, hp, "node-drainer", nil)
	p := hookProps("blue")
	p["HeartbeatTimeout"] = "5m"
	out, err := h.Serve(context.Background(), stackPayload(t, srv.URL, cfn.RequestCreate, p, nil))
	if err != nil || out.Action != ActionFailed || !strings.Contains(out.Detail, "HeartbeatTimeout") {
		t.Errorf("bad heartbeat: outcome %s %q, %v; want failed, saying why (the answer reached CloudFormation: no error)", out.Action, out.Detail, err)
	}
	if r := <-srv.answers; r.Status != cfn.StatusFailed || !strings.Contains(r.Reason, "HeartbeatTimeout") || len(hp.Puts) != 0 {
		t.Errorf("bad heartbeat: %s %q, puts %v", r.Status, r.Reason, hp.Puts)
	}
}

// A dry run still puts the stack's hooks: without them it would see no
// scale-in to report on.
func TestStackResourceDryRunPutsHooks(t *testing.T) {
	srv := newCFNServer(t)
	e := newEnv()
	e.cfg.DryRun = true
	e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}}
	hp := &hookstest.AutoScaling{Groups: e.asg}
	h := deployment(e, hp, "node-drainer", nil)
	if _, err := h.Serve(context.Background(), stackPayload(t, srv.URL, cfn.RequestCreate, hookProps("blue"), nil)); err != nil {
		t.Fatal(err)
	}
	if r := <-srv.answers; r.Status != cfn.StatusSuccess || len(hp.Puts) != 1 {
		t.Errorf("dry run: %s %q, puts %v; want the hook put", r.Status, r.Reason, hp.Puts)
	}
}

// An answer that cannot reach CloudFormation is the invocation's error, so
// that Lambda tries again (CloudFormation would wait an hour otherwise).
func TestStackResourceAnswerLost(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}}
	h := deployment(e, &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{}}, "node-drainer", nil)
	if _, err := h.Serve(context.Background(), stackPayload(t, url, cfn.RequestCreate, hookProps("blue"), nil)); err == nil || !strings.Contains(err.Error(), "answering CloudFormation") {
		t.Errorf("answer lost: %v; want an error for Lambda to retry", err)
	}
}

// An update whose old hook cannot be removed (its group's grant already
// gone) still succeeds, saying what it left; a delete that cannot remove a
// hook fails, naming it.
func TestStackResourceLeftHook(t *testing.T) {
	srv := newCFNServer(t)
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}, {AutoScalingGroupName: aws.String("green")}}
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"green": {markedBy("node-drainer-terminate", "node-drainer")}},
		DeleteErr: errors.New("AccessDenied")}
	h := deployment(e, hp, "node-drainer", nil)
	out, err := h.Serve(context.Background(), stackPayload(t, srv.URL, cfn.RequestUpdate, hookProps("blue"), hookProps("blue", "green")))
	if r := <-srv.answers; err != nil || r.Status != cfn.StatusSuccess || !strings.Contains(out.Detail, "left green") {
		t.Errorf("update: %s %q, outcome %q, %v; want SUCCESS saying green's hook was left", r.Status, r.Reason, out.Detail, err)
	}
	_, err = h.Serve(context.Background(), stackPayload(t, srv.URL, cfn.RequestDelete, hookProps("green"), nil))
	if r := <-srv.answers; err != nil || r.Status != cfn.StatusFailed || !strings.Contains(r.Reason, "green") {
		t.Errorf("delete: %s %q, %v; want FAILED naming green", r.Status, r.Reason, err)
	}
}

// terraformPayload is what aws_lambda_invocation.hooks sends (lifecycle_scope
// CRUD): the module's input with terraform's action under "tf".
func terraformPayload(t *testing.T, action string, props map[string]any) []byte {
	t.Helper()
	in := map[string]any{"NodeDrainer": "lifecycle-hooks"}
	for k, v := range props {
		if k != "AsgNames" && k != "ServiceToken" { // the module lists none: its own resources hook the listed groups
			in[k] = v
		}
	}
	in["tf"] = map[string]any{"action": action, "prev_input": nil}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// terraform's invocation: create checks the settings and puts what the
// tagged groups lack (here nothing: the tagged group has our hook);
// delete removes ours from the tagged groups (not another tool's hook, not
// a group of another value); a bad setting or an action terraform's
// CREATE_ONLY scope would send (none) is the invocation's error, with
// nothing changed.
func TestTerraformInvocationHooks(t *testing.T) {
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}, taggedGroup("tagged", "true"), taggedGroup("other", "false")}
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{
		"blue":   {{LifecycleHookName: aws.String("node-drainer-terminate")}},
		"tagged": {markedBy("node-drainer-terminate", "node-drainer"), {LifecycleHookName: aws.String("nth-terminate")}},
		"other":  {markedBy("node-drainer-terminate", "node-drainer")},
	}}
	h := deployment(e, hp, "node-drainer", nil)
	handle := func(payload []byte) (Outcome, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return h.Serve(ctx, payload)
	}

	bad := hookProps()
	bad["HeartbeatTimeout"] = "5m"
	if out, err := handle(terraformPayload(t, "create", bad)); err == nil || !strings.Contains(err.Error(), "HeartbeatTimeout") || out.Action != ActionFailed {
		t.Errorf("create with a bad heartbeat: %s %q, %v; want an error naming HeartbeatTimeout", out.Action, out.Detail, err)
	}
	for _, action := range []string{"", "destroy"} {
		if _, err := handle(terraformPayload(t, action, hookProps())); err == nil || !strings.Contains(err.Error(), "CRUD") {
			t.Errorf("action %q: %v; want an error saying lifecycle_scope must be CRUD", action, err)
		}
	}
	if out, err := handle(terraformPayload(t, "create", hookProps())); err != nil || out.Event != "stack-resource" || out.Action != ActionHooks {
		t.Errorf("create: %+v, %v", out, err)
	}
	if out, err := handle(terraformPayload(t, "update", hookProps())); err != nil || out.Action != ActionHooks {
		t.Errorf("update: %+v, %v", out, err)
	}
	if len(hp.Puts) != 0 || len(hp.Deletes) != 0 {
		t.Fatalf("create, update and the refused requests changed hooks: puts %v, deletes %v", hp.Puts, hp.Deletes)
	}

	out, err := handle(terraformPayload(t, "delete", hookProps()))
	if err != nil || !strings.Contains(out.Detail, "removed tagged/node-drainer-terminate") {
		t.Fatalf("delete: %+v, %v", out, err)
	}
	if slices.Sort(hp.Deletes); !slices.Equal(hp.Deletes, []string{"other/node-drainer-terminate", "tagged/node-drainer-terminate"}) {
		t.Errorf("delete removed %v; want the tagged group's hook and the one marked ours on the group whose value changed (blue's is terraform's own resource, unmarked here; nth's is not ours)", hp.Deletes)
	}

	hp.DeleteErr = errors.New("AccessDenied")
	hp.Have["tagged"] = append(hp.Have["tagged"], markedBy("node-drainer-terminate", "node-drainer"))
	if _, err := handle(terraformPayload(t, "delete", hookProps())); err == nil || !strings.Contains(err.Error(), "tagged") {
		t.Errorf("a delete that cannot remove a hook: %v; want an error naming the group (terraform destroy fails on it)", err)
	}
}

// An update that renames the terminate hook removes the old name from the
// tagged groups (the sweep put it; the rules forward only the new one); one
// that turns a hook off leaves it (its operator may manage it now).
func TestHooksUpdateRenameOnTaggedGroups(t *testing.T) {
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("tagged", "true"), taggedGroup("other", "false")}
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{
		"tagged": {markedBy("node-drainer-terminate", "node-drainer"), {LifecycleHookName: aws.String("nth-terminate")}},
		"other":  {markedBy("node-drainer-terminate", "node-drainer")},
	}}
	h := deployment(e, hp, "node-drainer", nil)
	update := func(old, props map[string]any) {
		t.Helper()
		in := terraformPayload(t, "update", props)
		var m map[string]any
		if err := json.Unmarshal(in, &m); err != nil {
			t.Fatal(err)
		}
		m["tf"].(map[string]any)["prev_input"] = old
		b, _ := json.Marshal(m)
		if out, err := h.Serve(context.Background(), b); err != nil {
			t.Fatalf("update: %+v, %v", out, err)
		}
	}
	off := hookProps()
	off["CreateTerminateHook"] = "false"
	update(hookProps(), off)
	if len(hp.Deletes) != 0 {
		t.Errorf("turning the hook off removed %v; want it left", hp.Deletes)
	}
	renamed := hookProps()
	renamed["TerminateHookName"] = "drainer-terminate"
	update(hookProps(), renamed)
	if !slices.Equal(hp.Deletes, []string{"tagged/node-drainer-terminate"}) {
		t.Errorf("renaming removed %v; want the old name from the tagged group only (not another value's group, not nth's)", hp.Deletes)
	}
}

// The answer is PUT as cfn.LambdaWrap puts it (its JSON, no Content-Type),
// again after a 5xx or a 429, not after another status (an expired URL's
// 403), and never past the invocation's context: a URL that does not
// answer does not hold the function to its timeout.
func TestAnswerStack(t *testing.T) {
	answer := &cfn.Response{Status: cfn.StatusSuccess, PhysicalResourceID: "node-drainer-lifecycle-hooks", StackID: "s", RequestID: "r", LogicalResourceID: "LifecycleHooks"}
	for _, tc := range []struct {
		name     string
		statuses []int // answered in turn; the last one from then on; 0: no answer
		timeout  time.Duration
		tries    int
		wantErr  string
	}{
		{"answered", []int{200}, 5 * time.Second, 1, ""},
		{"503 and 429, then answered", []int{503, 429, 200}, 10 * time.Second, 3, ""},
		{"an expired URL", []int{403}, 5 * time.Second, 1, "403"},
		{"always 500", []int{500}, 30 * time.Second, stackAnswerTries, "4 attempt(s): CloudFormation's URL answered 500"},
		{"no answer", []int{0}, 300 * time.Millisecond, 1, "1 attempt(s): "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tries atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := int(tries.Add(1))
				body, _ := io.ReadAll(r.Body)
				var got cfn.Response
				if r.Method != http.MethodPut || r.Header.Get("Content-Type") != "" || json.Unmarshal(body, &got) != nil || got.PhysicalResourceID != answer.PhysicalResourceID || got.Status != cfn.StatusSuccess {
					t.Errorf("answer %s, Content-Type %q: %s", r.Method, r.Header.Get("Content-Type"), body)
				}
				status := tc.statuses[min(n, len(tc.statuses))-1]
				if status == 0 {
					<-r.Context().Done()
					return
				}
				w.WriteHeader(status)
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
			defer cancel()
			err := answerStack(ctx, srv.URL, answer)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
			if n := int(tries.Load()); n != tc.tries {
				t.Errorf("%d attempts, want %d", n, tc.tries)
			}
		})
	}
}

// TestStackAnswerEndsBeforeTheDeadline: CloudFormation's URL hangs; the
// answer is given up DEADLINE_MARGIN before the invocation's deadline and
// the invocation fails, so that Lambda retries it, rather than running
// into its timeout, which answers nothing.
func TestStackAnswerEndsBeforeTheDeadline(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hung.Close()
	defer close(release) // before Close, which waits for the handlers
	e := newEnv()
	e.cfg.DeadlineMargin = 500 * time.Millisecond
	e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}}
	h := deployment(e, &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{}}, "node-drainer", nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := h.Serve(ctx, stackPayload(t, hung.URL, cfn.RequestCreate, hookProps("blue"), nil))
	if ctx.Err() != nil {
		t.Fatalf("the invocation ran to its deadline (%v): the answer was not bounded by it less the margin", err)
	}
	if err == nil || !strings.Contains(err.Error(), "answering CloudFormation") {
		t.Fatalf("error %v, want the answer's failure, for Lambda to retry", err)
	}
}

// A HeartbeatTimeout the sweep's period (and a minute) does not fit in is
// refused by Create and by an Update's both steps, before anything changes:
// after Lambda's last retry of a failed drain only the next sweep heartbeats
// its hook (the simulation's I3, seed 1187). A cron schedule, or none, is not
// checked; a Delete is never refused.
func TestHeartbeatMustOutlastTheSweep(t *testing.T) {
	for _, tc := range []struct {
		heartbeat, schedule string
		refused             bool
	}{
		{"300", "rate(5 minutes)", true},
		{"359", "rate(5 minutes)", true},
		{"360", "rate(5 minutes)", false},
		{"3600", "rate(1 hour)", true},
		{"300", "rate(4 minutes)", false},
		{"300", "cron(0/10 * * * ? *)", false},
		{"300", "", false},
	} {
		srv := newCFNServer(t)
		e := newEnv()
		e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}}
		hp := &hookstest.AutoScaling{Groups: e.asg}
		h := deployment(e, hp, "node-drainer", nil)
		p := hookProps("blue")
		p["HeartbeatTimeout"], p["SweepSchedule"] = tc.heartbeat, tc.schedule
		release := hookProps("blue")
		release["HeartbeatTimeout"], release["SweepSchedule"], release["Release"] = tc.heartbeat, tc.schedule, "true"
		for _, req := range [][]byte{
			stackPayload(t, srv.URL, cfn.RequestCreate, p, nil),
			stackPayload(t, srv.URL, cfn.RequestUpdate, release, hookProps("blue", "green")),
		} {
			out, _ := h.Serve(context.Background(), req)
			r := <-srv.answers
			refused := r.Status == cfn.StatusFailed && strings.Contains(r.Reason, "sweep's period")
			if refused != tc.refused {
				t.Errorf("HeartbeatTimeout %s, SweepSchedule %q: %s %q (outcome %s); want refused %v", tc.heartbeat, tc.schedule, r.Status, r.Reason, out.Action, tc.refused)
			}
		}
		if tc.refused && (len(hp.Puts) != 0 || len(hp.Deletes) != 0) {
			t.Errorf("HeartbeatTimeout %s, SweepSchedule %q refused, yet puts %v, deletes %v", tc.heartbeat, tc.schedule, hp.Puts, hp.Deletes)
		}
		del := hookProps("blue")
		del["HeartbeatTimeout"], del["SweepSchedule"] = tc.heartbeat, tc.schedule
		if _, err := h.Serve(context.Background(), stackPayload(t, srv.URL, cfn.RequestDelete, del, nil)); err != nil {
			t.Errorf("delete with HeartbeatTimeout %s, SweepSchedule %q: %v", tc.heartbeat, tc.schedule, err)
		}
		if r := <-srv.answers; r.Status != cfn.StatusSuccess {
			t.Errorf("delete with HeartbeatTimeout %s, SweepSchedule %q: %s %q", tc.heartbeat, tc.schedule, r.Status, r.Reason)
		}
	}
}
