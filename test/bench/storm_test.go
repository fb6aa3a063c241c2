package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/test/harness"
)

var (
	flagStormNodes = flag.Int("storm-nodes", 50, "nodes drained at once in BenchmarkStorm")
	flagStormRuns  = flag.Int("storm-runs", 1, "storms measured by BenchmarkStorm, for each PDB")
	flagStorms     = flag.String("storms", "tight,loose,shared,spot,floor,single", "the parts of BenchmarkStorm and BenchmarkNTHStorm to run")
)

// stormPart reports whether -storms names part.
func stormPart(part string) bool { return slices.Contains(strings.Split(*flagStorms, ","), part) }

// stormPods is the pods of each storm node (one Deployment per node).
const stormPods = 20

// stormRWOEvery: every stormRWOEvery-th storm node also runs a one-replica
// StatefulSet pod with an RWO volume (the issue's "StatefulSet with RWO
// volumes spread over them"), whose detach the drain waits for.
const stormRWOEvery = 5

// stormPodsOf is the pods a storm of n nodes drains: stormPods on each, and
// the StatefulSet pod of every stormRWOEvery-th (placeStorm: nodes 0, 5, ...).
func stormPodsOf(n int) int { return n*stormPods + (n+stormRWOEvery-1)/stormRWOEvery }

// stormContinuationWait bounds the wait for hooks still being drained by a
// continuation after every delivery has answered.
const stormContinuationWait = 15 * time.Minute

// stormSlot is the taint that reserves a storm node for its own workloads
// while the scene is built (see placeStorm).
const stormSlot = "bench.node-drainer.io/storm-slot"

// The storms' shapes: the (PDBs of 10 %), the same with PDBs of
// 50 % (node-drainer's own overhead), and PDBs of 10 % that span every node.
var (
	stormTight  = stormShape{pct: 10}
	stormLoose  = stormShape{pct: 50}
	stormShared = stormShape{pct: 10, shared: true}
)

// stormShape lays out a storm's pods.
type stormShape struct {
	// pct: the share of each Deployment's pods (percent) its PDB allows
	// unavailable, at least one
	pct int
	// shared: stormPods Deployments of one pod on every storm node, so each
	// PDB spans every node and the drains evict against the same PDBs at
	// once; otherwise one Deployment of stormPods pods per node, under a
	// PDB of its own
	shared bool
}

// replicas is the pods of each of the storm's Deployments, of n nodes.
func (sh stormShape) replicas(n int) int {
	if sh.shared {
		return n
	}
	return stormPods
}

// maxUnavailable is what each PDB of a storm of n nodes allows.
func (sh stormShape) maxUnavailable(n int) int { return max(1, sh.replicas(n)*sh.pct/100) }

