package handler

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
)

// warmPoolNode marks idA's node as a drain into a warm pool leaves it: the
// terminate hold (cordon, drain taint, load-balancer exclusion), and, with
// stopped, the out-of-service hold its stop in the pool added.
func warmPoolNode(t *testing.T, e *env, since time.Time, stopped bool) {
	t.Helper()
	marks := []node.Mark{{Cause: node.CauseTerminate, Cordon: true, ExcludeLB: true, Draining: true}}
	if stopped {
		marks = append(marks, node.Mark{Cause: node.CauseOutOfService, Cordon: true, OutOfService: true})
	}
	for _, m := range marks {
		n, err := e.kube.CoreV1().Nodes().Get(t.Context(), nodeName(idA), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := node.ApplyTo(t.Context(), e.kube, n, m, since, false); err != nil {
			t.Fatal(err)
		}
	}
}

// inGroup has the fake Auto Scaling group list idA in state.
func inGroup(e *env, state astypes.LifecycleState) {
	e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String(asgName),
		Instances: []astypes.Instance{{InstanceId: aws.String(idA), LifecycleState: state}}}}
}

func unmarked(n *corev1.Node) bool {
	_, labeled := n.Labels[node.LabelExcludeLB]
	_, held := n.Annotations[node.AnnotationOwned]
	return !n.Spec.Unschedulable && !labeled && !held &&
		!node.HasTaint(n, node.TaintDraining) && !node.HasTaint(n, node.TaintOutOfService)
}

// An instance drained into a warm pool and launched from it again keeps its
// Node: the terminate hold is lifted once its group has it in service again
// (and only then), on its `running` event.
func TestRecoverFromWarmPool(t *testing.T) {
	since := time.Now().Add(-time.Hour)
	inPool := reading{state: instance.StateRunning, tagged: true, group: asgName}
	for _, tc := range []struct {
		name    string
		stopped bool // the stop in the pool was released (out-of-service hold)
		ec2     reading
		setup   func(*env)
		action  Action
		lifted  bool     // the terminate hold went
		held    []string // the causes left
	}{
		{name: "back in service", stopped: true, ec2: inPool, setup: func(e *env) { inGroup(e, astypes.LifecycleStateInService) },
			action: ActionRecovered, lifted: true},
		{name: "back, its stop's event lost", ec2: inPool, setup: func(e *env) { inGroup(e, astypes.LifecycleStateInService) },
			action: ActionRecovered, lifted: true},
		{name: "launching from the pool", stopped: true, ec2: inPool, setup: func(e *env) { inGroup(e, astypes.LifecycleStatePendingWait) },
			action: ActionRecovered, lifted: true},
		{name: "its terminate hook waits: the drain's hold stays", ec2: inPool, setup: func(e *env) { inGroup(e, astypes.LifecycleStateTerminatingWait) },
			action: ActionIgnored, held: []string{"terminate"}},
		{name: "running in the pool: not in service", stopped: true, ec2: inPool, setup: func(e *env) { inGroup(e, astypes.LifecycleStateWarmedRunning) },
			action: ActionRecovered, held: []string{"terminate"}},
		{name: "group unreadable: out-of-service only", stopped: true, ec2: inPool,
			setup:  func(e *env) { e.asg.describeErr = errors.New("Throttling: Rate exceeded") },
			action: ActionRecovered, held: []string{"terminate"}},
		{name: "the group does not list it", ec2: inPool, setup: func(e *env) { inGroup(e, ""); e.asg.groups[0].Instances = nil },
			action: ActionIgnored, held: []string{"terminate"}},
		{name: "in no group", ec2: running, setup: func(*env) {}, action: ActionIgnored, held: []string{"terminate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(newNode(idA))
			warmPoolNode(t, e, since, tc.stopped)
			e.ec2.readings[idA] = []reading{tc.ec2}
			tc.setup(e)
			out, err := e.handle(t, stateEvent(idA, "running", time.Now()), time.Second)
			if err != nil || out.Action != tc.action {
				t.Fatalf("outcome %+v, error %v: want %q", out, err, tc.action)
			}
			n := e.node(t, idA)
			marks, _ := node.Marks(n)
			var held []string
			for _, c := range marks.CauseList() {
				held = append(held, string(c))
			}
			if !reflect.DeepEqual(held, tc.held) {
				t.Errorf("causes held %v, want %v (%s)", held, tc.held, out.Detail)
			}
			if tc.lifted && !unmarked(n) {
				t.Errorf("node still marked: %+v %v (%s)", n.Spec, n.Labels, out.Detail)
			}
			if !tc.lifted && (!n.Spec.Unschedulable || !node.HasTaint(n, node.TaintDraining)) {
				t.Errorf("the terminate hold's cordon or drain taint was removed: %+v", n.Spec)
			}
			if tc.stopped && node.HasTaint(n, node.TaintOutOfService) {
				t.Errorf("out-of-service taint left on a running instance's node")
			}
			if tc.lifted && !strings.Contains(out.Detail, "terminate action is over") {
				t.Errorf("detail %q does not say why", out.Detail)
			}
		})
	}
}

