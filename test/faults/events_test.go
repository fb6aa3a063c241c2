package faults

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// ---- 2: AWS Health scheduled changes ----

// healthClosedOnly: a `closed` scheduled change for a node that carries
// nothing of ours changes nothing (no eviction, no cordon).
func healthClosedOnly(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, -1)
	before := x.podsOn(x.target.PrivateDNSName)
	rt := x.function(60*time.Second, "SCHEDULED_CHANGE_ACTION=drain")
	_, err := x.invoke(rt, x.healthEvent("closed", time.Now().Add(-time.Hour), x.target.ID))
	x.expect(err == nil, "invocation failed: %v", err)
	touched := x.touched(before)
	x.drained = map[bool]string{true: "yes", false: "no"}[len(touched) > 0]
	x.expect(len(touched) == 0, "a closed Health event evicted pods: %v", touched)
	n := x.getNode(x.target.PrivateDNSName)
	x.expect(!n.Spec.Unschedulable && len(ourMarks(n)) == 0, "a closed Health event marked the node: unschedulable=%v %v", n.Spec.Unschedulable, ourMarks(n))
}

// healthClosedUndoes: `upcoming` (starting now) cordons (action cordon);
// `closed` for the same change undoes it, and only what we placed.
func healthClosedUndoes(x *X) {
	x.scene(sceneOpts{nodes: 2})
	rt := x.function(60*time.Second, "SCHEDULED_CHANGE_ACTION=cordon")
	start := time.Now().Add(time.Minute)
	_, err := x.invoke(rt, x.healthEvent("upcoming", start, x.target.ID))
	x.expect(err == nil, "upcoming: %v", err)
	if !x.expect(x.getNode(x.target.PrivateDNSName).Spec.Unschedulable, "upcoming change starting now did not cordon") {
		return
	}
	x.updateNode(x.target.PrivateDNSName, addOperatorTaint)
	_, err = x.invoke(rt, x.healthEvent("closed", start, x.target.ID))
	x.expect(err == nil, "closed: %v", err)
	n := x.getNode(x.target.PrivateDNSName)
	x.expect(!n.Spec.Unschedulable && len(ourMarks(n)) == 0, "closed did not undo the cordon: unschedulable=%v %v", n.Spec.Unschedulable, ourMarks(n))
	if !hasTaint(n, operatorTaint.Key) {
		x.violate("the operator's taint was removed")
	}
}

// healthFarAhead: maintenance 14 days ahead evicts nothing now (at most a
// cordon).
func healthFarAhead(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, -1)
	before := x.podsOn(x.target.PrivateDNSName)
	rt := x.function(60*time.Second, "SCHEDULED_CHANGE_ACTION=drain")
	_, err := x.invoke(rt, x.healthEvent("upcoming", time.Now().Add(14*24*time.Hour), x.target.ID))
	x.expect(err == nil, "invocation failed: %v", err)
	touched := x.touched(before)
	x.drained = map[bool]string{true: "yes", false: "no"}[len(touched) > 0]
	x.expect(len(touched) == 0, "maintenance 14 days ahead evicted pods now: %v", touched)
}

// healthTwoInstances: one Health event names two instances; the first one's
// drain is blocked by a PDB that never allows. The second is drained on its
// own budget all the same.
func healthTwoInstances(x *X) {
	x.scene(sceneOpts{nodes: 3})
	a, b := x.insts[0], x.insts[1]
	x.web("held", 1, -1, 1) // on a, minAvailable 1 of 1
	x.target = b
	x.web("free", 2, -1, -1) // on b
	x.target = a
	rt := x.function(25*time.Second, "SCHEDULED_CHANGE_ACTION=drain", "DEADLINE_MARGIN=5s")
	x.began = time.Now()
	res := make(chan error, 1)
	go func() {
		_, err := x.invoke(rt, x.healthEvent("open", time.Now().Add(-time.Minute), a.ID, b.ID))
		res <- err
	}()
	drained := wait.PollUntilContextTimeout(x.ctx, 200*time.Millisecond, 70*time.Second, true, func(context.Context) (bool, error) {
		return len(x.podsOn(b.PrivateDNSName)) == 0, nil
	}) == nil
	x.drained = map[bool]string{true: "yes", false: "no"}[drained]
	x.expect(drained, "the second instance of the event was not drained within 70 s (one budget shared with the blocked first)")
	if err := <-res; err != nil { // the scene judges the drain above, not the invocation's own result
		x.t.Logf("the invocation: %v", err)
	}
	_ = rt.WaitIdle(x.ctx)
}

