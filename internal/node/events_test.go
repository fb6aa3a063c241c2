package node

import (
	"errors"
	"testing"
	"time"
)

// Each constructor gives its Event's reason, type and message: the texts
// operators (and the end-to-end tests) read.
func TestEventConstructors(t *testing.T) {
	since := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		got  Event
		want Event
	}{
		{EventDrainStarted("EC2 Instance-terminate Lifecycle Action"), Event{ReasonDrainStarted, false,
			"draining on EC2 Instance-terminate Lifecycle Action (cordoned, NoSchedule taint node-drainer.io/draining, excluded from load balancers)"}},
		{EventDrainCompleted([]string{"a/p1", "b/p2"}), Event{ReasonDrainCompleted, false, "evicted 2 pods: a/p1, b/p2"}},
		{EventDrainCompletedDeadKubelet(2, []string{"a/p1: x", "b/p2: y"}), Event{ReasonDrainCompleted, true,
			"node NotReady: evicted 2 pods, not waiting for a dead kubelet; still bound: a/p1: x; b/p2: y"}},
		{EventDrainBlocked(0, []string{"a/p1: pdb"}), Event{ReasonDrainBlocked, true, "drain not finished; pods still on the node: a/p1: pdb"}},
		{EventDrainBlocked(90*time.Second+400*time.Millisecond, []string{"a/p1: pdb", "b/p2: pdb"}), Event{ReasonDrainBlocked, true,
			"drain not finished after 1m30s; pods still on the node: a/p1: pdb; b/p2: pdb"}},
		{EventDrainFailed(errors.New("boom")), Event{ReasonDrainFailed, true, "drain failed until the deadline: boom"}},
		{EventVolumesDetached(1234567*time.Microsecond, []string{"pv-1", "pv-2"}), Event{ReasonVolumesReleased, false, "volumes detached (waited 1.235s): pv-1, pv-2"}},
		{EventVolumesNotDetached("not detached in time", []string{"pv-1"}), Event{ReasonVolumesReleased, true, "volumes not detached in time: pv-1"}},
		{EventCordonedOn("EC2 Spot Instance Interruption Warning"), Event{ReasonCordoned, false, "cordoned on EC2 Spot Instance Interruption Warning"}},
		{EventCordonedFor("scheduled change X starts Y"), Event{ReasonCordoned, false, "scheduled change X starts Y"}},
		{EventOutOfService("EC2 reports instance i-1 stopped", true, []string{"a/p1"}, []string{"csi-1", "csi-2"}, 1500*time.Microsecond), Event{ReasonOutOfService, true,
			"EC2 reports instance i-1 stopped: cordoned, tainted node.kubernetes.io/out-of-service, force-deleted pods [a/p1], deleted volume attachments [csi-1, csi-2] in 2ms"}},
		{EventOutOfService("EC2 reports instance i-1 stopped", false, nil, []string{"csi-1"}, time.Second), Event{ReasonOutOfService, true,
			"EC2 reports instance i-1 stopped: cordoned, force-deleted pods [], deleted volume attachments [csi-1] in 1s"}},
		{EventNotForced("EC2 reports instance i-1 running", false), Event{ReasonNotForced, true,
			"EC2 reports instance i-1 running; the node is left as it is (no out-of-service taint, no force-deletion)"}},
		{EventNotForced("not safe to force: node n is gone", true), Event{ReasonNotForced, true, "not safe to force: node n is gone; nothing more is forced"}},
		{EventRecovered("", "expired causes released"), Event{ReasonRecovered, false, "expired causes released"}},
		{EventRecovered("EC2 reports instance i-1 running", "undid"), Event{ReasonRecovered, false, "EC2 reports instance i-1 running: undid"}},
		{EventLifecycleCompleted("asg", "hook", "CONTINUE", false), Event{ReasonLifecycleComplete, false, "lifecycle action asg/hook completed with CONTINUE"}},
		{EventLifecycleCompleted("asg", "hook", "ABANDON", true), Event{ReasonLifecycleComplete, true, "lifecycle action asg/hook completed with ABANDON"}},
		{EventContinued(14*time.Minute+20*time.Second+600*time.Millisecond, 2, []string{"a/p1: pdb"}), Event{ReasonContinued, false,
			"drain running for 14m21s continues in a new invocation (attempt 2); still on the node: a/p1: pdb"}},
		{EventZombie(since, "i-1", "reported only"), Event{ReasonZombie, true,
			"NotReady since 2026-11-25T09:00:00Z while EC2 reports instance i-1 running; reported only"}},
		{EventZombieReplaced(since, "i-1", "asg"), Event{ReasonZombie, true,
			"NotReady since 2026-11-25T09:00:00Z while EC2 reports instance i-1 running; instance marked Unhealthy in asg, which replaces it through its terminate hook (ZOMBIE_ACTION=replace)"}},
	} {
		if tc.got != tc.want {
			t.Errorf("got  %+v\nwant %+v", tc.got, tc.want)
		}
	}
}