// A launch hook for an instance coming out of a warm pool completes with its
// node uncordoned: the terminate hold of its trip into the pool is lifted.
func TestLaunchFromWarmPool(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stopped bool
		state   astypes.LifecycleState
		lifted  bool
	}{
		{"launching", false, astypes.LifecycleStatePendingWait, true},
		{"launching, stopped in the pool", true, astypes.LifecycleStatePendingWait, true},
		{"the group says it terminates", true, astypes.LifecycleStateTerminatingWait, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(newNode(idA))
			warmPoolNode(t, e, time.Now().Add(-time.Hour), tc.stopped)
			e.ec2.readings[idA] = []reading{{state: instance.StateRunning, tagged: true, group: asgName}}
			inGroup(e, tc.state)
			out, err := e.handle(t, hookEvent(true, asgName, idA), time.Second)
			if err != nil || out.Action != ActionNodeJoined || !reflect.DeepEqual(e.asg.results(), []lifecycle.Result{lifecycle.Continue}) {
				t.Fatalf("outcome %+v, error %v, completed %v", out, err, e.asg.results())
			}
			n := e.node(t, idA)
			if unmarked(n) != tc.lifted {
				t.Errorf("node unmarked %v, want %v: %+v (%s)", unmarked(n), tc.lifted, n.Spec, out.Detail)
			}
			if node.HasTaint(n, node.TaintOutOfService) {
				t.Errorf("out-of-service taint left on a node Ready on a running instance (%s)", out.Detail)
			}
		})
	}
}

// A terminate drain renews a terminate hold from before its event (one an
// instance brought back from a warm pool kept): a sweep resuming the drain
// later counts from this drain, not the old one, and does not find it over
// at once. Lambda's retry of the same action keeps the hold its first
// attempt placed.
func TestTerminateRenewsAnEarlierHold(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name    string
		held    time.Time // the hold's Since
		eventAt time.Time
		renewed bool
	}{
		{"an earlier action's hold", now.Add(-24 * time.Hour), now, true},
		{"this action's, placed by its first attempt", now.Add(-110 * time.Second), now.Add(-2 * time.Minute), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(newNode(idA))
			warmPoolNode(t, e, tc.held, false)
			e.ec2.readings[idA] = []reading{running}
			payload := envelope("aws.autoscaling", "EC2 Instance-terminate Lifecycle Action", tc.eventAt, map[string]string{
				"LifecycleActionToken": token, "AutoScalingGroupName": asgName, "LifecycleHookName": "node-drainer-terminate",
				"EC2InstanceId": idA, "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING"})
			if _, err := e.handle(t, payload, time.Second); err != nil {
				t.Fatal(err)
			}
			marks, _ := node.Marks(e.node(t, idA))
			if since := marks.Causes[node.CauseTerminate].Since; since.Equal(tc.held) == tc.renewed {
				t.Errorf("terminate hold since %s, placed %s: renewed %v, want %v", since, tc.held, !since.Equal(tc.held), tc.renewed)
			}
		})
	}
}