// ---- 3: owned marks ----

// rebalanceSpotRunning: a rebalance cordon, then a spot warning (drain),
// then `running` at once: the marks stay (the spot window is not over) and
// the operator's taint too; once the advisory marks' window has passed
// (ADVISORY_MARK_TTL=20s) with the instance still running, the next
// `running` removes ours and only ours.
func rebalanceSpotRunning(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, -1)
	name := x.target.PrivateDNSName
	rt := x.function(60*time.Second, "REBALANCE_ACTION=cordon", "ADVISORY_MARK_TTL=20s")
	_, err := x.invoke(rt, x.event("rebalance-recommendation.json", map[string]any{"instance-id": x.target.ID}, nil))
	x.expect(err == nil, "rebalance: %v", err)
	x.expect(x.getNode(name).Spec.Unschedulable, "rebalance did not cordon")
	x.updateNode(name, addOperatorTaint)
	spotAt := time.Now()
	_, err = x.invoke(rt, x.event("spot-interruption.json", map[string]any{"instance-id": x.target.ID}, map[string]any{"time": spotAt.UTC().Format(time.RFC3339)}))
	x.expect(err == nil, "spot warning: %v", err)
	x.drained = map[bool]string{true: "yes", false: "no"}[len(x.podsOn(name)) == 0]
	_, err = x.invoke(rt, x.stateEvent(x.target.ID, "running", time.Now()))
	x.expect(err == nil, "running: %v", err)
	n := x.getNode(name)
	x.expect(n.Spec.Unschedulable && hasTaint(n, node.TaintDraining), "marks removed while the spot warning's window runs: unschedulable=%v %v", n.Spec.Unschedulable, ourMarks(n))
	if !hasTaint(n, operatorTaint.Key) {
		x.violate("the operator's taint was removed")
	}
	time.Sleep(time.Until(spotAt.Add(22 * time.Second)))
	_, err = x.invoke(rt, x.stateEvent(x.target.ID, "running", time.Now()))
	x.expect(err == nil, "running after the window: %v", err)
	n = x.getNode(name)
	x.expect(!n.Spec.Unschedulable && len(ourMarks(n)) == 0, "advisory marks not expired on a still-running instance: unschedulable=%v %v", n.Spec.Unschedulable, ourMarks(n))
	if !hasTaint(n, operatorTaint.Key) {
		x.violate("the operator's taint was removed")
	}
}

// stopAndRelease stops the target (EC2 stopped, kubelet dead) and sends the
// `stopped` event: the node must get the out-of-service taint.
func stopAndRelease(x *X, invoke func([]byte)) {
	x.must(env.SetInstanceState(x.ctx, x.target.ID, "stopped"))
	x.killKubelet(x.target.PrivateDNSName)
	invoke(x.stateEvent(x.target.ID, "stopped", time.Now()))
	x.expect(hasTaint(x.getNode(x.target.PrivateDNSName), node.TaintOutOfService), "stopped instance's node not tainted out-of-service")
}

// stopStartScene: pods on the target; operator marks per opCordon; stop,
// release; start (kubelet back); between: between(rt); then `running`.
func stopStartScene(x *X, opCordon bool, between func(invoke func([]byte))) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, -1)
	name := x.target.PrivateDNSName
	x.updateNode(name, func(n *corev1.Node) {
		addOperatorTaint(n)
		n.Labels["ops.example.com/owner"] = "team-a"
		if opCordon {
			n.Spec.Unschedulable = true
		}
	})
	rt := x.function(60*time.Second, "REBALANCE_ACTION=drain", "NODE_LEASE_STALE_AFTER=5s")
	invoke := func(p []byte) {
		_, err := x.invoke(rt, p)
		x.expect(err == nil, "invocation failed: %v", err)
	}
	stopAndRelease(x, invoke)
	x.must(env.SetInstanceState(x.ctx, x.target.ID, "running"))
	x.must(env.StartKubelet(x.ctx, name))
	x.must(env.WaitNodeReady(x.ctx, name, true, time.Minute))
	if between != nil {
		between(invoke)
	}
	invoke(x.stateEvent(x.target.ID, "running", time.Now()))
	n := x.getNode(name)
	x.expect(!hasTaint(n, node.TaintOutOfService), "out-of-service taint left on a node whose instance runs again")
	if !hasTaint(n, operatorTaint.Key) || n.Labels["ops.example.com/owner"] != "team-a" {
		x.violate("the operator's taint or label was removed")
	}
	if opCordon && !n.Spec.Unschedulable {
		x.violate("the operator's cordon was removed")
	}
	if !opCordon && between == nil {
		x.expect(!n.Spec.Unschedulable, "our cordon left on a node whose instance runs again")
	}
}

