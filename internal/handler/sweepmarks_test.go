package handler

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// TestSweepLeavesAHookNotOurs (C5, S3, S9): on tagged groups, a hook of
// our name that another deployment's mark names (with another heartbeat),
// or that no deployment marked (made by hand), is not this deployment's.
// Sweep after sweep it is left byte for byte, not claimed, not corrected,
// its name not added to the mark, and the sweep says so in its notes
// without failing (the hook is there, its events are ours by name: no
// retry or alarm would mend it); a group without one gets ours.
func TestSweepLeavesAHookNotOurs(t *testing.T) {
	e := newEnv()
	tagMode(e)
	e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("theirs", "true"), taggedGroup("by-hand", "true"), taggedGroup("new-nodes", "true")}
	theirs := markedBy("node-drainer-terminate", "other-fn")
	theirs.HeartbeatTimeout = aws.Int32(60)
	byHand := astypes.LifecycleHook{LifecycleHookName: aws.String("node-drainer-terminate"), LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"),
		HeartbeatTimeout: aws.Int32(60), DefaultResult: aws.String("CONTINUE"), NotificationMetadata: aws.String(`{"team":"x"}`)}
	hp := &hookPutter{fakeASG: e.asg, have: map[string][]astypes.LifecycleHook{"theirs": {theirs}, "by-hand": {byHand}}}
	self := &fakeSelf{name: "node-drainer"}
	h := deployment(e, hp, "node-drainer", self)
	for i := range 2 {
		out, err := sweepOnce(h, self)
		if err != nil || out.Sweep == nil || len(out.Sweep.Failed) != 0 {
			t.Fatalf("sweep %d: %+v, %v; want no failure", i, out.Sweep, err)
		}
		notes := strings.Join(out.Sweep.Notes, "; ")
		if !strings.Contains(notes, "hook node-drainer-terminate on group theirs belongs to deployment other-fn") || !strings.Contains(notes, "on group by-hand carries no node-drainer deployment's mark") {
			t.Errorf("sweep %d notes %q; want both hooks said not ours", i, notes)
		}
	}
	if !slices.Equal(hp.calls, []string{"put new-nodes/node-drainer-terminate"}) {
		t.Errorf("two sweeps: calls %v; want new-nodes' hook put, nothing else", hp.calls)
	}
	if !reflect.DeepEqual(hp.have["theirs"], []astypes.LifecycleHook{theirs}) || !reflect.DeepEqual(hp.have["by-hand"], []astypes.LifecycleHook{byHand}) {
		t.Errorf("hooks not ours changed: theirs %+v, by-hand %+v", hp.have["theirs"], hp.have["by-hand"])
	}
}
