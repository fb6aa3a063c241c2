package faults

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// warmPoolScenarios: an Auto Scaling group with a warm pool that reuses
// instances on scale-in (ReuseOnScaleIn) sends a scaled-in instance into the
// pool instead of terminating it; its Node stays, cordoned by the drain, and
// comes back with it. The drain's terminate hold must be lifted once the
// group has the instance in service again — on its `running` event, by its
// launch hook, or by the sweep when no event says so — and not while the
// instance is in the pool. The emulator does not move instances into or out
// of warm pools: the scenes set the lifecycle states Auto Scaling would.
func warmPoolScenarios() []scenario {
	return []scenario{
		{"warm-pool-return-running", warmPoolRunning},
		{"warm-pool-return-launch-hook", warmPoolLaunchHook},
		{"warm-pool-return-sweep", warmPoolSweep},
		{"warm-pool-launch-into-pool", warmPoolLaunchInto},
		{"warm-pool-scale-in-sweep", warmPoolScaleInSweep},
		{"warm-pool-scale-in-sweep-two-hooks", warmPoolScaleInSweepTwoHooks},
		{"warm-pool-back-scale-in-sweep", warmPoolBackScaleInSweep},
	}
}

// otherToolsLaunchHook is another tool's launch hook on a warm-pool group.
const otherToolsLaunchHook = "other-tool-launch"

