package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
)

// TestOtherOwnersLeftAlone: with the default SKIP_NODES_OWNED_BY, a
// Karpenter-labelled node and an EKS Auto Mode node are left to their owner:
// the terminate hook sent for each is completed with CONTINUE, and neither
// node nor its pods change (no cordon, taint, label or eviction).
func TestOtherOwnersLeftAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := "own-left"
	insts, err := env.CreateASG(ctx, harness.ASGSpec{Name: name, Size: 2, Hooks: true})
	if err != nil {
		t.Fatal(err)
	}
	owners := []map[string]string{
		{node.LabelKarpenterNodePool: "default"},
		{node.LabelEKSComputeType: "auto", node.LabelKarpenterNodePool: "general-purpose"},
	}
	for i, inst := range insts {
		labels := map[string]string{"pool": name}
		for k, v := range owners[i] {
			labels[k] = v
		}
		if err := env.AddNodeFor(ctx, inst, labels); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Namespace(ctx, name); err != nil {
		t.Fatal(err)
	}
	s := &scene{t: t, name: name, asg: name, insts: insts, ns: name}
	s.grPlacePods(ctx, insts[0], "karp", 1)
	s.grPlacePods(ctx, insts[1], "auto", 1)
	rt := s.function(ctx, time.Minute)
	for i, inst := range insts {
		want := []string{"karpenter", "auto-mode"}[i]
		before := grTakeSnapshot(t, ctx, inst.PrivateDNSName)
		payload, err := env.StartTerminating(ctx, s.asg, inst, "token-owner-"+want)
		if err != nil {
			t.Fatal(err)
		}
		out, err := harness.Invoke(ctx, rt, payload)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: outcome %+v", want, out)
		if out.Action != "left-alone" || out.LifecycleResult != "CONTINUE" || !strings.Contains(out.Detail, "owned by "+want) || len(out.Evicted) != 0 {
			t.Errorf("%s node: outcome %+v, want left-alone, owned by %s, CONTINUE, nothing evicted", want, out, want)
		}
		ok, failed := s.completions(ctx, inst.ID)
		if len(ok) != 1 || ok[0].Params["LifecycleActionResult"] != "CONTINUE" || len(failed) != 0 {
			t.Errorf("%s node: want exactly one CONTINUE completion, got %+v (failed %+v)", want, ok, failed)
		}
		// the hook's completion is recorded on the node, nothing else
		before.events++
		grUnchanged(t, ctx, inst.PrivateDNSName, before)
	}
}