// placeStorm lays out the storm's pods on the targets by shape, and a
// StatefulSet with an RWO volume on every stormRWOEvery-th target, all at
// once: target i is tainted stormSlot=<i>:NoSchedule and only its own
// workloads tolerate it (shared Deployments tolerate every slot and are
// spread one pod per target), while the spares are cordoned. The spares
// are uncordoned at the end; they are the only nodes the replacements can
// go to. It returns each Deployment's floor (its ready pods must not fall
// below it) by app label.
func (s *scene) placeStorm(ctx context.Context, targets, spares []harness.Instance, shape stormShape) (map[string]int, error) {
	cordon := func(on bool) error {
		return eachInstance(spares, func(_ int, inst harness.Instance) error { return env.SetUnschedulable(ctx, inst.PrivateDNSName, on) })
	}
	if err := cordon(true); err != nil {
		return nil, err
	}
	// every target reserved before any workload is placed
	if err := eachInstance(targets, func(i int, t harness.Instance) error {
		return env.TaintNode(ctx, t.PrivateDNSName, corev1.Taint{Key: stormSlot, Value: strconv.Itoa(i), Effect: corev1.TaintEffectNoSchedule})
	}); err != nil {
		return nil, err
	}
	n := len(targets)
	replicas, maxUnavailable := shape.replicas(n), shape.maxUnavailable(n)
	floors := map[string]int{}
	var mu sync.Mutex
	deploy := func(w harness.Workload) error {
		if _, err := env.Deployment(ctx, w, false); err != nil {
			return err
		}
		if _, err := env.PDB(ctx, w, maxUnavailable, 0); err != nil {
			return err
		}
		mu.Lock()
		floors[w.Name] = replicas - maxUnavailable
		mu.Unlock()
		_, err := env.WaitPodsRunning(ctx, s.name, "app="+w.Name, replicas, 5*time.Minute)
		return err
	}
	if shape.shared {
		if err := eachIndex(stormPods, func(j int) error {
			w := s.workload(fmt.Sprintf("app%d", j), int32(replicas))
			w.Tolerations = []corev1.Toleration{{Key: stormSlot, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
			w.Spread = true
			return deploy(w)
		}); err != nil {
			return nil, err
		}
	}
	var pvs []string
	err := eachInstance(targets, func(i int, t harness.Instance) error {
		tolerate := []corev1.Toleration{{Key: stormSlot, Operator: corev1.TolerationOpEqual, Value: strconv.Itoa(i), Effect: corev1.TaintEffectNoSchedule}}
		if !shape.shared {
			w := s.workload(fmt.Sprintf("app%d", i), int32(replicas))
			w.Tolerations = tolerate
			if err := deploy(w); err != nil {
				return err
			}
		}
		if i%stormRWOEvery != 0 {
			return nil
		}
		db := s.statefulWorkload(fmt.Sprintf("db%d", i))
		db.Tolerations = tolerate
		pv, err := env.StatefulSet(ctx, db, harness.Zone)
		if err != nil {
			return err
		}
		mu.Lock()
		pvs = append(pvs, pv)
		mu.Unlock()
		where, err := env.WaitPodVolumeAttached(ctx, s.name, db.Name+"-0", pv, 5*time.Minute)
		if err == nil && where != t.PrivateDNSName {
			err = fmt.Errorf("storm scene: %s-0 on %s, want %s", db.Name, where, t.PrivateDNSName)
		}
		return err
	})
	s.pvs = append(s.pvs, pvs...)
	if err != nil {
		return nil, err
	}
	return floors, cordon(false)
}

// stormMetric names a storm metric by its node count, as the table
// does (storm_50_nodes_p95_s).
func stormMetric(n int, name string) string { return fmt.Sprintf("storm_%d_nodes_%s", n, name) }

// stormScene builds a storm's scene for d (nil: no drainer): n targets
// placed by placeStorm and n/2+1 spares for their replacements (the first
// n of s.insts are the targets). The caller removes the scene.
func stormScene(b *testing.B, ctx context.Context, d drainer, prefix string, n int, shape stormShape) (*scene, map[string]int) {
	b.Helper()
	s, err := newScene(ctx, d, sceneName(prefix), n+n/2+1)
	if err == nil {
		var floors map[string]int
		if floors, err = s.placeStorm(ctx, s.insts[:n], s.insts[n:], shape); err == nil {
			return s, floors
		}
	}
	if s != nil {
		s.remove(context.WithoutCancel(ctx))
	}
	b.Fatal(err)
	return nil, nil
}

// percentile95 is the 95th percentile of vs (sorted in place; 0 for none).
func percentile95(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	return vs[min(len(vs)-1, (len(vs)*95+99)/100-1)]
}

// BenchmarkStorm: -storm-nodes nodes of stormPods pods each and a
// StatefulSet pod on an RWO volume on every stormRWOEvery-th node
// (placeStorm); the terminate hooks of all of them sent at once, one fresh
// function process per hook (Lambda's concurrency). Three storms: one
// Deployment per node under PDBs that allow 10 % unavailable (the storm is
// bound by the PDBs: waves of replacements); the same with PDBs that allow
// 50 % (bound by node-drainer's own overhead, loose_pdb_); and stormPods
// Deployments of one pod per node under PDBs of 10 %, so every drain evicts
// against every PDB at once (shared_pdb_); and that layout again drained on
// spot interruption warnings instead of hooks (spot_: no hook, each drain
// bounded by SPOT_DRAIN_TIMEOUT, done when its invoke answers "drained";
// spot_emptied_p95_s: when the last pod of each node was deleted, as the
// peer's spot drains are timed).
// Then the control plane alone on
// the first two storms' scenes (floor_p95_s and loose_pdb_floor_p95_s, see
// stormFloor: the least a drainer of no cost could take), then one such
// node alone (drain_20_pods_s) for the ratio. -storms picks the parts.
// Per storm:
//   - hooks_completed: hooks completed with CONTINUE (goal: all);
//   - pdb_violations: Deployments whose ready pods a pod watch saw fall
//     below the PDB's floor during the storm (goal 0);
//   - p95_s: 95th percentile of event → hook completed;
//   - api_requests: the function's own apiserver requests (its FlowSchema's
//     dispatched count), all hooks together; api_requests_per_node and
//     evictions_per_pod (the evictions the apiserver accepted per pod
//     drained; 1.0: none but the first of each pod, pods_evicted_twice
//     adds its replacements evicted again) and eviction_requests_per_pod
//     (every eviction it was asked for, whatever its answer; 1.0: none
//     retried after a 429 or a 409).
func BenchmarkStorm(b *testing.B) {
	needHarness(b)
	n := *flagStormNodes
	var names []string
	for _, pre := range []string{"", "loose_pdb_", "shared_pdb_", spotPrefix} {
		for _, m := range []string{stormDone(pre), "pdb_violations", "p95_s", "api_requests", "api_requests_per_node", "evictions_per_pod", "eviction_requests_per_pod", "pods_evicted_twice"} {
			names = append(names, stormMetric(n, pre+m))
		}
	}
	names = append(names, stormMetric(n, spotPrefix+"emptied_p95_s"), stormMetric(n, "floor_p95_s"), stormMetric(n, "loose_pdb_floor_p95_s"), "drain_20_pods_s")
	defer failedIfFailed(b, names...)
	ctx, cancel := context.WithTimeout(b.Context(), 60*time.Minute)
	defer cancel()
	for i := range *flagStormRuns {
		if stormPart("tight") {
			storm(b, ctx, stormDrainer(), i+1, n, stormTight, "")
		}
		if stormPart("loose") {
			storm(b, ctx, stormDrainer(), i+1, n, stormLoose, "loose_pdb_")
		}
		if stormPart("shared") {
			storm(b, ctx, stormDrainer(), i+1, n, stormShared, "shared_pdb_")
		}
		if stormPart("spot") {
			storm(b, ctx, stormDrainer(), i+1, n, stormShared, spotPrefix)
		}
		if stormPart("floor") {
			record(stormMetric(n, "floor_p95_s"), stormFloor(b, ctx, n, stormTight))
			record(stormMetric(n, "loose_pdb_floor_p95_s"), stormFloor(b, ctx, n, stormLoose))
		}
	}
	for i := range *flagRuns {
		if stormPart("single") {
			storm(b, ctx, ours{}, i+1, 1, stormLoose, "single_")
		}
	}
	b.ReportMetric(0, "ns/op")
	for _, m := range names {
		report(b, m)
	}
}

// storm drains n nodes at once, their pods and PDBs laid out by shape, the
// hooks handled by d; its metrics are named with prefix
// ("single_" records drain_20_pods_s only) and by d.
func storm(b *testing.B, ctx context.Context, d drainer, run, n int, shape stormShape, prefix string) {
	b.Helper()
	s, floors := stormScene(b, ctx, d, "storm", n, shape)
	defer s.remove(context.WithoutCancel(ctx))
	targets := s.insts[:n]
	// the spares stay free for the replacements; the targets' pods are theirs
	spot := prefix == spotPrefix
	payloads := make([][]byte, n)
	ids, tokens := make([]string, n), make([]string, n)
	var err error
	for i, t := range targets {
		ids[i] = t.ID
		if spot {
			payloads[i], err = harness.EventFile("spot-interruption.json", map[string]string{"instance-id": t.ID})
		} else {
			tokens[i] = lifecycleToken()
			payloads[i], err = env.StartTerminating(ctx, s.name, t, tokens[i])
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	h, err := d.start(ctx, n)
	if err != nil {
		b.Fatal(err)
	}
	defer h.stop()
	// the peer answers nothing: its warning's drain is done when the node
	// holds none of the scene's pods; ours is timed that way too, beside its
	// answer (which also waits for the RWO volumes' detach)
	peerNTH, peer := d.(nth)
	var emptied func() []time.Time
	if spot {
		nodes := make([]string, n)
		for i, t := range targets {
			nodes[i] = t.PrivateDNSName
		}
		var stopEmptied func()
		if emptied, stopEmptied, err = watchEmptied(ctx, s.name, nodes); err != nil {
			b.Fatal(err)
		}
		defer stopEmptied()
	}
	violations, err := watchPDBFloor(ctx, s.name, floors)
	if err != nil {
		b.Fatal(err)
	}
	targetNodes := make([]string, n)
	for i, t := range targets {
		targetNodes[i] = t.PrivateDNSName
	}
	twice, stopTwice, err := watchEvictedTwice(ctx, s.name, targetNodes)
	if err != nil {
		b.Fatal(err)
	}
	defer stopTwice()
	before, err := readAPICounts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// the disruption controller (one worker) writes every PDB status the
	// evictions wait for: how long its queue held them, how busy it was
	pdbQueue, err := readQueue(ctx, "disruption")
	if err != nil {
		b.Fatal(err)
	}
	send := time.Now()
	defer profileControlPlane(b, ctx, fmt.Sprintf("%sstorm-%srun%d", d.metric(""), prefix, run))()
	var wg sync.WaitGroup
	answers, answered := make([]delivered, n), make([]time.Duration, n)
	for i := range targets {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * *flagStormStagger) // 0: all at once
			answers[i], _ = h.deliver(ctx, i, payloads[i])
			answered[i] = time.Since(send)
		})
	}
	wg.Wait()
	var took []float64
	dumped := 0
	failed := func(i int) {
		// a few logs explain a failure; fifty repeat it
		if dumped++; dumped <= 3 {
			h.dump(b, i)
		}
	}
	switch {
	case spot && peer:
		// drained within the notice: the instance is gone after it
		at := waitEmptied(ctx, emptied, send.Add(spotNotice))
		// the instances are reclaimed at the notice: what NTH has not
		// drained by then it never will
		peerNTH.retire()
		for i := range targets {
			if !at[i].IsZero() && at[i].Sub(send) <= spotNotice {
				took = append(took, at[i].Sub(send).Seconds())
			} else {
				failed(i)
			}
		}
		markCapped(d.metric(stormMetric(n, prefix+"p95_s")), spotNotice.Seconds())
	case spot:
		// no hook: a warning's drain ends with its invoke (it never continues)
		at := emptied()
		var empty []float64
		for i := range targets {
			if out := answers[i].out; out != nil && out.Action == handler.ActionDrained {
				took = append(took, answered[i].Seconds())
			} else {
				failed(i)
			}
			if !at[i].IsZero() {
				empty = append(empty, at[i].Sub(send).Seconds())
			}
		}
		record(d.metric(stormMetric(n, prefix+"emptied_p95_s")), percentile95(empty))
	default:
		// a drain that outlasts half the hook's heartbeat timeout heartbeats
		// and continues in a fresh invocation (an asynchronous self-invoke),
		// which completes the hook after the first invoke has answered
		calls, ok, err := waitCompletions(ctx, ids, tokens, max(d.settle(), stormContinuationWait))
		if err != nil {
			b.Fatal(err)
		}
		for i := range targets {
			if ok[i] && calls[i].Params["LifecycleActionResult"] == "CONTINUE" {
				took = append(took, calls[i].Time.Sub(send).Seconds())
			} else {
				failed(i)
			}
		}
	}
	after, err := readAPICounts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	pdbQueueAfter, err := readQueue(ctx, "disruption")
	if err != nil {
		b.Fatal(err)
	}
	span := time.Since(send)
	broken := violations()
	delta := after.since(before)
	p95 := percentile95(took)
	if spot && peer {
		// over every node: one not drained by the notice counts as the
		// notice, so a p95 there means "not within it"
		missed := slices.Repeat([]float64{spotNotice.Seconds()}, n-len(took))
		p95 = percentile95(append(slices.Clone(took), missed...))
	}
	done := stormDone(prefix)
	progress("%sstorm %srun %d: %d nodes × %d pods, %d Deployments of %d under PDBs of maxUnavailable %d, %s %d, p95 %.2f s, PDB floors broken %v; api requests: %s",
		d.metric(""), prefix, run, n, stormPods, len(floors), shape.replicas(n), shape.maxUnavailable(n), done, len(took), p95, broken, delta)
	progress("%sstorm %srun %d: %d replacement pods bound to a node of the storm (evicted twice)", d.metric(""), prefix, run, twice())
	progress("%sstorm %srun %d: the disruption controller's queue: %s", d.metric(""), prefix, run, pdbQueueAfter.summary(pdbQueue, span))
	if prefix == "single_" {
		record(d.metric("drain_20_pods_s"), p95)
	} else {
		record(d.metric(stormMetric(n, prefix+done)), float64(len(took)))
		record(d.metric(stormMetric(n, prefix+"pdb_violations")), float64(len(broken)))
		record(d.metric(stormMetric(n, prefix+"p95_s")), p95)
		record(d.metric(stormMetric(n, prefix+"api_requests")), delta[d.apiKey()])
		record(d.metric(stormMetric(n, prefix+"api_requests_per_node")), delta[d.apiKey()]/float64(n))
		record(d.metric(stormMetric(n, prefix+"evictions_per_pod")), delta[evictionsAccepted]/float64(stormPodsOf(n)))
		record(d.metric(stormMetric(n, prefix+"eviction_requests_per_pod")), delta[evictionRequests]/float64(stormPodsOf(n)))
		record(d.metric(stormMetric(n, prefix+"pods_evicted_twice")), float64(twice()))
	}
	// the peer's spot drains that miss the notice are its result, not a
	// failure of the bench
	if len(took) != n && !(spot && peer) {
		b.Fatalf("%d of %d nodes drained (%s)", len(took), n, done)
	}
}

// profileControlPlane starts CPU profiles of kube-apiserver and
// kube-controller-manager over the next -profile-for, when -profile names a
// directory, and returns what waits for them and writes them there as
// <name>-<component>.pprof (for `go tool pprof -top`).
func profileControlPlane(b *testing.B, ctx context.Context, name string) (wait func()) {
	if *flagProfile == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for _, c := range []string{"apiserver", "controller-manager"} {
		wg.Go(func() {
			raw, err := env.CPUProfile(ctx, c, *flagProfileFor)
			if err == nil {
				err = os.WriteFile(filepath.Join(*flagProfile, name+"-"+c+".pprof"), raw, 0o644)
			}
			if err != nil {
				b.Errorf("profiling the %s: %v", c, err)
			}
		})
	}
	return wg.Wait
}

// spotPrefix names the storm of spot interruption warnings: no hook, each
// drain bounded by the 2-minute notice (SPOT_DRAIN_TIMEOUT).
const spotPrefix = "spot_"

// spotNotice is a spot interruption warning's notice: the instance is
// reclaimed this long after it, drained or not.
const spotNotice = 2 * time.Minute

// stormDone names what a storm counts as a node handled: the hooks it
// completed with CONTINUE, or for the spot storm the warnings whose invoke
// answered "drained".
func stormDone(prefix string) string {
	if prefix == spotPrefix {
		return "drained"
	}
	return "hooks_completed"
}

// watchPDBFloor watches the pods of namespace ns (an informer: list, then
// watch) and notes each app of floors whose ready, not-terminating pods fall
// below its floor. stop ends the watch and returns those apps: each a PDB
// violation.
func watchPDBFloor(ctx context.Context, ns string, floors map[string]int) (stop func() []string, err error) {
	var mu sync.Mutex
	ready := map[string]map[string]bool{} // app -> pod -> ready and not terminating
	broken := map[string]bool{}
	var synced bool
	stopWatch, err := watchPods(ctx, ns, func(p *corev1.Pod, gone bool) {
		app := p.Labels["app"]
		floor, watched := floors[app]
		if !watched {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if ready[app] == nil {
			ready[app] = map[string]bool{}
		}
		ready[app][p.Name] = !gone && p.DeletionTimestamp == nil && podReady(p)
		if synced {
			n := 0
			for _, r := range ready[app] {
				if r {
					n++
				}
			}
			if n < floor {
				broken[app] = true
			}
		}
	})
	if err != nil {
		return nil, err
	}
	mu.Lock()
	synced = true
	mu.Unlock()
	return func() []string {
		stopWatch()
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for app := range broken {
			out = append(out, app)
		}
		slices.Sort(out)
		return out
	}, nil
}

// watchPods runs a pod informer on namespace ns (list, then watch) that
// calls on for each pod added, updated or deleted (gone), and returns once
// it has synced; stop ends it.
func watchPods(ctx context.Context, ns string, on func(p *corev1.Pod, gone bool)) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns))
	pods := f.Core().V1().Pods().Informer()
	update := func(obj any, gone bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj, gone = t.Obj, true
		}
		if p, ok := obj.(*corev1.Pod); ok {
			on(p, gone)
		}
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { update(o, false) },
		UpdateFunc: func(_, o any) { update(o, false) },
		DeleteFunc: func(o any) { update(o, true) },
	}); err != nil {
		cancel()
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		cancel()
		f.Shutdown()
		return nil, fmt.Errorf("pod watch of %s did not sync", ns)
	}
	return func() { cancel(); f.Shutdown() }, nil
}

