package hooks

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/hooks/hookstest"
)

// waitingIn is g with instance id waiting in state (a lifecycle action
// pending under the group's hooks of that transition).
func waitingIn(g astypes.AutoScalingGroup, id string, state astypes.LifecycleState) astypes.AutoScalingGroup {
	g.Instances = append(g.Instances, astypes.Instance{InstanceId: aws.String(id), LifecycleState: state, HealthStatus: aws.String("Healthy")})
	return g
}

// TestSweepKeepsHooksWhenTheSecondMarkReadFails: a sweep puts a hook, then
// cannot read the removal's mark again (Lambda's API failing past the
// retries). A read that fails is no verdict: no hook is taken back (rule
// 17: deleting a hook completes the actions pending under it, and a drain
// in flight on another tagged group would end), and the failure is said,
// for the next sweep to decide.
func TestSweepKeepsHooksWhenTheSecondMarkReadFails(t *testing.T) {
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{waitingIn(taggedGroup("draining", "true"), idA, astypes.LifecycleStateTerminatingWait), taggedGroup("new-nodes", "true")}
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"draining": {markedBy("node-drainer-terminate", "node-drainer")}}}
	self := &fakeSelf{name: "node-drainer"}
	self.afterGet = func() { // the second read fails
		self.mu.Lock()
		defer self.mu.Unlock()
		self.err = errors.New("ServiceException: status code 500")
	}
	h := deployment(e, hp, "node-drainer", self)
	_, _, err := sweepOnce(h, self)
	if len(hp.Deletes) != 0 || !slices.Equal(hp.HookNames("draining"), []string{"node-drainer-terminate"}) {
		t.Errorf("second read of the mark failed: deleted %v, draining has %v; want no hook taken back (the drain under draining's would end)", hp.Deletes, hp.HookNames("draining"))
	}
	if !slices.Equal(hp.HookNames("new-nodes"), []string{"node-drainer-terminate"}) {
		t.Errorf("new-nodes has %v; want the hook just put kept (the next sweep reads the mark again)", hp.HookNames("new-nodes"))
	}
	if err == nil || !strings.Contains(err.Error(), "removal mark") {
		t.Errorf("error %v; want the failed read said, and the sweep failed", err)
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
	e.asg.groups = []astypes.AutoScalingGroup{
		waitingIn(taggedGroup("draining", "true"), idA, astypes.LifecycleStateTerminatingWait),
		waitingIn(taggedGroup("corrected", "true"), idB, astypes.LifecycleStateTerminatingWait),
		taggedGroup("new-nodes", "true"),
	}
	stale := markedBy("node-drainer-terminate", "node-drainer")
	stale.HeartbeatTimeout = aws.Int32(600)
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{
		"draining": {markedBy("node-drainer-terminate", "node-drainer")}, "corrected": {stale},
	}}
	self := &fakeSelf{name: "node-drainer"}
	self.afterGet = func() { // the removal marked right after the first read
		self.mu.Lock()
		defer self.mu.Unlock()
		self.tags = map[string]string{removalTag: e.now.UTC().Format(time.RFC3339)}
	}
	h := deployment(e, hp, "node-drainer", self)
	res, _, _ := sweepOnce(h, self)
	if !slices.Equal(hp.Deletes, []string{"new-nodes/node-drainer-terminate"}) {
		t.Errorf("the removal began during the sweep: deleted %v; want new-nodes' hook alone (the one it created)", hp.Deletes)
	}
	for _, g := range []string{"draining", "corrected"} {
		if got := hp.HookNames(g); !slices.Equal(got, []string{"node-drainer-terminate"}) {
			t.Errorf("%s has %v; want its hook (an instance waits under it)", g, got)
		}
	}
	if !strings.Contains(strings.Join(res.Failed, "; "), "corrected/node-drainer-terminate") {
		t.Errorf("sweep %+v; want the hook left under corrected's waiting instance said", res)
	}
}

// The mark is read at the ARN Lambda gives each invocation, and nowhere
// else (the templates grant no lambda:GetFunctionConfiguration): with no
// such ARN the mark is unread, and the sweep puts no hook, saying why.
func TestRemovalMarkReadAtTheInvocationsARNAlone(t *testing.T) {
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("new-nodes", "true")}
	hp := &hookstest.AutoScaling{Groups: e.asg}
	self := &fakeSelf{name: "node-drainer"}
	h := deployment(e, hp, "node-drainer", self)
	if _, _, err := sweepOnce(h, nil); len(hp.Puts) != 0 || err == nil || !strings.Contains(err.Error(), "removal mark") {
		t.Errorf("no invocation ARN: puts %v, error %v; want nothing put and the mark said unread", hp.Puts, err)
	}
	if res, _, err := sweepOnce(h, self); err != nil || !slices.Equal(hp.HookNames("new-nodes"), []string{"node-drainer-terminate"}) {
		t.Errorf("invoked by Lambda: %+v, %v; new-nodes has %v, want our hook", res, err, hp.HookNames("new-nodes"))
	}
}

// TestRemovalMarkHeededByItsAge: while a removal may still run (the mark
// younger than removalMarkStale), the sweep puts no hook and says why. A
// mark older than that is left by a removal that failed or was abandoned
// (a terraform destroy that failed, then an apply, which does not invoke
// the unchanged hooks resource again): no removal runs under it, so the
// sweep puts the hooks as usual, on the groups the failed removal stripped
// and on those tagged since, and says the mark is there and how to take it
// off. (The handler's TestSweepSaysTheRemovalMark: in its summary and its
// metrics.)
func TestRemovalMarkHeededByItsAge(t *testing.T) {
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
			e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("stripped", "true")}
			hp := &hookstest.AutoScaling{Groups: e.asg}
			since := e.now.Add(-tc.age).UTC().Format(time.RFC3339)
			self := &fakeSelf{name: "node-drainer", tags: map[string]string{removalTag: since}}
			res, st, err := sweepOnce(deployment(e, hp, "node-drainer", self), self)
			if err != nil {
				t.Fatalf("sweep: %+v, %v", res, err)
			}
			if got := len(hp.HookNames("stripped")) > 0; got != tc.hooked {
				t.Errorf("stripped has %v; want hooked %v", hp.HookNames("stripped"), tc.hooked)
			}
			if st.Marked() != since || !strings.Contains(st.Note(), tc.note) {
				t.Errorf("mark %q, note %q; want %q said (%q)", st.Marked(), st.Note(), since, tc.note)
			}
		})
	}
}