// warmPoolScaleInSweepTwoHooks: a warm-pool group with our terminate hook
// and another tool's launch hook (common on warm pools): Warmed:Pending:Wait
// holds both a scale-in into the pool and a launch into it. The target is
// scaled in into the pool, its event lost; another instance launches into
// the pool under the other tool's hook. The sweep must ask Auto Scaling
// which action holds each (a heartbeat of our hook answers only for an
// action of it), drain the target and complete its action once, and leave
// the other instance, its node and the other tool's hook alone.
func warmPoolScaleInSweepTwoHooks(x *X) {
	x.scene(sceneOpts{nodes: 2, clusterTag: x.swTag(), noHooks: true})
	x.warmPool("Running")
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	for name, transition := range map[string]string{harness.TerminateHook: "autoscaling:EC2_INSTANCE_TERMINATING", otherToolsLaunchHook: "autoscaling:EC2_INSTANCE_LAUNCHING"} {
		_, err := asc.PutLifecycleHook(x.ctx, &autoscaling.PutLifecycleHookInput{
			AutoScalingGroupName: aws.String(x.asg), LifecycleHookName: aws.String(name),
			LifecycleTransition: aws.String(transition), HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE"),
		})
		x.must(err)
	}
	x.web("web", 2, -1, -1)
	x.observe(nil)
	x.terminating("token-" + x.name) // its event is lost
	x.must(env.AWS.SetLifecycleState(x.ctx, x.asg, x.target.ID, "Warmed:Pending:Wait"))
	other := x.insts[1]
	x.must(env.AWS.RegisterLifecycleAction(x.ctx, moto.LifecycleAction{ASG: x.asg, Hook: otherToolsLaunchHook, InstanceID: other.ID,
		Token: "token-other-" + x.name, Transition: "autoscaling:EC2_INSTANCE_LAUNCHING"}))
	x.must(env.AWS.SetLifecycleState(x.ctx, x.asg, other.ID, "Warmed:Pending:Wait"))
	rt := x.sweepFunction(60 * time.Second)
	if out, ok := x.sweep(rt); ok {
		x.expect(slices.Contains(out.Sweep.Hooks, x.target.ID) && !slices.Contains(out.Sweep.Hooks, other.ID),
			"the sweep's hooks %v: want the target's scale-in taken, the other tool's launch left (%s; notes %v)", out.Sweep.Hooks, out.Detail, out.Sweep.Notes)
	}
	x.hookAfterDrain = true
	got := x.waitHook(60*time.Second, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	x.expect(x.drained == "yes", "the node was not drained")
	calls, err := env.AWS.LifecycleCalls(x.ctx)
	x.must(err)
	for _, c := range calls {
		if c.Params["LifecycleHookName"] == otherToolsLaunchHook {
			x.violate("the other tool's hook was called: %s on %s", c.Operation, c.Params["InstanceId"])
		}
	}
	n := x.getNode(other.PrivateDNSName)
	x.expect(!n.Spec.Unschedulable && !node.Holds(n, node.CauseTerminate), "the node of the instance launching into the pool under another tool's hook was marked: %+v", n.Spec)
}

// warmPoolBackScaleInSweep: an instance drained into a Running warm pool
// (no event says it is back: it never stopped) is back in service and
// scaled in again before a sweep lifts the first trip's hold, that event
// lost, with DRAIN_TIMEOUT passed since the first trip. The sweep's drain
// must count from its own start, not the first trip's hold, whose action
// is over: the hook completed with CONTINUE, not with the failure result
// (ABANDON here) at once.
func warmPoolBackScaleInSweep(x *X) {
	x.scene(sceneOpts{nodes: 2, clusterTag: x.swTag()})
	const drainTimeout = 20 * time.Second
	rt := x.sweepFunction(60*time.Second, "DRAIN_TIMEOUT="+drainTimeout.String(), "LIFECYCLE_RESULT_ON_FAILURE=ABANDON")
	x.intoWarmPool(rt, "Running")
	first, _ := x.completions()
	x.must(env.AWS.SetLifecycleState(x.ctx, x.asg, x.target.ID, "InService"))
	time.Sleep(drainTimeout)               // the first trip's hold is older than DRAIN_TIMEOUT
	x.terminating("token-again-" + x.name) // scaled in again, its event lost
	x.must(env.AWS.SetLifecycleState(x.ctx, x.asg, x.target.ID, "Warmed:Pending:Wait"))
	if out, ok := x.sweep(rt); ok {
		x.expect(slices.Contains(out.Sweep.Hooks, x.target.ID), "the sweep did not take the second scale-in: %s (notes %v)", out.Detail, out.Sweep.Notes)
	}
	ctx, cancel := context.WithTimeout(x.ctx, 2*time.Minute)
	_ = rt.WaitIdle(ctx)
	cancel()
	ok, all := x.completions()
	if !x.expect(len(first) == 1 && len(ok) == 2 && len(all) == 2, "completions: %d after the first trip, %d (%d ok) in all; want 1, then 2", len(first), len(all), len(ok)) {
		return
	}
	x.expect(ok[1].Params["LifecycleActionResult"] == "CONTINUE", "the second scale-in completed with %s: its drain counted from the first trip's hold", ok[1].Params["LifecycleActionResult"])
}

// warmPoolLaunchInto: a new instance launches into the warm pool; the launch
// hook holds it in Warmed:Pending:Wait (Destination WarmPool) and its node
// does not join (kubelet is not started in the pool). The function must
// complete the action with CONTINUE without waiting for a node: waiting
// would hold the instance, and a Lambda slot, until the budget, and end in
// the failure result (ABANDON terminates the instance).
func warmPoolLaunchInto(x *X) {
	x.scene(sceneOpts{nodes: 1, noNode: map[int]bool{0: true}})
	x.warmPool("Stopped")
	token := "token-launch-" + x.name
	x.must(env.AWS.RegisterLifecycleAction(x.ctx, moto.LifecycleAction{ASG: x.asg, Hook: harness.LaunchHook, InstanceID: x.target.ID, Token: token,
		Transition: "autoscaling:EC2_INSTANCE_LAUNCHING"}))
	x.must(env.AWS.SetLifecycleState(x.ctx, x.asg, x.target.ID, "Warmed:Pending:Wait"))
	rt := x.function(60*time.Second, "LIFECYCLE_RESULT_ON_FAILURE=ABANDON")
	out, err := x.invoke(rt, x.event("asg-launch.json", map[string]any{"AutoScalingGroupName": x.asg, "LifecycleHookName": harness.LaunchHook,
		"EC2InstanceId": x.target.ID, "LifecycleActionToken": token, "Origin": "EC2", "Destination": "WarmPool"},
		map[string]any{"time": time.Now().UTC().Format(time.RFC3339)}))
	x.expect(err == nil && out.Action == handler.ActionCompleted, "launch into the warm pool: %s %q (%v), want completed without waiting for a node", out.Action, out.Detail, err)
	got := x.waitHook(10*time.Second, rt)
	x.checkHook("CONTINUE", got)
}

// warmPoolScaleInSweep: a group whose only hook is the terminate hook
// scales in into its warm pool (ReuseOnScaleIn): Auto Scaling holds the
// instance in Warmed:Pending:Wait, not Terminating:Wait. Its event is lost;
// the sweep must take the action all the same (the group's hooks are for
// the terminate transition alone), drain the node and complete it once.
func warmPoolScaleInSweep(x *X) {
	x.scene(sceneOpts{nodes: 2, clusterTag: x.swTag(), noHooks: true})
	x.warmPool("Stopped")
	_, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).PutLifecycleHook(x.ctx, &autoscaling.PutLifecycleHookInput{
		AutoScalingGroupName: aws.String(x.asg), LifecycleHookName: aws.String(harness.TerminateHook),
		LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE"),
	})
	x.must(err)
	x.web("web", 2, -1, -1)
	x.observe(nil)
	x.terminating("token-" + x.name) // its event is lost
	x.must(env.AWS.SetLifecycleState(x.ctx, x.asg, x.target.ID, "Warmed:Pending:Wait"))
	rt := x.sweepFunction(60 * time.Second)
	if out, ok := x.sweep(rt); ok {
		x.expect(slices.Contains(out.Sweep.Hooks, x.target.ID), "the sweep did not take the action holding %s in Warmed:Pending:Wait: %s", x.target.ID, out.Detail)
	}
	x.hookAfterDrain = true
	got := x.waitHook(60*time.Second, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	x.expect(x.drained == "yes", "the node was not drained")
}

// warmPool gives the scene's group a warm pool that takes instances back on
// scale-in (ReuseOnScaleIn), in poolState ("Stopped", "Running").
func (x *X) warmPool(poolState string) {
	_, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).PutWarmPool(x.ctx, &autoscaling.PutWarmPoolInput{
		AutoScalingGroupName: aws.String(x.asg), PoolState: astypes.WarmPoolState(poolState),
		InstanceReusePolicy: &astypes.InstanceReusePolicy{ReuseOnScaleIn: aws.Bool(true)},
	})
	x.must(err)
}