func stopStart(x *X) { stopStartScene(x, false, nil) }

// stopRebalanceStart: between the start and the `running` event a rebalance
// recommendation (REBALANCE_ACTION=drain) marks the node for its own reason:
// the out-of-service reason is gone all the same and its taint must go (the
// rebalance's own marks may stay).
func stopRebalanceStart(x *X) {
	stopStartScene(x, false, func(invoke func([]byte)) {
		invoke(x.event("rebalance-recommendation.json", map[string]any{"instance-id": x.target.ID}, nil))
	})
}

// operatorCordonKept: the operator cordoned the node before; stop, release,
// start: the operator's cordon stays.
func operatorCordonKept(x *X) { stopStartScene(x, true, nil) }

// ---- 6: time budget ----

// lateHookHeartbeat: the hook's event arrives 200 s after the hook began
// (heartbeat timeout 300 s): the function heartbeats at once, not at HT/2.
// A PDB holds the drain 8 s.
func lateHookHeartbeat(x *X) {
	x.scene(sceneOpts{nodes: 2})
	w := x.workload("web", 2)
	x.web("web", 2, -1, 2)
	rt := x.function(60*time.Second, "DRAIN_TIMEOUT=5m")
	x.observe(map[string]int{})
	x.hookAfterDrain = true
	x.must(env.AWS.RegisterLifecycleAction(x.ctx, moto.LifecycleAction{ASG: x.asg, Hook: harness.TerminateHook, InstanceID: x.target.ID, Token: "token-late"}))
	payload := x.event("asg-terminate.json", map[string]any{"AutoScalingGroupName": x.asg, "LifecycleHookName": harness.TerminateHook,
		"EC2InstanceId": x.target.ID, "LifecycleActionToken": "token-late"},
		map[string]any{"time": time.Now().Add(-200 * time.Second).UTC().Format(time.RFC3339)})
	x.began = time.Now()
	go func() {
		time.Sleep(8 * time.Second)
		_ = env.Client.PolicyV1().PodDisruptionBudgets(x.ns).Delete(context.Background(), w.Name, metav1.DeleteOptions{})
	}()
	_, err := x.invoke(rt, payload)
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(time.Minute, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	var first time.Time
	for _, c := range x.lifecycleCalls("RecordLifecycleActionHeartbeat") {
		if c.OK() {
			first = c.Time
			break
		}
	}
	x.expect(!first.IsZero() && first.Sub(x.began) <= 3*time.Second, "no heartbeat within 3 s of a hook already past half its heartbeat timeout (first: %s)", fmtSince(first, x.began))
}

// ---- 10: continuations and filters ----

func (x *X) continuation(startedAt time.Time, attempt int) []byte {
	raw := x.terminating("token-" + x.name)
	b, err := event.NewContinuation(raw, startedAt, attempt)
	x.must(err)
	return b
}

// untouchedScene: a target with web pods, whose node and pods must not be
// touched; check after the invocation(s).
func (x *X) untouchedCheck(before []corev1.Pod, what string) {
	touched := x.touched(before)
	x.drained = map[bool]string{true: "yes", false: "no"}[len(touched) > 0]
	x.expect(len(touched) == 0, "%s: pods evicted: %v", what, touched)
	n := x.getNode(x.target.PrivateDNSName)
	x.expect(!n.Spec.Unschedulable && len(ourMarks(n)) == 0, "%s: node marked: unschedulable=%v %v", what, n.Spec.Unschedulable, ourMarks(n))
}

// continuationFuture: a continuation whose startedAt is an hour ahead is
// rejected: nothing drained, nothing completed.
func continuationFuture(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, -1)
	before := x.podsOn(x.target.PrivateDNSName)
	rt := x.function(30*time.Second, "DRAIN_TIMEOUT=5m")
	_, err := x.invoke(rt, x.continuation(time.Now().Add(time.Hour), 2))
	x.t.Logf("invocation: %v", err)
	x.untouchedCheck(before, "continuation from the future")
	_, all := x.completions()
	x.expect(len(all) == 0, "continuation from the future completed the hook: %+v", all)
}

