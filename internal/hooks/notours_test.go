package hooks

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/hooks/hookstest"
)

// TestSweepLeavesAHookNotOurs (C5, S3, S9): on tagged groups, a hook of
// our name that another deployment's mark names (with another heartbeat),
// or that no deployment marked (made by hand), is not this deployment's.
// Sweep after sweep it is left byte for byte, not claimed, not corrected,
// its name not added to the mark, and the sweep says so in its notes
// without failing (the hook is there, its events are ours by name: no
// retry or alarm would mend it; the handler's sweep puts NotOurs in its
// notes); a group without one gets ours.
func TestSweepLeavesAHookNotOurs(t *testing.T) {
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("theirs", "true"), taggedGroup("by-hand", "true"), taggedGroup("new-nodes", "true")}
	theirs := markedBy("node-drainer-terminate", "other-fn")
	theirs.HeartbeatTimeout = aws.Int32(60)
	byHand := astypes.LifecycleHook{LifecycleHookName: aws.String("node-drainer-terminate"), LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"),
		HeartbeatTimeout: aws.Int32(60), DefaultResult: aws.String("CONTINUE"), NotificationMetadata: aws.String(`{"team":"x"}`)}
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"theirs": {theirs}, "by-hand": {byHand}}}
	self := &fakeSelf{name: "node-drainer"}
	k := deployment(e, hp, "node-drainer", self)
	for i := range 2 {
		res, _, err := sweepOnce(k, self)
		if err != nil || len(res.Failed) != 0 {
			t.Fatalf("sweep %d: %+v, %v; want no failure", i, res, err)
		}
		notes := strings.Join(res.NotOurs, "; ")
		if !strings.Contains(notes, "hook node-drainer-terminate on group theirs belongs to deployment other-fn") || !strings.Contains(notes, "on group by-hand carries no node-drainer deployment's mark") {
			t.Errorf("sweep %d said %q; want both hooks said not ours (the sweep's notes)", i, notes)
		}
	}
	if !slices.Equal(hp.Calls, []string{"put new-nodes/node-drainer-terminate"}) {
		t.Errorf("two sweeps: calls %v; want new-nodes' hook put, nothing else", hp.Calls)
	}
	if !reflect.DeepEqual(hp.Have["theirs"], []astypes.LifecycleHook{theirs}) || !reflect.DeepEqual(hp.Have["by-hand"], []astypes.LifecycleHook{byHand}) {
		t.Errorf("hooks not ours changed: theirs %+v, by-hand %+v", hp.Have["theirs"], hp.Have["by-hand"])
	}
}

// TestStackUpdateRefusesOnlyNewlyListedGroups: an update that lists a
// group carrying another deployment's hook of our name fails, naming it,
// with nothing written; its rollback (the old properties again) succeeds:
// a group the deployment already had is not refused over a hook not ours
// found there now (made by hand since), which is left byte for byte and
// said in the answer.
func TestStackUpdateRefusesOnlyNewlyListedGroups(t *testing.T) {
	srv := newCFNServer(t)
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}, {AutoScalingGroupName: aws.String("green")}}
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"green": {markedBy("node-drainer-terminate", "other-fn")}}}
	h := deployment(e, hp, "node-drainer", nil)
	if r := cfnCall(t, h, srv, cfn.RequestCreate, hookProps("blue"), nil); r.Status != cfn.StatusSuccess {
		t.Fatalf("create: %s %q", r.Status, r.Reason)
	}
	byHand := astypes.LifecycleHook{LifecycleHookName: aws.String("node-drainer-terminate"), LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"),
		HeartbeatTimeout: aws.Int32(60), DefaultResult: aws.String("CONTINUE")}
	hp.Have["blue"], hp.Calls = []astypes.LifecycleHook{byHand}, nil
	r := cfnCall(t, h, srv, cfn.RequestUpdate, hookProps("blue", "green"), hookProps("blue"))
	if r.Status != cfn.StatusFailed || !strings.Contains(r.Reason, "hook node-drainer-terminate on group green belongs to deployment other-fn: two deployments cannot share a hook") ||
		strings.Contains(r.Reason, "blue") || len(hp.Calls) != 0 {
		t.Errorf("update listing green: %s %q, calls %v; want FAILED naming green's owner alone, nothing written", r.Status, r.Reason, hp.Calls)
	}
	r = cfnCall(t, h, srv, cfn.RequestUpdate, hookProps("blue"), hookProps("blue", "green"))
	if changed := fmt.Sprint(r.Data["Changed"]); r.Status != cfn.StatusSuccess || !strings.Contains(changed, "left hook node-drainer-terminate on group blue carries no node-drainer deployment's mark") {
		t.Errorf("the rollback: %s %q, changed %q; want SUCCESS, blue's hook said left", r.Status, r.Reason, changed)
	}
	if len(hp.Calls) != 0 || !reflect.DeepEqual(hp.Have["blue"], []astypes.LifecycleHook{byHand}) || len(hp.Have["green"]) != 1 {
		t.Errorf("the rollback wrote %v; blue %+v, green %+v", hp.Calls, hp.Have["blue"], hp.Have["green"])
	}
}