// withDetail sets fields of an event's detail.
func (x *X) withDetail(payload []byte, detail map[string]any) []byte {
	var ev map[string]any
	x.must(json.Unmarshal(payload, &ev))
	d := ev["detail"].(map[string]any)
	for k, v := range detail {
		d[k] = v
	}
	b, err := json.Marshal(ev)
	x.must(err)
	return b
}

// intoWarmPool: web pods on the target; its terminate hook fires with
// Destination WarmPool; the function drains the node and completes the hook;
// the group moves the instance into the pool (pool state "Stopped": EC2
// stops it, Warmed:Stopped, and its `stopped` event releases the node;
// "Running": it keeps running, Warmed:Running). The node must be left held
// for the drain.
func (x *X) intoWarmPool(rt *lambdart.Runtime, poolState string) {
	x.warmPool(poolState)
	x.web("web", 2, -1, -1)
	x.observe(nil)
	payload := x.withDetail(x.terminating("token-"+x.name), map[string]any{"Origin": "AutoScalingGroup", "Destination": "WarmPool"})
	// a scale-in into the pool waits in Warmed:Pending:Wait, in the pool
	x.must(env.AWS.SetLifecycleState(x.ctx, x.asg, x.target.ID, "Warmed:Pending:Wait"))
	x.drainThenComplete(rt, payload, 60*time.Second)
	x.must(env.AWS.SetLifecycleState(x.ctx, x.asg, x.target.ID, "Warmed:"+poolState))
	if poolState == "Stopped" {
		stopAndRelease(x, func(p []byte) {
			_, err := x.invoke(rt, p)
			x.expect(err == nil, "invocation failed: %v", err)
		})
	}
	n := x.getNode(x.target.PrivateDNSName)
	x.expect(n.Spec.Unschedulable && node.Holds(n, node.CauseTerminate), "the drained node is not held in the pool: %+v", n.Spec)
}

// outOfWarmPool: the group takes the instance out of the pool (its
// lifecycle state now state); EC2 starts it and its kubelet is Ready again.
func (x *X) outOfWarmPool(state string) {
	x.must(env.AWS.SetLifecycleState(x.ctx, x.asg, x.target.ID, state))
	x.must(env.SetInstanceState(x.ctx, x.target.ID, "running"))
	x.must(env.StartKubelet(x.ctx, x.target.PrivateDNSName))
	x.must(env.WaitNodeReady(x.ctx, x.target.PrivateDNSName, true, time.Minute))
}

// unmarked: the node carries none of node-drainer's marks, nor its record.
func (x *X) unmarked(what string) {
	n := x.getNode(x.target.PrivateDNSName)
	_, labeled := n.Labels[node.LabelExcludeLB]
	_, held := n.Annotations[node.AnnotationOwned]
	if n.Spec.Unschedulable || labeled || held || hasTaint(n, node.TaintDraining) || hasTaint(n, node.TaintOutOfService) {
		x.violate("%s: the node is still marked (cordoned %v, load-balancer exclusion %v, drain taint %v, out-of-service taint %v, record %q)",
			what, n.Spec.Unschedulable, labeled, hasTaint(n, node.TaintDraining), hasTaint(n, node.TaintOutOfService), n.Annotations[node.AnnotationOwned])
	}
}

