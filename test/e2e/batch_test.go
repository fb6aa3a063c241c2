package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
)

// TestBatchCordonOfTheGroup (BATCH_CORDON, issue 55 item 4): two instances of
// a group leave together. The drain of the first, before its evictions,
// cordons the second's node (in Terminating:Wait under our hook, as the
// emulator's group says), held for batch-cordon and nothing more: no taint,
// no eviction, its hook not completed. The first's pods are replaced on
// the node that stays, not on the second, which leaves next.
func TestBatchCordonOfTheGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "batch-cordon", 3, harness.ASGSpec{})
	first, second, stays := s.insts[0], s.insts[1], s.insts[2]
	s.grPlacePods(ctx, first, "web", 3)
	s.grPlacePods(ctx, second, "api", 1)
	payload, err := env.StartTerminating(ctx, s.asg, first, "token-batch-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.StartTerminating(ctx, s.asg, second, "token-batch-2"); err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute, "BATCH_CORDON=true")
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome: %+v", out)
	if out.Action != "drained" || !slices.Equal(out.BatchCordoned, []string{second.PrivateDNSName}) {
		t.Fatalf("outcome %+v: want drained, %s batch cordoned", out, second.PrivateDNSName)
	}
	n := grGetNode(t, ctx, second.PrivateDNSName)
	marks, _ := node.Marks(n)
	if !n.Spec.Unschedulable || !node.Holds(n, node.CauseBatch) || node.HasTaint(n, node.TaintDraining) || n.Labels[node.LabelExcludeLB] != "" || marks.Causes[node.CauseBatch].Expires == nil {
		t.Errorf("the second node: unschedulable=%v taints=%v labels=%v annotation=%s: want cordoned for %s alone, until it expires",
			n.Spec.Unschedulable, n.Spec.Taints, n.Labels, n.Annotations[node.AnnotationOwned], node.CauseBatch)
	}
	if ok, _ := s.completions(ctx, second.ID); len(ok) != 0 {
		t.Errorf("the second's hook completed by the first's drain: %+v", ok)
	}
	if ok, _ := s.completions(ctx, first.ID); len(ok) != 1 {
		t.Errorf("the first's hook completed %d times, want once", len(ok))
	}
	if pods, err := env.WaitPodsRunning(ctx, s.ns, "app=api", 1, 10*time.Second); err != nil || pods[0].Spec.NodeName != second.PrivateDNSName {
		t.Errorf("the second's pod moved or went (%v): cordon only, nothing evicted on its behalf", err)
	}
	moved, err := env.WaitPodsRunning(ctx, s.ns, "app=web", 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range moved {
		if p.Spec.NodeName != stays.PrivateDNSName {
			t.Errorf("replacement %s on %s, want %s (the node that stays)", p.Name, p.Spec.NodeName, stays.PrivateDNSName)
		}
	}
}

// TestDrainConditionsOnTheNode (NODE_CONDITIONS, issue 55 item 5): the drain
// is told on the Node by KEP-5683's conditions, through the apiserver's
// nodes/status under the drainer's own RBAC: Drained=True and
// DrainInProgress=False once drained, the kubelet's Ready left as it is;
// the conditions go when node-drainer's marks go (here: the instance runs
// again after a spot warning, its marks lifted by the state change).
func TestDrainConditionsOnTheNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "conditions", 2, harness.ASGSpec{})
	target := s.insts[0]
	s.grPlacePods(ctx, target, "web", 2)
	payload, err := harness.EventFile("spot-interruption.json", map[string]string{"instance-id": target.ID})
	if err != nil {
		t.Fatal(err)
	}
	// the warning's hold lapses 10 s after it: the instance still runs
	rt := s.function(ctx, time.Minute, "NODE_CONDITIONS=true", "ADVISORY_MARK_TTL=10s")
	sent := time.Now()
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome: %+v", out)
	if out.Action != "drained" {
		t.Fatalf("outcome %+v: want drained", out)
	}
	conds := func() map[corev1.NodeConditionType]string {
		got := map[corev1.NodeConditionType]string{}
		for _, c := range grGetNode(t, ctx, target.PrivateDNSName).Status.Conditions {
			got[c.Type] = string(c.Status) + "/" + c.Reason
		}
		return got
	}
	got := conds()
	if got[node.ConditionDrained] != "True/"+node.ReasonDrained || got[node.ConditionDrainInProgress] != "False/"+node.ReasonDrained || got[corev1.NodeReady] == "" {
		t.Fatalf("conditions once drained: %v", got)
	}
	// the instance still runs: its marks (and so the conditions) are lifted
	// by its next event once the warning's hold has lapsed
	time.Sleep(time.Until(sent.Add(11 * time.Second)))
	if out, err = harness.Invoke(ctx, rt, stateEvent(t, target.ID, "running")); err != nil {
		t.Fatal(err)
	}
	t.Logf("running again: %+v", out)
	got = conds()
	if _, ok := got[node.ConditionDrainInProgress]; ok || got[node.ConditionDrained] != "" || got[corev1.NodeReady] == "" {
		t.Errorf("conditions once the marks are lifted: %v, want the kubelet's alone", got)
	}
	if n := grGetNode(t, ctx, target.PrivateDNSName); n.Spec.Unschedulable || n.Annotations[node.AnnotationOwned] != "" {
		t.Errorf("marks not lifted: unschedulable=%v annotation=%s", n.Spec.Unschedulable, n.Annotations[node.AnnotationOwned])
	}
}