// watchEmptied watches the pods of namespace ns and notes when each of
// nodes last came to hold none of them (a pod counts until its deletion is
// done, not from its eviction). emptied returns those moments by node index
// (zero for a node that holds a pod); stop ends the watch.
func watchEmptied(ctx context.Context, ns string, nodes []string) (emptied func() []time.Time, stop func(), err error) {
	var mu sync.Mutex
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		index[n] = i
	}
	held := make([]sets.Set[string], len(nodes))
	at := make([]time.Time, len(nodes))
	stop, err = watchPods(ctx, ns, func(p *corev1.Pod, gone bool) {
		i, ok := index[p.Spec.NodeName]
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if held[i] == nil {
			held[i] = sets.New[string]()
		}
		if gone {
			held[i].Delete(p.Name)
		} else {
			held[i].Insert(p.Name)
		}
		switch {
		case held[i].Len() > 0:
			at[i] = time.Time{}
		case at[i].IsZero():
			at[i] = time.Now() // it has just come to hold none
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(at)
	}, stop, nil
}

// waitEmptied polls emptied until every node is empty or deadline passes,
// then returns its answer (the moments are the watch's, not the poll's; a
// timeout is not an error: the caller judges each node against its notice).
func waitEmptied(ctx context.Context, emptied func() []time.Time, deadline time.Time) []time.Time {
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Until(deadline), true, func(context.Context) (bool, error) {
		return !slices.ContainsFunc(emptied(), time.Time.IsZero), nil
	})
	return emptied()
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
