package handler

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/node"
)

// batchGroup is asgName with A and B in Terminating:Wait, C in service and
// D in Terminating:Wait with no node in the cluster.
func batchGroup() []astypes.AutoScalingGroup {
	in := func(id string, s astypes.LifecycleState) astypes.Instance {
		return astypes.Instance{InstanceId: aws.String(id), LifecycleState: s}
	}
	return []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String(asgName), Instances: []astypes.Instance{
		in(idA, astypes.LifecycleStateTerminatingWait), in(idB, astypes.LifecycleStateTerminatingWait),
		in(idC, astypes.LifecycleStateInService), in(idD, astypes.LifecycleStateTerminatingWait),
	}}}
}

func batchObjects() []runtime.Object {
	return append(aNode(), newNode(idB), pod(idB, "apps", "web-b"), newNode(idC))
}

// BATCH_CORDON: a terminate hook's drain of A first cordons the node of B,
// the other instance of the group in Terminating:Wait, so that A's pods do
// not land there; it evicts nothing of B's, taints and labels nothing on
// it, leaves C (in service) alone. The cordon is held for its own cause
// until DRAIN_TIMEOUT. Off (the default), nothing of B is touched and the
// group is not read. In a bubble: the drain's time is virtual.
func TestBatchCordon(t *testing.T) {
	t.Run("on", clustertest.InBubble(func(t *testing.T) {
		e := newEnv(batchObjects()...)
		e.ec2.readings[idA] = []reading{running}
		e.asg.groups = batchGroup()
		e.cfg.BatchCordon = true
		out, err := e.handle(t, terminateEvent(idA), 2*time.Minute)
		if err != nil || out.Action != ActionDrained {
			t.Fatalf("drain of A: %+v, %v", out, err)
		}
		if !slices.Equal(out.BatchCordoned, []string{nodeName(idB)}) {
			t.Errorf("batch cordoned %v, want [%s]", out.BatchCordoned, nodeName(idB))
		}
		b := e.node(t, idB)
		marks, _ := node.Marks(b)
		hold, held := marks.Causes[node.CauseBatch]
		switch {
		case !b.Spec.Unschedulable || !held || !marks.Owned.Cordoned:
			t.Errorf("B not cordoned as ours for %s: unschedulable %v, marks %+v", node.CauseBatch, b.Spec.Unschedulable, marks)
		case hold.Wants != (node.Changes{Cordoned: true}) || node.HasTaint(b, node.TaintDraining) || b.Labels[node.LabelExcludeLB] != "":
			t.Errorf("B got more than a cordon: wants %+v, taints %v, labels %v", hold.Wants, b.Spec.Taints, b.Labels)
		case hold.Expires == nil || !hold.Expires.Equal(hold.Since.Add(e.cfg.DrainTimeout)):
			t.Errorf("B's batch cordon expires %v, want DRAIN_TIMEOUT after %v", hold.Expires, hold.Since)
		}
		if !e.podExists("apps", "web-b") || slices.Contains(e.evicted, "apps/web-b") {
			t.Error("B's pod evicted by A's drain")
		}
		if c := e.node(t, idC); c.Spec.Unschedulable {
			t.Error("C, in service, cordoned")
		}
		if e.asg.describes != 1 {
			t.Errorf("%d reads of the group, want 1 (ASG_NAMES: the tags are not read)", e.asg.describes)
		}
	}))
	t.Run("off", clustertest.InBubble(func(t *testing.T) {
		e := newEnv(batchObjects()...)
		e.ec2.readings[idA] = []reading{running}
		e.asg.groups = batchGroup()
		out, err := e.handle(t, terminateEvent(idA), 2*time.Minute)
		if err != nil || out.Action != ActionDrained {
			t.Fatalf("drain of A: %+v, %v", out, err)
		}
		if b := e.node(t, idB); b.Spec.Unschedulable || len(out.BatchCordoned) > 0 || e.asg.describes != 0 {
			t.Errorf("off: B cordoned %v, batch %v, %d reads of the group: want none", b.Spec.Unschedulable, out.BatchCordoned, e.asg.describes)
		}
	}))
	t.Run("cordoned already: not written again", clustertest.InBubble(func(t *testing.T) {
		// a storm's invocations each see the others waiting: a node
		// cordoned already (its own drain, another's batch cordon) costs
		// no write
		e := newEnv(append(aNode(), newNode(idB, func(n *corev1.Node) { n.Spec.Unschedulable = true }), newNode(idC))...)
		e.ec2.readings[idA] = []reading{running}
		e.asg.groups = batchGroup()
		e.cfg.BatchCordon = true
		out, err := e.handle(t, terminateEvent(idA), 2*time.Minute)
		if err != nil || out.Action != ActionDrained || len(out.BatchCordoned) != 0 {
			t.Fatalf("drain of A: %+v, %v: want nothing batch cordoned", out, err)
		}
		if slices.ContainsFunc(e.kube.Actions(), func(x k8stesting.Action) bool {
			u, ok := x.(k8stesting.UpdateAction)
			return ok && u.GetResource().Resource == "nodes" && u.GetObject().(*corev1.Node).Name == nodeName(idB)
		}) {
			t.Errorf("B, cordoned already, written: %v", e.writes())
		}
	}))
	t.Run("dry run", clustertest.InBubble(func(t *testing.T) {
		e := newEnv(batchObjects()...)
		e.ec2.readings[idA] = []reading{running}
		e.asg.groups = batchGroup()
		e.cfg.BatchCordon, e.cfg.DryRun = true, true
		out, err := e.handle(t, terminateEvent(idA), 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{nodeName(idB) + " (dry run: would cordon)"}; !slices.Equal(out.BatchCordoned, want) {
			t.Errorf("dry run: batch %v, want %v", out.BatchCordoned, want)
		}
		if b := e.node(t, idB); b.Spec.Unschedulable || b.Annotations[node.AnnotationOwned] != "" {
			t.Error("dry run cordoned B")
		}
	}))
	t.Run("group chosen by its tag: read once", clustertest.InBubble(func(t *testing.T) {
		e := newEnv(batchObjects()...)
		e.ec2.readings[idA] = []reading{running}
		e.asg.groups = batchGroup()
		e.asg.groups[0].Tags = []astypes.TagDescription{{Key: aws.String("node-drainer.io/enabled"), Value: aws.String("true")}}
		e.cfg.ASGTagKey, e.cfg.ASGTagValue = "node-drainer.io/enabled", "true"
		e.cfg.BatchCordon = true
		out, err := e.handle(t, terminateEvent(idA), 2*time.Minute)
		if err != nil || !slices.Equal(out.BatchCordoned, []string{nodeName(idB)}) {
			t.Fatalf("drain of A: %+v, %v", out, err)
		}
		if e.asg.describes != 1 {
			t.Errorf("%d reads of the group, want 1: the tags' read gives its instances", e.asg.describes)
		}
	}))
}

// A batch cordon is released by the rules of every hold: once it expires
// (the next event's or the sweep's release of expired causes), or when the
// instance is in service again (it did not leave: back from a warm pool).
func TestBatchCordonReleased(t *testing.T) {
	for _, tc := range []struct {
		name   string
		state  astypes.LifecycleState
		after  time.Duration
		action Action
	}{
		{"expired", astypes.LifecycleStateTerminatingWait, 31 * time.Minute, ActionUnmarked},
		{"in service again", astypes.LifecycleStateInService, time.Minute, ActionRecovered},
		{"still leaving, not expired: kept", astypes.LifecycleStateTerminatingWait, time.Minute, ActionIgnored},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv(newNode(idB))
			e.ec2.readings[idB] = []reading{{state: running.state, tagged: true, group: asgName}}
			e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String(asgName),
				Instances: []astypes.Instance{{InstanceId: aws.String(idB), LifecycleState: tc.state}}}}
			cordonedAt := e.now
			if _, err := node.ApplyTo(context.Background(), e.kube, e.node(t, idB), node.Mark{Cause: node.CauseBatch, Cordon: true, Expires: cordonedAt.Add(e.cfg.DrainTimeout)}, cordonedAt, false); err != nil {
				t.Fatal(err)
			}
			e.now = cordonedAt.Add(tc.after)
			out, err := e.handle(t, stateEvent(idB, "running", e.now), 10*time.Second)
			if err != nil || out.Action != tc.action {
				t.Fatalf("running event: %+v, %v: want %s", out, err, tc.action)
			}
			b := e.node(t, idB)
			if kept := tc.action == ActionIgnored; b.Spec.Unschedulable != kept || node.Holds(b, node.CauseBatch) != kept {
				t.Errorf("cordoned %v, held %v: want %v", b.Spec.Unschedulable, node.Holds(b, node.CauseBatch), kept)
			}
		}))
	}
}

