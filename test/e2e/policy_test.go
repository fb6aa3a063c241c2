package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
)

// TestGroupPolicyByTag (issue 55, item 2): with GROUP_POLICY_TAGS, a group's
// own tags override the function's settings for its instances. A group
// tagged rebalance-action=drain has its node drained on a rebalance
// recommendation (REBALANCE_ACTION is cordon), its bad scheduled-change
// tag refused and said, the event not failed; another group's
// drain-timeout=6s ends a drain held by a PDB that never allows after 6 s
// (DRAIN_TIMEOUT is 30m), its hook completed once with the failure result;
// and a dry run shows the group's policy.
func TestGroupPolicyByTag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	drains := newScene(t, ctx, "gp-rebal", 2, harness.ASGSpec{Tags: map[string]string{
		config.TagRebalanceAction: "drain", config.TagScheduledChangeAction: "evict"}})
	short := newScene(t, ctx, "gp-short", 1, harness.ASGSpec{Tags: map[string]string{config.TagDrainTimeout: "6s"}})
	rt := drains.function(ctx, time.Minute, "GROUP_POLICY_TAGS=true", "LIFECYCLE_RESULT_ON_FAILURE=ABANDON", "CONTINUE_LONG_DRAINS=false")

	t.Run("rebalance: the group says drain", func(t *testing.T) {
		target := drains.insts[0]
		pods := drains.grPlacePods(ctx, target, "web", 2)
		payload, err := harness.EventFile("rebalance-recommendation.json", map[string]string{"instance-id": target.ID})
		if err != nil {
			t.Fatal(err)
		}
		out, err := harness.Invoke(ctx, rt, payload)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("outcome: %+v, group policy %+v", out, out.GroupPolicy)
		if out.Action != handler.ActionDrained || len(out.Evicted) != len(pods) {
			t.Errorf("outcome %s (%s), evicted %v: want drained, the group's action over REBALANCE_ACTION=cordon", out.Action, out.Detail, out.Evicted)
		}
		p := out.GroupPolicy
		if p == nil || p.Group != drains.asg || p.RebalanceAction != "drain" || len(p.Refused) != 1 || !strings.HasPrefix(p.Refused[0], config.TagScheduledChangeAction) {
			t.Errorf("group policy %+v: want the group's drain taken, its bad scheduled-change action refused", p)
		}
		if n := grGetNode(t, ctx, target.PrivateDNSName); !node.HasTaint(n, node.TaintDraining) || !node.Holds(n, node.CauseRebalance) {
			t.Errorf("node not drain-marked for the rebalance: taints %v", n.Spec.Taints)
		}
	})

	t.Run("terminate: the group's drain timeout", func(t *testing.T) {
		target := short.insts[0]
		short.grPlacePods(ctx, target, "solo", 1)
		if _, err := env.PDB(ctx, short.workload("solo", 1), -1, 1); err != nil {
			t.Fatal(err)
		}
		payload, err := env.StartTerminating(ctx, short.asg, target, "token-gp-1")
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		out, err := harness.Invoke(ctx, rt, payload)
		took := time.Since(began)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("outcome after %s: %+v", took.Round(time.Millisecond), out)
		if out.Action != handler.ActionFailed || out.LifecycleResult != "ABANDON" || out.GroupPolicy == nil || out.GroupPolicy.DrainTimeout != "6s" {
			t.Errorf("outcome %s, %s, group policy %+v: want failed at the group's 6s, ABANDON", out.Action, out.LifecycleResult, out.GroupPolicy)
		}
		if took < 5*time.Second || took > 40*time.Second {
			t.Errorf("invocation took %s: want about the group's drain timeout (6s), not DRAIN_TIMEOUT (30m)", took)
		}
		if ok, failed := short.completions(ctx, target.ID); len(ok) != 1 || ok[0].Params["LifecycleActionResult"] != "ABANDON" || len(failed) != 0 {
			t.Errorf("completions %+v, failed %+v: want one ABANDON", ok, failed)
		}
	})

	t.Run("dry run shows the override", func(t *testing.T) {
		target := drains.insts[1]
		drains.grPlacePods(ctx, target, "dry", 1)
		dry := drains.function(ctx, time.Minute, "GROUP_POLICY_TAGS=true", "DRY_RUN=true")
		payload, err := harness.EventFile("rebalance-recommendation.json", map[string]string{"instance-id": target.ID})
		if err != nil {
			t.Fatal(err)
		}
		out, err := harness.Invoke(ctx, dry, payload)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("dry run: %+v, plan %+v", out.GroupPolicy, out.Plan)
		if !out.DryRun || out.Plan == nil || out.GroupPolicy == nil || out.GroupPolicy.RebalanceAction != "drain" || len(out.Evicted) != 0 {
			t.Errorf("dry run outcome %+v: want the plan of a drain, the group's action said, nothing evicted", out)
		}
		if n := grGetNode(t, ctx, target.PrivateDNSName); n.Spec.Unschedulable || node.HasTaint(n, node.TaintDraining) {
			t.Errorf("a dry run marked the node: unschedulable=%v taints=%v", n.Spec.Unschedulable, n.Spec.Taints)
		}
	})
}

