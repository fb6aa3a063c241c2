package handler

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// invokedAs is ctx as Lambda gives it to an invocation of self's function
// (its ARN, which the removal mark is read at).
func invokedAs(ctx context.Context, self *fakeSelf) context.Context {
	return lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{InvokedFunctionArn: self.arn()})
}

// waitingIn is g with instance id waiting in state (a lifecycle action
// pending under the group's hooks of that transition).
func waitingIn(g astypes.AutoScalingGroup, id string, state astypes.LifecycleState) astypes.AutoScalingGroup {
	g.Instances = append(g.Instances, astypes.Instance{InstanceId: aws.String(id), LifecycleState: state, HealthStatus: aws.String("Healthy")})
	return g
}

// sweepOnce runs one sweep of h as Lambda invokes it.
func sweepOnce(h *Handler, self *fakeSelf) (Outcome, error) {
	ctx, cancel := context.WithTimeout(invokedAs(context.Background(), self), 5*time.Second)
	defer cancel()
	return h.Handle(ctx, sweepEvent())
}

// TestSweepKeepsHooksWhenTheSecondMarkReadFails: a sweep puts a hook, then
// cannot read the removal's mark again (Lambda's API failing past the
// retries). A read that fails is no verdict: no hook is taken back (rule
// 17: deleting a hook completes the actions pending under it, and a drain
// in flight on another tagged group would end), and the failure is said,
// for the next sweep to decide.
func TestSweepKeepsHooksWhenTheSecondMarkReadFails(t *testing.T) {
	e := newEnv()
	tagMode(e)
	e.asg.groups = []astypes.AutoScalingGroup{waitingIn(taggedGroup("draining", "true"), idA, astypes.LifecycleStateTerminatingWait), taggedGroup("new-nodes", "true")}
	hp := &hookPutter{fakeASG: e.asg, have: map[string][]astypes.LifecycleHook{"draining": {markedBy("node-drainer-terminate", "node-drainer")}}}
	self := &fakeSelf{name: "node-drainer"}
	self.afterGet = func() { // the second read fails
		self.mu.Lock()
		defer self.mu.Unlock()
		self.err = errors.New("ServiceException: status code 500")
	}
	h := deployment(e, hp, "node-drainer", self)
	out, err := sweepOnce(h, self)
	if len(hp.deletes) != 0 || !slices.Equal(hp.hookNames("draining"), []string{"node-drainer-terminate"}) {
		t.Errorf("second read of the mark failed: deleted %v, draining has %v; want no hook taken back (the drain under draining's would end)", hp.deletes, hp.hookNames("draining"))
	}
	if !slices.Equal(hp.hookNames("new-nodes"), []string{"node-drainer-terminate"}) {
		t.Errorf("new-nodes has %v; want the hook just put kept (the next sweep reads the mark again)", hp.hookNames("new-nodes"))
	}
	if err == nil || out.Sweep == nil || !strings.Contains(strings.Join(out.Sweep.Failed, "; "), "removal mark") {
		t.Errorf("sweep %+v, error %v; want the failed read said, and the sweep failed", out.Sweep, err)
	}
}

// TestSweepTakesBackOnlyWhatItPutOnceRemoved: the removal begins while a
// sweep puts hooks (its second read finds the mark). The sweep takes back
// the hooks it put, and no other: a tagged group whose hook it did not
// touch is the removal's to take. A hook it put over one an instance waits
// under (corrected settings) is not deleted by the sweep either (rule 17):
// it is left to the removal, and said.
func TestSweepTakesBackOnlyWhatItPutOnceRemoved(t *testing.T) {
	e := newEnv()
	tagMode(e)
	e.asg.groups = []astypes.AutoScalingGroup{
		waitingIn(taggedGroup("draining", "true"), idA, astypes.LifecycleStateTerminatingWait),
		waitingIn(taggedGroup("corrected", "true"), idB, astypes.LifecycleStateTerminatingWait),
		taggedGroup("new-nodes", "true"),
	}
	stale := markedBy("node-drainer-terminate", "node-drainer")
	stale.HeartbeatTimeout = aws.Int32(600)
	hp := &hookPutter{fakeASG: e.asg, have: map[string][]astypes.LifecycleHook{
		"draining": {markedBy("node-drainer-terminate", "node-drainer")}, "corrected": {stale},
	}}
	self := &fakeSelf{name: "node-drainer"}
	self.afterGet = func() { // the removal marked right after the first read
		self.mu.Lock()
		defer self.mu.Unlock()
		self.tags = map[string]string{removalTag: e.now.UTC().Format(time.RFC3339)}
	}
	h := deployment(e, hp, "node-drainer", self)
	out, _ := sweepOnce(h, self)
	if !slices.Equal(hp.deletes, []string{"new-nodes/node-drainer-terminate"}) {
		t.Errorf("the removal began during the sweep: deleted %v; want new-nodes' hook alone (the one it created)", hp.deletes)
	}
	for _, g := range []string{"draining", "corrected"} {
		if got := hp.hookNames(g); !slices.Equal(got, []string{"node-drainer-terminate"}) {
			t.Errorf("%s has %v; want its hook (an instance waits under it)", g, got)
		}
	}
	if out.Sweep == nil || !strings.Contains(strings.Join(out.Sweep.Failed, "; "), "corrected/node-drainer-terminate") {
		t.Errorf("sweep %+v; want the hook left under corrected's waiting instance said", out.Sweep)
	}
}