// heldForTerminate: the drain's hold is still on the node.
func (x *X) heldForTerminate(what string) {
	n := x.getNode(x.target.PrivateDNSName)
	if !n.Spec.Unschedulable || !hasTaint(n, node.TaintDraining) || !node.Holds(n, node.CauseTerminate) {
		x.violate("%s: the drain's hold was lifted (cordoned %v, drain taint %v)", what, n.Spec.Unschedulable, hasTaint(n, node.TaintDraining))
	}
}

// warmPoolRunning: into a stopped pool and out of it; the `running` event
// lifts every mark, the drain's included.
func warmPoolRunning(x *X) {
	x.scene(sceneOpts{nodes: 2})
	rt := x.function(60 * time.Second)
	x.intoWarmPool(rt, "Stopped")
	x.outOfWarmPool("Pending")
	_, err := x.invoke(rt, x.stateEvent(x.target.ID, "running", time.Now()))
	x.expect(err == nil, "invocation failed: %v", err)
	x.unmarked("the instance is back from the warm pool (Pending), its `running` event handled")
}

// warmPoolLaunchHook: into a stopped pool; out of it through the launch
// hook (Origin WarmPool): the hook is completed with CONTINUE once the node
// is Ready, and the node joins unmarked.
func warmPoolLaunchHook(x *X) {
	x.scene(sceneOpts{nodes: 2})
	rt := x.function(60 * time.Second)
	x.intoWarmPool(rt, "Stopped")
	token := "token-launch-" + x.name
	x.must(env.AWS.RegisterLifecycleAction(x.ctx, moto.LifecycleAction{ASG: x.asg, Hook: harness.LaunchHook, InstanceID: x.target.ID, Token: token,
		Transition: "autoscaling:EC2_INSTANCE_LAUNCHING"}))
	x.outOfWarmPool("Pending:Wait")
	launch := x.event("asg-launch.json", map[string]any{"AutoScalingGroupName": x.asg, "LifecycleHookName": harness.LaunchHook,
		"EC2InstanceId": x.target.ID, "LifecycleActionToken": token, "Origin": "WarmPool", "Destination": "AutoScalingGroup"},
		map[string]any{"time": time.Now().UTC().Format(time.RFC3339)})
	_, err := x.invoke(rt, launch)
	x.expect(err == nil, "invocation failed: %v", err)
	var launched []moto.LifecycleCall
	for _, c := range okCalls(x.callsFor(x.target.ID, "CompleteLifecycleAction")) {
		if c.Params["LifecycleHookName"] == harness.LaunchHook {
			launched = append(launched, c)
		}
	}
	if x.expect(len(launched) == 1, "%d completions of the launch hook, want 1", len(launched)) {
		x.expect(launched[0].Params["LifecycleActionResult"] == "CONTINUE", "launch hook completed with %s", launched[0].Params["LifecycleActionResult"])
	}
	x.unmarked("the instance launched from the warm pool, its launch hook completed")
}

// warmPoolSweep: a warm pool of running instances (Warmed:Running): the
// instance never stops, so no EC2 event says it is back. While it is in the
// pool a sweep leaves the drain's hold; once the group has it InService the
// next sweep lifts it.
func warmPoolSweep(x *X) {
	x.scene(sceneOpts{nodes: 2, clusterTag: x.swTag()})
	rt := x.sweepFunction(60 * time.Second)
	x.intoWarmPool(rt, "Running")
	if _, ok := x.sweep(rt); ok {
		x.heldForTerminate("a sweep while the instance is in the warm pool (Warmed:Running)")
	}
	x.must(env.AWS.SetLifecycleState(x.ctx, x.asg, x.target.ID, "InService"))
	if out, ok := x.sweep(rt); ok {
		x.t.Logf("sweep: %s", out.Detail)
		x.unmarked("a sweep once the group has the instance InService again")
	}
	x.schedulable()
}

// schedulable: a pod that asks for the target's node by affinity (through
// the scheduler, which skips cordoned and tainted nodes) runs there.
func (x *X) schedulable() {
	w := x.workload("back", 1)
	w.Nodes = []string{x.target.PrivateDNSName}
	_, err := env.Deployment(x.ctx, w, false)
	x.must(err)
	pods, err := env.WaitPodsRunning(x.ctx, x.ns, "app=back", 1, 30*time.Second)
	x.expect(err == nil && len(pods) == 1 && pods[0].Spec.NodeName == x.target.PrivateDNSName,
		"a pod asking for the node back from the warm pool does not run there: %v", err)
}
