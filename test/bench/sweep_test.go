package bench

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
)

var (
	flagSweepNodes = flag.Int("sweep-nodes", 2000, "nodes of the sweep benchmark's cluster")
	flagSweepDead  = flag.Int("sweep-dead", 20, "of them, nodes of stopped instances with a pod")
	flagSweepHooks = flag.Int("sweep-hooks", 5, "of them, terminate hooks whose event never came")
)

// BenchmarkSweep2000Nodes: sweep_2000_nodes_s (one sweep invocation, start to
// response), sweep_2000_nodes_handled (hooks completed and dead nodes
// released by that one sweep), sweep_2000_nodes_api_requests (every request
// it sent the apiserver, actions included) and
// sweep_2000_nodes_quiet_api_requests (the next sweep, with nothing left to
// do: the reading's own cost).
//
// The cluster is built once (building 2,000 nodes takes minutes here), so
// this benchmark runs once whatever -runs says. The function reaches the
// apiserver through a recording proxy, which counts its requests exactly.
func BenchmarkSweep2000Nodes(b *testing.B) {
	needHarness(b)
	defer failedIfFailed(b, "sweep_2000_nodes_s", "sweep_2000_nodes_handled", "sweep_2000_nodes_api_requests", "sweep_2000_nodes_quiet_api_requests")
	ctx, cancel := context.WithTimeout(b.Context(), 40*time.Minute)
	defer cancel()
	name := sceneName("sweep")
	tag := "kubernetes.io/cluster/" + name
	const groups = 4
	per := (*flagSweepNodes + groups - 1) / groups
	begin := time.Now()
	var (
		insts []harness.Instance
		asgs  []string
		asgOf = map[string]string{}
	)
	for g := range groups {
		asg := fmt.Sprintf("%s-%d", name, g)
		in, err := env.CreateASG(ctx, harness.ASGSpec{Name: asg, Size: per, Hooks: true, ClusterTag: tag})
		if err != nil {
			b.Fatal(err)
		}
		insts = append(insts, in...)
		asgs = append(asgs, asg)
		for _, i := range in {
			asgOf[i.ID] = asg
		}
	}
	if err := env.Namespace(ctx, name); err != nil {
		b.Fatal(err)
	}
	insts = uniqueNames(insts) // the emulator draws private IPs at random: a few collide
	addNodes(b, ctx, insts, name)
	progress("sweep: %d nodes in %d groups ready in %s", len(insts), groups, time.Since(begin).Round(time.Second))

	// what events missed: stopped instances with a pod each, and hooks
	// waiting with no event sent
	dead, hooked := insts[:*flagSweepDead], insts[*flagSweepDead:*flagSweepDead+*flagSweepHooks]
	for i, d := range dead {
		if _, err := env.BarePod(ctx, harness.Workload{Namespace: name, Name: fmt.Sprintf("lost-%d", i), Replicas: 1}, d.PrivateDNSName); err != nil {
			b.Fatal(err)
		}
		if err := stopInstance(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
	for i, h := range hooked {
		asg := asgOf[h.ID]
		if _, err := env.StartTerminating(ctx, asg, h, fmt.Sprintf("token-sweep-%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	// the kubelets of the stopped instances are silent: their Leases go
	// stale (the guard's evidence) before the sweep comes
	time.Sleep(16 * time.Second)

	sw := newSweeper(b, ctx, tag, asgs)
	defer sw.stop()
	sweep := func() (handler.Outcome, float64, int, string) {
		r := sw.sweep(b, ctx)
		return r.out, r.took, r.reqs, r.verbs
	}
	out, took, reqs, verbs := sweep()
	if out.Sweep == nil {
		b.Fatalf("sweep outcome %+v: no summary", out)
	}
	handled := len(out.Sweep.Hooks) + len(out.Sweep.Dead)
	progress("sweep over %d nodes: %.2f s (reading %d ms, acting %d ms), %d handled (%d hooks, %d dead), %d apiserver requests (%s); %s",
		out.Sweep.Nodes, took, out.Sweep.ReadMS, out.Sweep.ActMS, handled, len(out.Sweep.Hooks), len(out.Sweep.Dead), reqs, verbs, out.Detail)
	record("sweep_2000_nodes_s", took)
	record("sweep_2000_nodes_handled", float64(handled))
	record("sweep_2000_nodes_api_requests", float64(reqs))
	quiet, qtook, qreqs, qverbs := sweep()
	progress("reading by source, ms: %v (quiet: %v)", out.Sweep.ReadMSBy, quiet.Sweep.ReadMSBy)
	// the emulator's DescribeInstances scans every instance it holds in
	// Python for each filter: its share is shown apart
	record("sweep_2000_nodes_ec2_read_s", float64(out.Sweep.ReadMSBy["ec2"])/1000)
	record("sweep_2000_nodes_without_ec2_read_s", took-float64(out.Sweep.ReadMSBy["ec2"])/1000)
	progress("quiet sweep: %.2f s (reading %d ms), %d apiserver requests (%s); %s", qtook, quiet.Sweep.ReadMS, qreqs, qverbs, quiet.Detail)
	record("sweep_2000_nodes_read_s", float64(out.Sweep.ReadMS)/1000)
	record("sweep_2000_nodes_quiet_s", qtook)
	record("sweep_2000_nodes_quiet_api_requests", float64(qreqs))
	b.ReportMetric(0, "ns/op")
	for _, m := range []string{"sweep_2000_nodes_s", "sweep_2000_nodes_read_s", "sweep_2000_nodes_ec2_read_s", "sweep_2000_nodes_without_ec2_read_s", "sweep_2000_nodes_handled", "sweep_2000_nodes_api_requests", "sweep_2000_nodes_quiet_s", "sweep_2000_nodes_quiet_api_requests"} {
		report(b, m)
	}
}

// addNodes registers the instances' kwok nodes, 32 at a time.
func addNodes(b *testing.B, ctx context.Context, insts []harness.Instance, pool string) {
	b.Helper()
	sem := make(chan struct{}, 32)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, i := range insts {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := env.AddNodeFor(ctx, i, map[string]string{"pool": pool}); err != nil {
				mu.Lock()
				first = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

// uniqueNames drops the instances whose private DNS name another already
// has (those stay instances without a node).
func uniqueNames(insts []harness.Instance) []harness.Instance {
	seen := map[string]bool{}
	var out []harness.Instance
	for _, i := range insts {
		if !seen[i.PrivateDNSName] {
			seen[i.PrivateDNSName] = true
			out = append(out, i)
		}
	}
	return out
}

// byVerb summarises requests as "GET 12, PATCH 3, ..." and, in brackets,
// by verb and resource ("GET pods 10, GET nodes 2, ..."), watches apart.
func byVerb(reqs []fp.Request) string {
	count, byRes := map[string]int{}, map[string]int{}
	for _, r := range reqs {
		count[r.Method]++
		verb := r.Method
		if strings.Contains(r.Query, "watch=true") || strings.Contains(r.Query, "watch=1") {
			verb = "WATCH"
		}
		byRes[verb+" "+resourceOf(r.Path)]++
	}
	var parts []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if count[m] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", m, count[m]))
		}
	}
	keys := slices.Sorted(maps.Keys(byRes))
	res := make([]string, 0, len(keys))
	for _, k := range keys {
		res = append(res, fmt.Sprintf("%s %d", k, byRes[k]))
	}
	return strings.Join(parts, ", ") + " [" + strings.Join(res, ", ") + "]"
}

// resourceOf is the resource a Kubernetes API path names ("pods",
// "pods/eviction", "leases"), "?" for other paths.
func resourceOf(path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(seg) >= 3 && seg[0] == "api":
		seg = seg[2:]
	case len(seg) >= 4 && seg[0] == "apis":
		seg = seg[3:]
	default:
		return "?"
	}
	if len(seg) >= 3 && seg[0] == "namespaces" {
		seg = seg[2:]
	}
	if len(seg) >= 3 {
		return seg[0] + "/" + seg[2]
	}
	return seg[0]
}

// sweeper invokes sweeps of some groups through a recording proxy (which
// counts the function's apiserver requests exactly), one function process
// for all of them.
type sweeper struct {
	api     *fp.Proxy
	f       *fn
	payload []byte
}

// sweepRun is one sweep invocation: its outcome, start to response (s), its
// apiserver requests (count, by verb) and how many of them read a further
// page of a list (a continue token).
type sweepRun struct {
	out   handler.Outcome
	took  float64
	reqs  int
	verbs string
	pages int
}

// newSweeper starts a function that sweeps the groups asgs (the cluster tag
// tag), behind a recording proxy of the apiserver; extra is more of its
// configuration (NAME=value).
func newSweeper(b *testing.B, ctx context.Context, tag string, asgs []string, extra ...string) *sweeper {
	b.Helper()
	serving, err := env.ServingTLS()
	if err != nil {
		b.Fatal(err)
	}
	api, err := fp.Start(fp.Options{Upstream: env.Server, Flavor: fp.Kubernetes, ServeTLS: serving, UpstreamTLS: env.ClientTLS(), Record: true})
	if err != nil {
		b.Fatal(err)
	}
	log := &harness.LogBuffer{}
	rt, err := env.StartFunction(ctx, harness.FunctionOptions{Bootstrap: bootstrap, Timeout: 3 * time.Minute, Log: log, // a sweep takes seconds: a stall fails the run in minutes, its log kept
		Env: append([]string{"CLUSTER_ENDPOINT=" + api.URL, "CLUSTER_TAG_KEY=" + tag, "ASG_NAMES=" + strings.Join(asgs, ",")}, extra...)})
	if err != nil {
		api.Stop()
		b.Fatal(err)
	}
	payload, err := harness.EventFile("sweep.json", nil)
	if err != nil {
		api.Stop()
		b.Fatal(err)
	}
	return &sweeper{api: api, f: &fn{rt: rt, log: log}, payload: payload}
}

// stop stops the function (its log to -function-logs) and the proxy.
func (s *sweeper) stop() {
	s.f.stop()
	s.api.Stop()
}

func (s *sweeper) sweep(b *testing.B, ctx context.Context) sweepRun {
	b.Helper()
	before := len(s.api.Requests())
	start := time.Now()
	out, err := harness.Invoke(ctx, s.f.rt, s.payload)
	took := time.Since(start).Seconds()
	if err != nil {
		s.f.dump(b)
		b.Fatal(err)
	}
	reqs := s.api.Requests()[before:]
	pages := 0
	for _, r := range reqs {
		if strings.Contains(r.Query, "continue=") {
			pages++
		}
	}
	return sweepRun{out: out, took: took, reqs: len(reqs), verbs: byVerb(reqs), pages: pages}
}

// peakRSS is the function process's peak RSS so far (MiB).
func (s *sweeper) peakRSS(b *testing.B) float64 {
	b.Helper()
	v, err := peakRSSMiB(s.f.rt.PID())
	if err != nil {
		b.Fatal(err)
	}
	return v
}