// TestLBDrainWait (issue 55, item 3): with LB_DRAIN_WAIT, the node is
// excluded from external load balancers with its cordon, and its pods stay
// running, none evicted, for that long; then they are evicted and the hook
// completed. A dry run says it would wait.
func TestLBDrainWait(t *testing.T) {
	const wait = 8 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "lb-wait", 2, harness.ASGSpec{})
	target := s.insts[0]
	pods := s.grPlacePods(ctx, target, "web", 2)
	payload, err := env.StartTerminating(ctx, s.asg, target, "token-lb-1")
	if err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute, "LB_DRAIN_WAIT="+wait.String())
	type result struct {
		out handler.Outcome
		err error
	}
	done := make(chan result, 1)
	began := time.Now()
	go func() {
		out, err := harness.Invoke(ctx, rt, payload)
		done <- result{out, err}
	}()
	// the exclusion first, the pods still there
	var excluded time.Time
	for excluded.IsZero() && time.Since(began) < wait {
		if n := grGetNode(t, ctx, target.PrivateDNSName); n.Labels[node.LabelExcludeLB] == "true" {
			excluded = time.Now()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if excluded.IsZero() {
		t.Fatalf("the node was not excluded from load balancers within %s", wait)
	}
	time.Sleep(wait / 2)
	for _, p := range pods {
		got, err := env.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || got.UID != p.UID || got.DeletionTimestamp != nil || got.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s evicted (or gone) %s after the exclusion, before LB_DRAIN_WAIT (%s): %v", p.Name, time.Since(excluded).Round(time.Millisecond), wait, err)
		}
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("outcome after %s: %+v", time.Since(began).Round(time.Millisecond), r.out)
	if r.out.Action != handler.ActionDrained || len(r.out.Evicted) != len(pods) || r.out.LifecycleResult != "CONTINUE" {
		t.Errorf("outcome %s (%s), evicted %v: want drained, CONTINUE", r.out.Action, r.out.Detail, r.out.Evicted)
	}
	var waited, evicting int64 = -1, -1
	for _, st := range r.out.Timeline {
		switch st.Step {
		case handler.StepLBWait:
			waited = st.AtMS
		case handler.StepEvicting:
			evicting = st.AtMS
		}
	}
	if waited < 0 || evicting-waited < wait.Milliseconds()-1000 {
		t.Errorf("timeline %+v: want %s, then the evictions %s later", r.out.Timeline, handler.StepLBWait, wait)
	}
	if ok, _ := s.completions(ctx, target.ID); len(ok) != 1 {
		t.Errorf("completions %+v: want one", ok)
	}

	dry := s.function(ctx, time.Minute, "LB_DRAIN_WAIT="+wait.String(), "DRY_RUN=true")
	other := s.insts[1]
	s.grPlacePods(ctx, other, "dry", 1)
	payload, err = env.StartTerminating(ctx, s.asg, other, "token-lb-dry")
	if err != nil {
		t.Fatal(err)
	}
	out, err := harness.Invoke(ctx, dry, payload)
	if err != nil {
		t.Fatal(err)
	}
	if out.Plan == nil || !strings.Contains(out.Plan.LBWait, "wait "+wait.String()) {
		t.Errorf("dry run plan %+v: want it to say it would wait %s", out.Plan, wait)
	}
	if n := grGetNode(t, ctx, other.PrivateDNSName); n.Labels[node.LabelExcludeLB] != "" || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == node.TaintDraining }) {
		t.Errorf("a dry run marked the node: labels %v taints %v", n.Labels, n.Spec.Taints)
	}
}