// NODE_CONDITIONS: the drain's Node conditions, KEP-5683's DrainInProgress
// and Drained, written on the status subresource while the node drains and
// once drained, and removed with node-drainer's marks; off (the default),
// no status is written. A dry run names them in its plan.
func TestDrainNodeConditions(t *testing.T) {
	statusWrites := func(e *env) []string {
		return slices.DeleteFunc(e.writes(), func(w string) bool { return w != "patch nodes/status" })
	}
	t.Run("on", clustertest.InBubble(func(t *testing.T) {
		e := newEnv(aNode()...)
		clustertest.KeepNodeStatus(e.kube) // the unmark's update leaves the status to nodes/status
		e.ec2.readings[idA] = []reading{running}
		e.cfg.NodeConditions = true
		out, err := e.handle(t, terminateEvent(idA), 2*time.Minute)
		if err != nil || out.Action != ActionDrained {
			t.Fatalf("drain: %+v, %v", out, err)
		}
		got := map[corev1.NodeConditionType]string{}
		for _, c := range e.node(t, idA).Status.Conditions {
			got[c.Type] = string(c.Status) + "/" + c.Reason
		}
		if got[node.ConditionDrainInProgress] != "False/"+node.ReasonDrained || got[node.ConditionDrained] != "True/"+node.ReasonDrained || got[corev1.NodeReady] != "True/" {
			t.Errorf("conditions once drained %v", got)
		}
		if w := statusWrites(e); len(w) != 2 {
			t.Errorf("status writes %v, want 2 (draining, drained)", w)
		}
		if _, err := node.Release(context.Background(), e.kube, nodeName(idA), node.CauseTerminate, e.now, false); err != nil {
			t.Fatal(err)
		}
		for _, c := range e.node(t, idA).Status.Conditions {
			if c.Type == node.ConditionDrainInProgress || c.Type == node.ConditionDrained {
				t.Errorf("%s left once node-drainer's marks are removed", c.Type)
			}
		}
	}))
	t.Run("off", clustertest.InBubble(func(t *testing.T) {
		e := newEnv(aNode()...)
		e.ec2.readings[idA] = []reading{running}
		if out, err := e.handle(t, terminateEvent(idA), 2*time.Minute); err != nil || out.Action != ActionDrained {
			t.Fatalf("drain: %+v, %v", out, err)
		}
		if w := statusWrites(e); len(w) != 0 {
			t.Errorf("off: status writes %v", w)
		}
		if marks, _ := node.Marks(e.node(t, idA)); marks.Owned.Conditions {
			t.Error("off: conditions recorded as ours")
		}
	}))
	t.Run("dry run", clustertest.InBubble(func(t *testing.T) {
		e := newEnv(aNode()...)
		e.ec2.readings[idA] = []reading{running}
		e.cfg.NodeConditions, e.cfg.DryRun = true, true
		out, err := e.handle(t, terminateEvent(idA), 2*time.Minute)
		if err != nil || out.Plan == nil {
			t.Fatalf("dry run: %+v, %v", out, err)
		}
		if want := []string{"DrainInProgress=True, Drained=False", "DrainInProgress=False, Drained=True"}; !slices.Equal(out.Plan.Conditions, want) {
			t.Errorf("plan's conditions %v, want %v", out.Plan.Conditions, want)
		}
		if w := statusWrites(e); len(w) != 0 {
			t.Errorf("dry run: status writes %v", w)
		}
	}))
}
