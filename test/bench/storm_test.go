package bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/node-drainer/node-drainer/test/harness"
)

var (
	flagStormNodes = flag.Int("storm-nodes", 10, "nodes drained at once in BenchmarkStorm (the issue's storm is 50)")
	flagStormRuns  = flag.Int("storm-runs", 1, "storms measured by BenchmarkStorm")
)

// BenchmarkStorm: -storm-nodes nodes of 20 pods each (one Deployment per
// node, its PDB allowing 2 unavailable, i.e. 10 %), the terminate hooks of
// all of them sent at once, one fresh function process per hook (Lambda's
// concurrency). storm_hooks_completed counts the hooks completed with
// CONTINUE; storm_p95_s is the 95th percentile of event → completion;
// storm_api_requests_per_node is the function's own apiserver requests (its
// FlowSchema's dispatched requests) per node; storm_evictions_per_pod is
// every eviction the apiserver received per pod drained (1.0: none retried
// into a 429).
func BenchmarkStorm(b *testing.B) {
	needHarness(b)
	defer failedIfFailed(b, "storm_hooks_completed", "storm_p95_s", "storm_api_requests_per_node", "storm_evictions_per_pod")
	ctx, cancel := context.WithTimeout(b.Context(), 40*time.Minute)
	defer cancel()
	for i := range *flagStormRuns {
		storm(b, ctx, i+1, *flagStormNodes)
	}
	b.ReportMetric(0, "ns/op")
	for _, m := range []string{"storm_hooks_completed", "storm_p95_s", "storm_api_requests_per_node", "storm_evictions_per_pod"} {
		report(b, m)
	}
}

func storm(b *testing.B, ctx context.Context, run, n int) {
	b.Helper()
	const perNode = 20
	spare := n/2 + 1
	s, err := newScene(ctx, sceneName("storm"), n+spare)
	if s != nil {
		defer s.remove(context.WithoutCancel(ctx))
	}
	if err != nil {
		b.Fatal(err)
	}
	targets := s.insts[:n]
	for i, t := range targets {
		w := s.workload(fmt.Sprintf("app%d", i), perNode)
		err := s.onlyOn(ctx, t, func() error {
			if _, err := env.Deployment(ctx, w, false); err != nil {
				return err
			}
			_, err := env.WaitPodsRunning(ctx, s.name, "app="+w.Name, perNode, 3*time.Minute)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := env.PDB(ctx, w, 2, 0); err != nil {
			b.Fatal(err)
		}
	}
	// the spares stay free for the replacements; the targets' pods are theirs
	payloads := make([][]byte, n)
	fns := make([]*fn, n)
	for i, t := range targets {
		if payloads[i], err = env.StartTerminating(ctx, s.name, t, fmt.Sprintf("token-%s-%d", s.name, i)); err != nil {
			b.Fatal(err)
		}
		if fns[i], err = startFunction(ctx); err != nil {
			b.Fatal(err)
		}
		defer fns[i].stop()
	}
	before, err := readAPICounts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	send := time.Now()
	var wg sync.WaitGroup
	for i := range targets {
		wg.Go(func() { _, _ = harness.Invoke(ctx, fns[i].rt, payloads[i]) })
	}
	wg.Wait()
	after, err := readAPICounts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	d := after.since(before)
	var took []float64
	for i, t := range targets {
		c, ok, err := completion(ctx, t.ID, fmt.Sprintf("token-%s-%d", s.name, i))
		if err != nil {
			b.Fatal(err)
		}
		if ok && c.Params["LifecycleActionResult"] == "CONTINUE" {
			took = append(took, c.Time.Sub(send).Seconds())
		} else {
			fns[i].dump(b)
		}
	}
	slices.Sort(took)
	p95 := 0.0
	if len(took) > 0 {
		p95 = took[min(len(took)-1, (len(took)*95+99)/100-1)]
	}
	progress("storm run %d: %d nodes × %d pods, %d hooks completed, p95 %.2f s; api requests: %s", run, n, perNode, len(took), p95, d)
	record("storm_hooks_completed", float64(len(took)))
	record("storm_p95_s", p95)
	record("storm_api_requests_per_node", d[fnKey]/float64(n))
	record("storm_evictions_per_pod", d["POST pods/eviction"]/float64(n*perNode))
	if len(took) != n {
		b.Fatalf("%d of %d hooks completed with CONTINUE", len(took), n)
	}
}