// continuationBeyondBound: attempt 4 with MAX_CONTINUATIONS=3: no more
// draining and no further continuation (the hook may be completed with the
// failure result).
func continuationBeyondBound(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, -1)
	before := x.podsOn(x.target.PrivateDNSName)
	rt := x.function(30*time.Second, "DRAIN_TIMEOUT=5m", "MAX_CONTINUATIONS=3", "LIFECYCLE_RESULT_ON_FAILURE=ABANDON")
	// attempt 1 is the event itself: attempt 5 is continuation 4, past 3
	_, err := x.invoke(rt, x.continuation(time.Now().Add(-10*time.Second), 5))
	x.t.Logf("invocation: %v", err)
	_ = rt.WaitIdle(x.ctx)
	x.untouchedCheck(before, "attempt beyond MAX_CONTINUATIONS")
	async := 0
	for _, inv := range rt.Invocations() {
		if inv.Async {
			async++
		}
	}
	x.expect(async == 0, "%d further continuations after the bound", async)
	ok, all := x.completions()
	x.expect(len(all) <= 1, "%d completions", len(all))
	if len(ok) == 1 {
		x.expect(ok[0].Params["LifecycleActionResult"] == "ABANDON", "completed with %s, want the failure result", ok[0].Params["LifecycleActionResult"])
	}
}

// hookNameNotListed: HOOK_NAMES lists our hook; an event of another team's
// hook on the same ASG is ignored: nothing drained, no lifecycle call.
func hookNameNotListed(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, -1)
	before := x.podsOn(x.target.PrivateDNSName)
	const other = "other-team-terminate"
	_, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).PutLifecycleHook(x.ctx, &autoscaling.PutLifecycleHookInput{
		AutoScalingGroupName: aws.String(x.asg), LifecycleHookName: aws.String(other),
		LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE"),
	})
	x.must(err)
	x.must(env.AWS.RegisterLifecycleAction(x.ctx, moto.LifecycleAction{ASG: x.asg, Hook: other, InstanceID: x.target.ID, Token: "token-other"}))
	rt := x.function(30*time.Second, "HOOK_NAMES="+harness.TerminateHook)
	_, err = x.invoke(rt, x.event("asg-terminate.json", map[string]any{"AutoScalingGroupName": x.asg, "LifecycleHookName": other,
		"EC2InstanceId": x.target.ID, "LifecycleActionToken": "token-other"}, nil))
	x.expect(err == nil, "invocation failed: %v", err)
	x.untouchedCheck(before, "hook not in HOOK_NAMES")
	_, all := x.completions()
	x.expect(len(all)+len(x.lifecycleCalls("RecordLifecycleActionHeartbeat")) == 0, "lifecycle calls for a hook not in HOOK_NAMES: %+v", all)
}

// listedASGUntagged: an ASG listed in ASG_NAMES whose instance lacks the
// cluster tag (and has no node): its hook is still completed, once.
func listedASGUntagged(x *X) {
	x.scene(sceneOpts{nodes: 1, clusterTag: "kubernetes.io/cluster/another", noNode: map[int]bool{0: true}})
	rt := x.function(30*time.Second, "ASG_NAMES="+x.asg)
	_, err := x.invoke(rt, x.terminating("token-"+x.name))
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(20*time.Second, rt)
	x.checkHook("CONTINUE", got)
}

// spotInstanceGone: a spot warning for an instance already terminated (its
// node gone): a successful no-op, no function error.
func spotInstanceGone(x *X) {
	x.scene(sceneOpts{nodes: 2, noNode: map[int]bool{0: true}})
	x.must(env.SetInstanceState(x.ctx, x.target.ID, "terminated"))
	rt := x.function(30 * time.Second)
	_, err := x.invoke(rt, x.event("spot-interruption.json", map[string]any{"instance-id": x.target.ID}, nil))
	x.expect(err == nil, "spot warning for a gone instance failed the invocation (DLQ): %v", err)
	_, err = x.invoke(rt, x.event("spot-interruption.json", map[string]any{"instance-id": "i-0badc0ffee0000001"}, nil))
	x.expect(err == nil, "spot warning for an instance EC2 does not know failed the invocation (DLQ): %v", err)
	for _, inv := range rt.Invocations() {
		x.expect(inv.OK(), "invocation %s: %s %s", inv.RequestID, inv.ErrorType, inv.Error)
	}
}