// A launch into a warm pool (Destination WarmPool) is completed at once with
// CONTINUE: the instance is stopped in the pool as soon as it is, and its
// node joins when it leaves the pool. Waiting for the node would fail the
// launch, and the failure result would terminate it.
func TestLaunchIntoWarmPool(t *testing.T) {
	e := newEnv() // no node: it does not join in the pool
	e.ec2.readings[idA] = []reading{running}
	payload := envelope("aws.autoscaling", "EC2 Instance-launch Lifecycle Action", time.Now(), map[string]string{
		"LifecycleActionToken": token, "AutoScalingGroupName": asgName, "LifecycleHookName": "node-drainer-launch",
		"EC2InstanceId": idA, "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING", "Origin": "EC2", "Destination": "WarmPool"})
	out, err := e.handle(t, payload, 2*time.Second)
	if err != nil || out.Action != ActionCompleted || !reflect.DeepEqual(e.asg.results(), []lifecycle.Result{lifecycle.Continue}) {
		t.Fatalf("outcome %s %q, error %v, completed %v: want completed at once with CONTINUE", out.Action, out.Detail, err, e.asg.results())
	}
}

// A scale-in into the warm pool whose event was lost, in a group with hooks
// for both ways into its pool (our terminate hook beside another tool's
// launch hook, or beside ours): Warmed:Pending:Wait does not say which
// action holds the instance. The sweep asks Auto Scaling (a heartbeat of
// our hook answers only for an action of it that holds the instance) and
// takes the one that answers: the scale-in is drained and completed, a
// launch into the pool completed at once; another tool's action is left,
// nothing done to the node (rules 3, 14).
func TestSweepAsksWhichWarmPoolAction(t *testing.T) {
	const otherLaunch = "karpenter-launch"
	for _, tc := range []struct {
		name     string
		launch   string   // the group's launch hook
		inactive []string // hooks with no action on the instance
		drained  bool     // the node drained
		hook     string   // the hook completed ("": none)
		result   lifecycle.Result
	}{
		{name: "scale-in, another tool's launch hook: drained", launch: otherLaunch, inactive: []string{otherLaunch},
			drained: true, hook: "node-drainer-terminate", result: lifecycle.Continue},
		{name: "another tool's launch into the pool: left alone", launch: otherLaunch, inactive: []string{"node-drainer-terminate"}},
		{name: "scale-in, our launch hook: drained", launch: "node-drainer-launch", inactive: []string{"node-drainer-launch"},
			drained: true, hook: "node-drainer-terminate", result: lifecycle.Continue},
		{name: "our launch into the pool: completed at once, nothing drained", launch: "node-drainer-launch", inactive: []string{"node-drainer-terminate"},
			hook: "node-drainer-launch", result: lifecycle.Continue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(newNode(idA), pod(idA, "apps", "web-1"))
			e.ec2.readings[idA] = []reading{{state: instance.StateRunning, tagged: true, group: asgName}}
			inGroup(e, astypes.LifecycleStateWarmedPendingWait)
			e.asg.hooks = []astypes.LifecycleHook{
				{LifecycleHookName: aws.String("node-drainer-terminate"), LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300)},
				{LifecycleHookName: aws.String(tc.launch), LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_LAUNCHING"), HeartbeatTimeout: aws.Int32(300)}}
			e.asg.inactive = map[string]bool{}
			for _, h := range tc.inactive {
				e.asg.inactive[h] = true
			}
			out, err := e.handle(t, sweepEvent(), 5*time.Second)
			if err != nil || out.Sweep == nil {
				t.Fatalf("outcome %+v, error %v", out, err)
			}
			if drained := !e.podExists("apps", "web-1"); drained != tc.drained {
				t.Errorf("drained %v, want %v (%s; notes %v)", drained, tc.drained, out.Detail, out.Sweep.Notes)
			}
			var hooks []string
			for _, c := range e.asg.completed {
				hooks = append(hooks, aws.ToString(c.LifecycleHookName)+"/"+aws.ToString(c.LifecycleActionResult))
			}
			var want []string
			if tc.hook != "" {
				want = []string{tc.hook + "/" + string(tc.result)}
			}
			if !reflect.DeepEqual(hooks, want) {
				t.Errorf("completed %v, want %v (%s; notes %v)", hooks, want, out.Detail, out.Sweep.Notes)
			}
			if !tc.drained && !unmarked(e.node(t, idA)) {
				t.Errorf("the node of an action not ours to drain was marked (%s)", out.Detail)
			}
		})
	}
}

