package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/test/harness"
)

// TestLongDrainContinues: a PDB blocks the drain for longer than one
// invocation may run. The function heartbeats the hook and continues in
// fresh asynchronous invocations; meanwhile its cached cluster token is
// forced to expire and is replaced. Once the PDB allows the eviction the
// drain completes and the lifecycle action is completed exactly once.
func TestLongDrainContinues(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "long", 2, harness.ASGSpec{})
	target := s.insts[0]
	w := s.guarded(ctx, target)
	// a function timeout of 8 s, 2 s kept back: each invocation drains ~6 s
	rt := s.function(ctx, 8*time.Second, "DEADLINE_MARGIN=2s", "DRAIN_TIMEOUT=3m")
	payload, err := env.StartTerminating(ctx, s.asg, target, "token-long")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(err)
	}
	if out.Action != "continued" {
		t.Fatalf("first invocation: %+v, want continued", out)
	}
	// force the cached token to expire while the continuations run
	time.Sleep(3 * time.Second)
	expiredAt := time.Now()
	env.Auth.ExpireTokensSignedBefore(expiredAt)
	// let it be blocked past two invocations, then relax the PDB
	time.Sleep(12 * time.Second)
	if err := env.Client.PolicyV1().PodDisruptionBudgets(s.ns).Delete(ctx, w.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// wait for the completion, then for the function to go idle
	var ok []string
	for time.Since(began) < 2*time.Minute {
		calls, _ := s.completions(ctx, target.ID)
		if len(calls) > 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := rt.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	completed, _ := s.completions(ctx, target.ID)
	if len(completed) != 1 || completed[0].Params["LifecycleActionResult"] != "CONTINUE" {
		t.Fatalf("want exactly one CONTINUE completion, got %+v", completed)
	}
	invs := rt.Invocations()
	async := 0
	for _, inv := range invs {
		if inv.Async {
			async++
			var o struct{ Action string }
			_ = json.Unmarshal(inv.Response, &o)
			ok = append(ok, o.Action)
		}
		if !inv.OK() {
			t.Errorf("invocation %s failed: %s %s", inv.RequestID, inv.ErrorType, inv.Error)
		}
	}
	if async < 2 {
		t.Errorf("want the drain continued in at least 2 more invocations, got %d: %v", async, ok)
	}
	if last := ok[len(ok)-1]; last != "drained" {
		t.Errorf("last continuation: %s, want drained (all: %v)", last, ok)
	}
	calls, err := env.AWS.LifecycleCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	beats := 0
	for _, c := range calls {
		if c.Operation == "RecordLifecycleActionHeartbeat" && c.Params["InstanceId"] == target.ID && c.OK() {
			beats++
		}
	}
	if beats < 2 {
		t.Errorf("want a heartbeat per continuation, got %d", beats)
	}
	// the token: rejected once expired, then a fresh one accepted
	var rejected, renewed bool
	for _, r := range env.Auth.Reviews() {
		if r.Time.Before(expiredAt) {
			continue
		}
		if !r.Authenticated && strings.Contains(r.Reason, "forced expiry") {
			rejected = true
		}
		if r.Authenticated && rejected && strings.HasPrefix(r.Username, "node-drainer:") {
			renewed = true
		}
	}
	if !rejected || !renewed {
		t.Errorf("token not refreshed after forced expiry: rejected=%v renewed=%v", rejected, renewed)
	}
	t.Logf("continuations: %v, heartbeats %d, drain %s", ok, beats, time.Since(began).Round(time.Second))
}