// The mark is read at the ARN Lambda gives each invocation, and nowhere
// else (the templates grant no lambda:GetFunctionConfiguration): with no
// such ARN the mark is unread, and the sweep puts no hook, saying why.
func TestRemovalMarkReadAtTheInvocationsARNAlone(t *testing.T) {
	e := newEnv()
	tagMode(e)
	e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("new-nodes", "true")}
	hp := &hookPutter{fakeASG: e.asg}
	self := &fakeSelf{name: "node-drainer"}
	h := deployment(e, hp, "node-drainer", self)
	out, _ := h.Handle(context.Background(), sweepEvent())
	if len(hp.puts) != 0 || out.Sweep == nil || !strings.Contains(strings.Join(out.Sweep.Failed, "; "), "removal mark") {
		t.Errorf("no invocation ARN: puts %v, sweep %+v; want nothing put and the mark said unread", hp.puts, out.Sweep)
	}
	if out, err := sweepOnce(h, self); err != nil || !slices.Equal(hp.hookNames("new-nodes"), []string{"node-drainer-terminate"}) {
		t.Errorf("invoked by Lambda: %+v, %v; new-nodes has %v, want our hook", out.Sweep, err, hp.hookNames("new-nodes"))
	}
}

// TestSweepSaysTheRemovalMark: a removal mark is never silent. While a
// removal may still run (the mark younger than removalMarkStale), the
// sweep puts no hook and says why in its summary and its metrics. A mark
// older than that is left by a removal that failed or was abandoned (a
// terraform destroy that failed, then an apply, which does not invoke the
// unchanged hooks resource again): no removal runs under it, so the sweep
// puts the hooks as usual, on the groups the failed removal stripped and
// on those tagged since, and says the mark is there and how to take it off.
func TestSweepSaysTheRemovalMark(t *testing.T) {
	for _, tc := range []struct {
		name   string
		age    time.Duration
		hooked bool
		note   string
	}{
		{"a removal running", time.Minute, false, "no hook put on tagged groups"},
		{"a removal that failed long ago", 2 * time.Hour, true, "aws lambda untag-resource"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv()
			tagMode(e)
			e.cfg.FunctionName = "node-drainer"
			e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("stripped", "true")}
			hp := &hookPutter{fakeASG: e.asg}
			self := &fakeSelf{name: "node-drainer", tags: map[string]string{removalTag: e.now.Add(-tc.age).UTC().Format(time.RFC3339)}}
			var buf bytes.Buffer
			h := New(e.cfg, Clients{Kube: e.kube, EC2: e.ec2, ASG: e.asg, AutoScaling: e.asg, Hooks: hp, Self: self}, nil,
				WithClock(newMovingClock(func() time.Time { return e.now })), WithMetrics(&buf))
			out, err := sweepOnce(h, self)
			if err != nil {
				t.Fatalf("sweep: %+v, %v", out.Sweep, err)
			}
			if got := len(hp.hookNames("stripped")) > 0; got != tc.hooked {
				t.Errorf("stripped has %v; want hooked %v", hp.hookNames("stripped"), tc.hooked)
			}
			if out.Sweep == nil || out.Sweep.RemovalMarked == "" || !strings.Contains(strings.Join(out.Sweep.Notes, "; "), tc.note) {
				t.Errorf("sweep %+v; want the mark said (%q)", out.Sweep, tc.note)
			}
			if m := metricsLine(t, &buf); m["SweepRemovalMarked"] != 1.0 {
				t.Errorf("metric SweepRemovalMarked = %v, want 1", m["SweepRemovalMarked"])
			}
		})
	}
}