// An instance drained into a Running warm pool comes back (no event says
// so: it never stopped) and is scaled in again before a sweep lifts the
// first trip's hold, the second event lost. The sweep takes the second
// action: its drain counts DRAIN_TIMEOUT from now, not from the first
// trip's hold, whose action was completed (rule 16 counts a drain's own
// start): the node is drained and the hook completed with CONTINUE, not
// failed at once with nothing evicted.
func TestSweepDoesNotCountAnEarlierTripsHold(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state astypes.LifecycleState // the second scale-in's wait
	}{
		{"scaled in into the pool again", astypes.LifecycleStateWarmedPendingWait},
		{"scaled in for good", astypes.LifecycleStateTerminatingWait},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv(newNode(idA), pod(idA, "apps", "web-1"))
			e.ec2.readings[idA] = []reading{{state: instance.StateRunning, tagged: true, group: asgName}}
			// the first trip: drained into the pool, completed
			first := envelope("aws.autoscaling", "EC2 Instance-terminate Lifecycle Action", time.Now(), map[string]string{
				"LifecycleActionToken": token, "AutoScalingGroupName": asgName, "LifecycleHookName": "node-drainer-terminate",
				"EC2InstanceId": idA, "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING", "Origin": "AutoScalingGroup", "Destination": "WarmPool"})
			if out, err := e.handle(t, first, 2*time.Second); err != nil || out.Action != ActionDrained {
				t.Fatalf("first trip: outcome %s %q, error %v", out.Action, out.Detail, err)
			}
			if !node.Holds(e.node(t, idA), node.CauseTerminate) {
				t.Fatal("the first trip's hold is not on the node")
			}
			ageHolds(t, e, time.Hour) // it was an hour ago, more than DRAIN_TIMEOUT
			// back from the pool; a pod on it again; scaled in again, the event lost
			if _, err := e.kube.CoreV1().Pods("apps").Create(t.Context(), pod(idA, "apps", "web-2"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			inGroup(e, tc.state)
			e.asg.hooks = []astypes.LifecycleHook{{LifecycleHookName: aws.String("node-drainer-terminate"),
				LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300)}}
			out, err := e.handle(t, sweepEvent(), 5*time.Second)
			if err != nil || out.Sweep == nil || !slices.Equal(out.Sweep.Hooks, []string{idA}) {
				t.Fatalf("sweep: outcome %+v, error %v: want the second action taken", out, err)
			}
			if e.podExists("apps", "web-2") {
				t.Errorf("the second drain evicted nothing (%s; notes %v)", out.Detail, out.Sweep.Notes)
			}
			if got := e.asg.results(); !reflect.DeepEqual(got, []lifecycle.Result{lifecycle.Continue, lifecycle.Continue}) {
				t.Errorf("completions %v, want CONTINUE for each trip (notes %v)", got, out.Sweep.Notes)
			}
		}))
	}
}

// ageHolds moves the times idA's node's record says back by d, as if its
// holds had been placed d earlier.
func ageHolds(t *testing.T, e *env, d time.Duration) {
	t.Helper()
	n := e.node(t, idA)
	s, ok := node.Marks(n)
	if !ok {
		t.Fatal("no record on the node")
	}
	for c, h := range s.Causes {
		h.Since = h.Since.Add(-d)
		if h.Over != nil {
			over := h.Over.Add(-d)
			h.Over = &over
		}
		s.Causes[c] = h
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[node.AnnotationOwned] = string(b)
	if _, err := e.kube.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
