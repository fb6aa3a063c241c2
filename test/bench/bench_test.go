package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/node-drainer/node-drainer/internal/drain"
	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
)

// The benchmarks run in this file's order: the two drains first (the second
// adds 5,000 background pods and removes them), the baseline last.

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// BenchmarkDrain110Pods: drain_110_pods_s, its invoke round trip and
// peak_rss_mb; after each run, the same scene drained by the bench's own
// evictions, no drainer (drain_110_pods_floor_s).
func BenchmarkDrain110Pods(b *testing.B) {
	needHarness(b)
	defer failedIfFailed(b, "drain_110_pods_s", "drain_110_pods_invoke_s", "drain_110_pods_own_s", "drain_110_pods_harness_cpu_s", "drain_110_pods_apiserver_gc_cpu_s", "drain_110_pods_floor_s", "drain_110_pods_floor_seen_gone_s", "drain_110_pods_floor_as_drainer_s", "peak_rss_mb")
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Minute)
	defer cancel()
	for i := range *flagRuns {
		drain, got := drain110(b, ctx, ours{}, "d110")
		progress("drain_110_pods run %d: %.2f s to hook completed, invoke %.2f s, peak RSS %.1f MiB; the function's timeline: %s; the harness's CPU meanwhile: %s", i+1, drain, got.invoke.Seconds(), got.rssMiB, timeline(got.out), got.cpu)
		record("drain_110_pods_s", drain)
		recordLoad(func(what string) string { return "drain_110_pods_" + what }, got)
		record("drain_110_pods_invoke_s", got.invoke.Seconds())
		if own, ok := ownSteps(got.out); ok {
			record("drain_110_pods_own_s", own)
		}
		record("peak_rss_mb", got.rssMiB)
		floor, seen := drain110FloorSeen(b, ctx)
		progress("drain_110_pods run %d: no drainer, the 110 evictions sent at once by the bench answered in %.2f s, seen gone on a watch in %.2f s", i+1, floor, seen)
		record("drain_110_pods_floor_s", floor)
		if seen >= 0 {
			record("drain_110_pods_floor_seen_gone_s", seen)
		}
		asDrainer := drain110Floor(b, ctx, harness.DrainerGroup)
		progress("drain_110_pods run %d: no drainer, the 110 evictions sent at once as the group %s (its priority level) answered in %.2f s", i+1, harness.DrainerGroup, asDrainer)
		record("drain_110_pods_floor_as_drainer_s", asDrainer)
		// the same drain with its outcome events put on a bus: off the
		// drain's path, so the same time and the same requests
		on := outcomesOn(b, ctx)
		drainOn, _ := drain110(b, ctx, on, "d110oc")
		progress("drain_110_pods run %d, outcome events on: %.2f s to hook completed", i+1, drainOn)
		record(on.metric("drain_110_pods_s"), drainOn)
		if *flagInProcess {
			in, tl := drain110InProcess(b, ctx)
			progress("drain_110_pods run %d: the drain package inside the bench (admin client), cordon to every pod gone and listed again, in %.2f s: %s", i+1, in, tl)
			record("drain_110_pods_in_process_s", in)
		}
	}
	b.ReportMetric(0, "ns/op")
	report(b, "drain_110_pods_s")
	report(b, "drain_110_pods_invoke_s")
	report(b, "drain_110_pods_own_s")
	report(b, "drain_110_pods_harness_cpu_s")
	report(b, "drain_110_pods_apiserver_gc_cpu_s")
	report(b, "drain_110_pods_floor_s")
	report(b, "drain_110_pods_floor_seen_gone_s")
	report(b, "drain_110_pods_floor_as_drainer_s")
	report(b, "drain_110_pods_outcomes_on_s")
	report(b, "api_requests_110_pods_outcomes_on")
	if *flagInProcess {
		report(b, "drain_110_pods_in_process_s")
	}
	report(b, "peak_rss_mb")
}

// BenchmarkDrain110PodsOther5000Pods: drain_110_pods_other_5000_pods_s.
func BenchmarkDrain110PodsOther5000Pods(b *testing.B) {
	needHarness(b)
	defer failedIfFailed(b, "drain_110_pods_other_5000_pods_s", "drain_110_pods_other_5000_pods_invoke_s")
	ctx, cancel := context.WithTimeout(b.Context(), 40*time.Minute)
	defer cancel()
	cleanup := background(b, ctx, *flagOtherPods)
	defer cleanup()
	for i := range *flagRuns {
		drain, got := drain110(b, ctx, ours{}, "d110bg")
		progress("drain_110_pods_other_%d_pods run %d: %.2f s to hook completed, invoke %.2f s", *flagOtherPods, i+1, drain, got.invoke.Seconds())
		record("drain_110_pods_other_5000_pods_s", drain)
		record("drain_110_pods_other_5000_pods_invoke_s", got.invoke.Seconds())
	}
	b.ReportMetric(0, "ns/op")
	report(b, "drain_110_pods_other_5000_pods_s")
	report(b, "drain_110_pods_other_5000_pods_invoke_s")
}

// BenchmarkDrainPDBWait: drain_pdb_wait_s.
func BenchmarkDrainPDBWait(b *testing.B) {
	needHarness(b)
	defer failedIfFailed(b, "drain_pdb_wait_s")
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Minute)
	defer cancel()
	for i := range *flagRuns {
		drain, got := drainPDB(b, ctx, ours{})
		progress("drain_pdb_wait run %d: %.2f s to hook completed, invoke %.2f s", i+1, drain, got.invoke.Seconds())
		record("drain_pdb_wait_s", drain)
	}
	b.ReportMetric(0, "ns/op")
	report(b, "drain_pdb_wait_s")
}

// BenchmarkBootstrapZip: bootstrap_zip_mb, built as `make package` does for
// arm64, in a temporary directory (the repository's dist/ is not touched).
func BenchmarkBootstrapZip(b *testing.B) {
	defer failedIfFailed(b, "bootstrap_zip_mb", "bootstrap_bin_mb")
	ctx, cancel := context.WithTimeout(b.Context(), 20*time.Minute)
	defer cancel()
	root, err := harness.RepoRoot()
	if err != nil {
		b.Fatalf("finding the repository root: %v", err)
	}
	const zipper = `import zipfile,sys; z=zipfile.ZipFile(sys.argv[1],"w",zipfile.ZIP_DEFLATED); i=zipfile.ZipInfo("bootstrap"); i.external_attr=0o755<<16; i.compress_type=zipfile.ZIP_DEFLATED; z.writestr(i,open("bootstrap","rb").read()); z.close()`
	for i := range *flagRuns {
		dir := b.TempDir()
		// up to 3 attempts: another go command sharing the build cache can
		// fail one spuriously ("could not import ... open : no such file")
		var out []byte
		for attempt := range 3 {
			build := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w",
				"-o", filepath.Join(dir, "bootstrap"), "./functions/node-drainer")
			build.Dir = root
			// the product's module alone, as `make build` (GOWORK=off)
			build.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0", "GOWORK=off")
			if out, err = build.CombinedOutput(); err == nil {
				break
			}
			progress("bootstrap_zip: build attempt %d failed: %v\n%s", attempt+1, err, out)
			time.Sleep(2 * time.Second)
		}
		if err != nil {
			b.Fatalf("building the arm64 bootstrap: %v\n%s", err, out)
		}
		zip := exec.CommandContext(ctx, "python3", "-c", zipper, filepath.Join(dir, "node-drainer-arm64.zip"))
		zip.Dir = dir
		if out, err := zip.CombinedOutput(); err != nil {
			b.Fatalf("zipping: %v\n%s", err, out)
		}
		zst, err := os.Stat(filepath.Join(dir, "node-drainer-arm64.zip"))
		if err != nil {
			b.Fatal(err)
		}
		bst, err := os.Stat(filepath.Join(dir, "bootstrap"))
		if err != nil {
			b.Fatal(err)
		}
		zmb, bmb := float64(zst.Size())/(1<<20), float64(bst.Size())/(1<<20)
		progress("bootstrap_zip run %d: zip %.2f MiB, binary %.2f MiB", i+1, zmb, bmb)
		record("bootstrap_zip_mb", zmb)
		record("bootstrap_bin_mb", bmb)
	}
	b.ReportMetric(0, "ns/op")
	report(b, "bootstrap_zip_mb")
	report(b, "bootstrap_bin_mb")
}

// BenchmarkRWOFailover: rwo_failover_s, its invoke round trip (the rest is
// the controllers': detach, attach, the pod) and rwo_failover_fresh_lease_s.
//
// On EC2 the "stopped" (or "terminated") event comes once the instance has
// shut down: its kubelet died when the stop began, tens of seconds earlier.
// rwo_failover_s plays that: the kubelet stops, -stopping later the instance
// is stopped and the event sent, and the time runs from the event.
// rwo_failover_fresh_lease_s is the worst case, the kubelet gone at the
// moment the event is sent: the time then includes safety rule 11's wait for
// its Lease to go stale (NODE_LEASE_STALE_AFTER, 15 s).
func BenchmarkRWOFailover(b *testing.B) {
	needHarness(b)
	defer failedIfFailed(b, "rwo_failover_s", "rwo_failover_invoke_s")
	defer failedIfFailed(b, "rwo_failover_fresh_lease_s")
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Minute)
	defer cancel()
	for i := range *flagRuns {
		for _, c := range []struct {
			metric   string
			stopping time.Duration
		}{{"rwo_failover_s", *flagStopping}, {"rwo_failover_fresh_lease_s", 0}} {
			v, invoke, where, _ := rwoFailover(b, ctx, c.stopping)
			progress("%s run %d: %.2f s from the stopped event (kubelet gone %s before it) to db-0 running on %s with its volume attached (invoke %.2f s)", c.metric, i+1, v, c.stopping, where, invoke)
			record(c.metric, v)
			if c.stopping > 0 {
				record("rwo_failover_invoke_s", invoke)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	report(b, "rwo_failover_s")
	report(b, "rwo_failover_invoke_s")
	report(b, "rwo_failover_fresh_lease_s")
}

// BenchmarkRWOFailoverBaseline: rwo_failover_baseline_s, the scenes run
// concurrently so the whole takes about one cap.
func BenchmarkRWOFailoverBaseline(b *testing.B) {
	needHarness(b)
	defer failedIfFailed(b, "rwo_failover_baseline_s")
	rwoCapped(b, nil, "rwobase", "rwo_failover_baseline_s")
	b.ReportMetric(0, "ns/op")
	report(b, "rwo_failover_baseline_s")
}

// rwoCapped runs -runs RWO scenes concurrently: each instance stopped
// abruptly (EC2 and its kubelet), then, when d is not nil, the EC2
// state-change "stopped" event delivered to d; each scene watched from the
// stop until db-0 runs elsewhere with its volume attached, at most
// -baseline-cap. It records metric per scene, the cap where it was reached.
func rwoCapped(b *testing.B, d drainer, prefix, metric string) {
	capD := *flagBaselineCap
	ctx, cancel := context.WithTimeout(b.Context(), capD+20*time.Minute)
	defer cancel()
	type scn struct {
		s      *scene
		target harness.Instance
		pv     string
		begin  time.Time
	}
	scenes := make([]*scn, *flagRuns)
	for i := range scenes {
		s, target, pv := statefulScene(b, ctx, d, prefix)
		scenes[i] = &scn{s: s, target: target, pv: pv}
	}
	defer func() {
		for _, sc := range scenes {
			sc.s.remove(context.WithoutCancel(ctx))
		}
	}()
	var h handle
	if d != nil {
		var err error
		if h, err = d.start(ctx, len(scenes)); err != nil {
			b.Fatal(err)
		}
		defer h.stop()
	}
	var wg sync.WaitGroup
	errs := make([]error, len(scenes))
	for i, sc := range scenes {
		wg.Go(func() {
			sc.begin = time.Now()
			if errs[i] = stopInstance(ctx, sc.target); errs[i] != nil || h == nil {
				return
			}
			ev, err := harness.StateChangeEvent(sc.target.ID, "stopped")
			if err == nil {
				_, err = h.deliver(ctx, i, ev)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	who := "no node-drainer"
	if d != nil {
		who = "the stopped event sent to " + metric
	}
	progress("%s: %d instances stopped, kubelets stopped, %s; watching up to %s", metric, len(scenes), who, capD)
	values := make([]float64, len(scenes))
	capped := make([]bool, len(scenes))
	for i, sc := range scenes {
		wg.Go(func() {
			at, where, ok := waitMoved(ctx, sc.s.name, "db-0", sc.pv, sc.target.PrivateDNSName, time.Second, time.Until(sc.begin.Add(capD)))
			if ok {
				values[i] = at.Sub(sc.begin).Seconds()
				progress("%s scene %d: %.1f s to db-0 running on %s with its volume attached", metric, i+1, values[i], where)
			} else {
				values[i], capped[i] = capD.Seconds(), true
				state := "gone"
				if p, err := env.Client.CoreV1().Pods(sc.s.name).Get(ctx, "db-0", metav1.GetOptions{}); err == nil {
					state = fmt.Sprintf("on %s, phase %s, terminating %v", p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil)
				}
				progress("%s scene %d: not moved within %s (cap reached); db-0 %s", metric, i+1, capD, state)
			}
		})
	}
	wg.Wait()
	for i, v := range values {
		record(metric, v)
		if capped[i] {
			markCapped(metric, capSeconds())
		}
	}
}

// drain110 runs one scene: a node with 110 pods of 5 Deployments (no PDB),
// the terminate lifecycle action active, the event sent to a fresh runtime.
// It returns event→hook completed, the invoke round trip (s) and the
// process's peak RSS (MiB).
func drain110(b *testing.B, ctx context.Context, d drainer, prefix string) (float64, delivered) {
	b.Helper()
	s, target := scene110(b, ctx, d, prefix)
	defer s.remove(context.WithoutCancel(ctx))
	return terminate(b, ctx, d, s, target)
}

// scene110 builds the 110-pod scene: 5 Deployments of 22 pods on the target
// node, another node free for the replacements.
func scene110(b *testing.B, ctx context.Context, d drainer, prefix string) (*scene, harness.Instance) {
	b.Helper()
	s, err := newScene(ctx, d, sceneName(prefix), 2)
	if err != nil {
		if s != nil {
			s.remove(context.WithoutCancel(ctx))
		}
		b.Fatal(err)
	}
	target := s.insts[0]
	const deployments, perDeployment = 5, 22
	err = s.onlyOn(ctx, target, func() error {
		for i := range deployments {
			if _, err := env.Deployment(ctx, s.workload(fmt.Sprintf("app%d", i), perDeployment), false); err != nil {
				return err
			}
		}
		for i := range deployments {
			if _, err := env.WaitPodsRunning(ctx, s.name, fmt.Sprintf("app=app%d", i), perDeployment, 3*time.Minute); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		if n := podsOn(b, ctx, s.name, target.PrivateDNSName); n != deployments*perDeployment {
			err = fmt.Errorf("scene: %d pods on the target node, want %d", n, deployments*perDeployment)
		}
	}
	if err != nil {
		s.remove(context.WithoutCancel(ctx))
		b.Fatal(err)
	}
	return s, target
}

// harnessComponents are the harness's processes whose CPU a drain is
// weighed against: the control plane and the kwoks playing the kubelets
// (the scale nodes' own kwok only at scale). On this 2-core machine they
// share the cores with the function, the AWS emulator and the bench.
var harnessComponents = []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok", "kwok-scale"}

// cpuReading is each running harness component's CPU time at one moment.
type cpuReading struct {
	at    time.Time
	times map[string]time.Duration
}

// cpuTimes reads the harness components' CPU times now.
func cpuTimes() cpuReading {
	r := cpuReading{at: time.Now(), times: map[string]time.Duration{}}
	for _, c := range harnessComponents {
		if t, err := env.ProcessCPU(c); err == nil {
			r.times[c] = t
		}
	}
	return r
}

// since is what each component spent from the reading until now.
func (r cpuReading) since() cpuSpent {
	now := cpuTimes()
	out := cpuSpent{wall: now.at.Sub(r.at), by: map[string]time.Duration{}}
	for c, t := range now.times {
		if before, ok := r.times[c]; ok {
			out.by[c] = t - before
		}
	}
	return out
}

// cpuSpent is the CPU the harness's components spent over a wall time.
type cpuSpent struct {
	wall time.Duration
	by   map[string]time.Duration
}

func (c cpuSpent) total() time.Duration {
	var sum time.Duration
	for _, t := range c.by {
		sum += t
	}
	return sum
}

// String is "kube-apiserver 0.52 s, etcd 0.10 s, … : 0.90 s of CPU in 0.61 s",
// the components in harnessComponents' order (those that spent nothing left
// out).
func (c cpuSpent) String() string {
	if c.by == nil {
		return "not read"
	}
	var parts []string
	for _, name := range harnessComponents {
		if t := c.by[name]; t > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f s", name, t.Seconds()))
		}
	}
	return fmt.Sprintf("%s: %.2f s of CPU in %.2f s", strings.Join(parts, ", "), c.total().Seconds(), c.wall.Seconds())
}

// recordLoad records what the harness spent during a drain (got, from
// terminate) under name(what): its components' CPU, and the apiserver's
// garbage collector's share; each only when it was read.
func recordLoad(name func(what string) string, got delivered) {
	if len(got.cpu.by) > 0 {
		record(name("harness_cpu_s"), got.cpu.total().Seconds())
	}
	if got.api != nil {
		record(name("apiserver_gc_cpu_s"), got.api[gcCPU])
	}
}

// timeline is an outcome's steps as "<step> +<seconds since the previous>",
// where a drain's time goes beside the floor's.
func timeline(o *handler.Outcome) string {
	if o == nil || len(o.Timeline) == 0 {
		return "none"
	}
	var parts []string
	var prev int64
	for _, s := range o.Timeline {
		parts = append(parts, fmt.Sprintf("%s +%.2f", s.Step, float64(s.AtMS-prev)/1000))
		prev = s.AtMS
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(" (of %.2f s)", float64(o.DurationMS)/1000)
}

// ownSteps is the function's part of a drain, from its timeline: the
// handler's time less its pods-gone steps (the evictions sent, answered and
// the pods seen gone: the apiserver's and the controllers' time, which the
// floor measures). What remains are the function's own round trips (the
// lookup, the lease, the marks, the plan, the watches, the re-read, the
// volumes, the completion), less noisy than the drain against its floor.
func ownSteps(o *handler.Outcome) (float64, bool) {
	if o == nil || len(o.Timeline) == 0 {
		return 0, false
	}
	var gone, prev int64
	for _, s := range o.Timeline {
		if s.Step == string(drain.PhaseGone) {
			gone += s.AtMS - prev
		}
		prev = s.AtMS
	}
	return float64(prev-gone) / 1000, gone > 0
}

// drain110Floor is the 110-pod scene drained by no drainer: the bench
// cordons the node and sends the 110 evictions at once (the harness's admin
// client, 500 QPS); the time from the first eviction sent until every one
// is answered (grace 0: an answered eviction is a deleted pod). What the
// apiserver and the controllers replacing the pods take on this machine,
// the least any drainer could. With group set, the admin client
// impersonates a user of that group: the evictions go through its
// FlowSchema's priority level as the function's do, so the level's seats
// are told apart from the function's own work.
func drain110Floor(b *testing.B, ctx context.Context, group string) float64 {
	answered, _ := floor110(b, ctx, group, false)
	return answered
}

// drain110FloorSeen is drain110Floor (the admin client's), and also the time
// from the first eviction sent until a watch of the node's pods (opened at
// the listing's resourceVersion, before the evictions, re-opened from the
// last one seen if the server ends it) has seen every one
// of the 110 go: what a drainer that must see its pods gone (rule 15) waits
// for at least, the apiserver's watch cache delivering the deletions after
// it answered (-1: the watch ended first).
func drain110FloorSeen(b *testing.B, ctx context.Context) (answeredS, seenGoneS float64) {
	return floor110(b, ctx, "", true)
}

// floor110 is drain110Floor, watched to the pods' deletions when see is set.
func floor110(b *testing.B, ctx context.Context, group string, see bool) (answeredS, seenGoneS float64) {
	b.Helper()
	s, target := scene110(b, ctx, nil, "d110floor")
	defer s.remove(context.WithoutCancel(ctx))
	if err := env.SetUnschedulable(ctx, target.PrivateDNSName, true); err != nil {
		b.Fatal(err)
	}
	pods, err := env.Client.CoreV1().Pods(s.name).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + target.PrivateDNSName})
	if err != nil {
		b.Fatal(err)
	}
	client := env.Client
	if group != "" {
		cfg := rest.CopyConfig(env.Admin)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "bench-floor", Groups: []string{group}}
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			b.Fatal(err)
		}
	}
	seen := make(chan time.Time, 1) // closed empty: the watch ended first
	ended := ""
	if see {
		// client-go's RetryWatcher: a watch the server ends is opened again
		// from the last resourceVersion seen, no deletion missed
		w, err := watchtools.NewRetryWatcherWithContext(ctx, pods.ResourceVersion, &cache.ListWatch{
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = "spec.nodeName=" + target.PrivateDNSName
				return env.Client.CoreV1().Pods(s.name).Watch(ctx, o)
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Stop()
		go watchGone(w, pods.Items, seen, &ended)
	}
	errs := make([]error, len(pods.Items))
	var wg sync.WaitGroup
	start := time.Now()
	for i, p := range pods.Items {
		wg.Go(func() {
			errs[i] = client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
				ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
				DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
			})
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	if n := podsOn(b, ctx, s.name, target.PrivateDNSName); n != 0 {
		b.Fatalf("%d pods still on the node after their evictions were answered", n)
	}
	if !see {
		return took.Seconds(), -1
	}
	// the pods are gone (listed): the watch's view of it, a diagnostic, is
	// waited for a while; a watch that ended first says nothing (-1)
	select {
	case gone, ok := <-seen:
		if ok {
			return took.Seconds(), gone.Sub(start).Seconds()
		}
		progress("floor: the watch ended before it saw the 110 pods go %s", ended)
	case <-time.After(30 * time.Second):
		progress("floor: the watch did not see the %d pods go within 30 s", len(pods.Items))
	}
	return took.Seconds(), -1
}

// watchGone sends on seen when w has delivered the deletion of every one of
// pods, and closes seen; an error event's object goes to *ended.
func watchGone(w watch.Interface, pods []corev1.Pod, seen chan<- time.Time, ended *string) {
	defer close(seen)
	left := map[types.UID]bool{}
	for _, p := range pods {
		left[p.UID] = true
	}
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Deleted && left[p.UID] {
			if delete(left, p.UID); len(left) == 0 {
				seen <- time.Now()
				return
			}
		}
		if ev.Type == watch.Error {
			*ended = fmt.Sprintf("%v", ev.Object)
		}
	}
}

// drain110InProcess is the 110-pod scene drained by the function's own drain
// package inside the bench, with the harness's admin client (exempt from
// priority and fairness, already connected): from the cordon until Drain
// returns (every pod evicted, seen gone on the watch, and the node's pods
// listed again), and the phases' times. Beside the floor and the function,
// it tells the drain's own code from the function's process, its client
// and its other steps.
func drain110InProcess(b *testing.B, ctx context.Context) (float64, string) {
	b.Helper()
	s, target := scene110(b, ctx, nil, "d110lib")
	defer s.remove(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var phases []string
	var first, answered time.Time // the first eviction sent, the last answered
	cfg := rest.CopyConfig(env.Admin)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			sent := time.Now()
			resp, err := rt.RoundTrip(req)
			if strings.HasSuffix(req.URL.Path, "/eviction") {
				mu.Lock()
				if first.IsZero() || sent.Before(first) {
					first = sent
				}
				answered = time.Now()
				mu.Unlock()
			}
			return resp, err
		})
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	last := start
	d := drain.New(client, drain.Options{GracePeriodSeconds: -1, OnPhase: func(p drain.Phase, _ string) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		phases = append(phases, fmt.Sprintf("%s +%.2f", p, now.Sub(last).Seconds()))
		last = now
	}}, nil)
	if err := env.SetUnschedulable(ctx, target.PrivateDNSName, true); err != nil {
		b.Fatal(err)
	}
	res, err := d.Drain(ctx, target.PrivateDNSName)
	took := time.Since(start).Seconds()
	if err != nil || !res.Done() || len(res.Evicted) != 110 {
		b.Fatalf("in-process drain: %d evicted, %d remaining, %v", len(res.Evicted), len(res.Remaining), err)
	}
	mu.Lock()
	defer mu.Unlock()
	return took, strings.Join(phases, ", ") + fmt.Sprintf(" (the evictions: the first sent %.2f s after the start, the last answered %.2f s after the first sent)",
		first.Sub(start).Seconds(), answered.Sub(first).Seconds())
}

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// drainPDB runs one scene: 2 of a 4-replica Deployment's pods on the target,
// 2 on the other node, a PDB allowing 1 unavailable; event→hook completed
// and what the delivery told.
func drainPDB(b *testing.B, ctx context.Context, d drainer) (float64, delivered) {
	b.Helper()
	s, err := newScene(ctx, d, sceneName("pdb"), 2)
	if s != nil {
		defer s.remove(context.WithoutCancel(ctx))
	}
	if err != nil {
		b.Fatal(err)
	}
	target, other := s.insts[0], s.insts[1]
	w := s.workload("web", 2)
	err = s.onlyOn(ctx, target, func() error {
		if _, err := env.Deployment(ctx, w, false); err != nil {
			return err
		}
		_, err := env.WaitPodsRunning(ctx, s.name, "app=web", 2, 2*time.Minute)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	err = s.onlyOn(ctx, other, func() error {
		// a patch, not a read-modify-write that the controller's status
		// updates can make conflict
		_, err := env.Client.AppsV1().Deployments(s.name).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{})
		if err != nil {
			return err
		}
		_, err = env.WaitPodsRunning(ctx, s.name, "app=web", 4, 2*time.Minute)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if n := podsOn(b, ctx, s.name, target.PrivateDNSName); n != 2 {
		b.Fatalf("scene: %d web pods on the target node, want 2", n)
	}
	if _, err := env.PDB(ctx, w, 1, 0); err != nil {
		b.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.PolicyV1().PodDisruptionBudgets(s.name).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 4 && p.Status.DisruptionsAllowed == 1, nil
	})
	if err != nil {
		b.Fatalf("scene: the PDB never allowed 1 disruption of 4 healthy pods: %v", err)
	}
	return terminate(b, ctx, d, s, target)
}

// terminate sends the terminate lifecycle event for target to d (ours: a
// fresh runtime) and checks the hook was completed (CONTINUE, the event's
// token) after a successful drain. It returns event → hook completed (s)
// and what the delivery told.
func terminate(b *testing.B, ctx context.Context, d drainer, s *scene, target harness.Instance) (float64, delivered) {
	b.Helper()
	token := lifecycleToken()
	payload, err := env.StartTerminating(ctx, s.name, target, token)
	if err != nil {
		b.Fatal(err)
	}
	h, err := d.start(ctx, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer h.stop()
	before, err := readAPICounts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	cpu := cpuTimes()
	send := time.Now()
	got, err := h.deliver(ctx, 0, payload)
	if err != nil {
		h.dump(b, 0)
		b.Fatalf("delivering the terminate event: %v", err)
	}
	calls, ok, err := waitCompletions(ctx, []string{target.ID}, []string{token}, d.settle())
	if err != nil {
		b.Fatal(err)
	}
	got.cpu = cpu.since()
	if after, merr := readAPICounts(ctx); merr == nil {
		delta := after.since(before)
		got.api = delta
		// the drainer's own (its FlowSchema), and the whole apiserver's by
		// verb and resource (controllers and kwok answering the drain too)
		progress("api requests during the drain of %s: %s", s.name, delta)
		record(d.metric(apiRequestsMetric[strings.SplitN(s.name, "-", 2)[0]]), delta[d.apiKey()])
	}
	if !ok[0] {
		h.dump(b, 0)
		b.Fatalf("lifecycle action of %s not completed within %s of the event (outcome %+v)", target.ID, d.settle(), got.out)
	}
	c := calls[0]
	if got.out != nil && got.out.Action != handler.ActionDrained || c.Params["LifecycleActionResult"] != "CONTINUE" {
		h.dump(b, 0)
		b.Fatalf("outcome %+v, completed with %s: want %s and CONTINUE", got.out, c.Params["LifecycleActionResult"], handler.ActionDrained)
	}
	return c.Time.Sub(send).Seconds(), got
}

// statefulScene builds a scene whose first node runs a one-replica
// StatefulSet pod with an RWO CSI volume, attached; the other node is free
// to take it over.
func statefulScene(b *testing.B, ctx context.Context, d drainer, prefix string) (*scene, harness.Instance, string) {
	b.Helper()
	s, err := newScene(ctx, d, sceneName(prefix), 2)
	if err != nil {
		if s != nil {
			s.remove(ctx)
		}
		b.Fatal(err)
	}
	target := s.insts[0]
	var pv string
	err = s.onlyOn(ctx, target, func() error {
		var err error
		if pv, err = env.StatefulSet(ctx, s.statefulWorkload("db"), harness.Zone); err != nil {
			return err
		}
		s.pvs = append(s.pvs, pv)
		_, err = env.WaitPodsRunning(ctx, s.name, "app=db", 1, 2*time.Minute)
		return err
	})
	if err == nil {
		var where string
		where, err = env.WaitPodVolumeAttached(ctx, s.name, "db-0", pv, 2*time.Minute)
		if err == nil && where != target.PrivateDNSName {
			err = fmt.Errorf("scene: db-0 on %s, want %s", where, target.PrivateDNSName)
		}
	}
	if err != nil {
		s.remove(ctx)
		b.Fatal(err)
	}
	return s, target, pv
}

// rwoFailover runs one scene: the StatefulSet's node stops abruptly (its
// kubelet, then stopping later EC2's state), the stopped event goes to a
// fresh runtime; it returns event→pod running elsewhere with its volume
// attached, the invoke round trip (s), where, and the function's peak RSS
// (MiB).
func rwoFailover(b *testing.B, ctx context.Context, stopping time.Duration) (failover, invoke float64, where string, rssMiB float64) {
	b.Helper()
	s, target, pv := statefulScene(b, ctx, ours{}, "rwo")
	defer s.remove(context.WithoutCancel(ctx))
	if err := env.StopKubelet(ctx, target.PrivateDNSName); err != nil {
		b.Fatal(err)
	}
	time.Sleep(stopping)
	if err := env.SetInstanceState(ctx, target.ID, "stopped"); err != nil {
		b.Fatal(err)
	}
	f, err := startFunction(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer f.stop()
	payload, err := harness.StateChangeEvent(target.ID, "stopped")
	if err != nil {
		b.Fatal(err)
	}
	begin := time.Now()
	out, err := harness.Invoke(ctx, f.rt, payload)
	rtt := time.Since(begin)
	if err != nil || out.Action != handler.ActionReleased {
		f.dump(b)
		b.Fatalf("stopped event: outcome %+v, %v; want %s", out, err, handler.ActionReleased)
	}
	rss, err := peakRSSMiB(f.rt.PID())
	if err != nil {
		b.Fatal(err)
	}
	progress("rwo failover: the function's timeline: %s; the invoke: %s", timeline(&out), invokeParts(f.rt, begin, rtt))
	at, where, ok := waitMoved(ctx, s.name, "db-0", pv, target.PrivateDNSName, 50*time.Millisecond, 2*time.Minute)
	if !ok {
		dumpPods(b, ctx, s.name, pv)
		f.dump(b)
		b.Fatalf("the StatefulSet pod never ran elsewhere with its volume attached (outcome %+v)", out)
	}
	return at.Sub(begin).Seconds(), rtt.Seconds(), where, rss
}

// invokeParts splits an invoke's round trip (sent at begin, rtt long) by the
// runtime's record of its last invocation: the wait for the process (its
// start and init: a cold start), the handler, and the answer's way back.
func invokeParts(rt *lambdart.Runtime, begin time.Time, rtt time.Duration) string {
	invs := rt.Invocations()
	if len(invs) == 0 {
		return "not recorded"
	}
	i := invs[len(invs)-1]
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", d.Seconds()*1000) }
	return fmt.Sprintf("to the handler %s (init %s), handler %s, back %s",
		ms(i.Start.Sub(begin)), ms(i.Init), ms(i.End.Sub(i.Start)), ms(begin.Add(rtt).Sub(i.End)))
}

// stopInstance is an abrupt stop: EC2 says stopped, the kubelet is gone.
// apiRequestsMetric names the request count of a drain by its scene's prefix.
var apiRequestsMetric = map[string]string{
	"d110":   "api_requests_110_pods",
	"d110oc": "api_requests_110_pods",
	"d110bg": "api_requests_110_pods_other_5000_pods",
	"pdb":    "api_requests_pdb_wait",
}

func stopInstance(ctx context.Context, i harness.Instance) error {
	if err := env.SetInstanceState(ctx, i.ID, "stopped"); err != nil {
		return err
	}
	return env.StopKubelet(ctx, i.PrivateDNSName)
}

func podsOn(b *testing.B, ctx context.Context, ns, nodeName string) int {
	b.Helper()
	l, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

// background puts n Running pods on 10 other kwok nodes (bound directly,
// created with the admin client) and returns what removes them.
func background(b *testing.B, ctx context.Context, n int) func() {
	b.Helper()
	const nodes = 10
	name := sceneName("bg")
	begin := time.Now()
	insts, err := env.CreateASG(ctx, harness.ASGSpec{Name: name, Size: nodes})
	if err != nil {
		b.Fatal(err)
	}
	added := eachInstance(insts, func(_ int, inst harness.Instance) error {
		return env.AddNodeFor(ctx, inst, map[string]string{"pool": name})
	})
	cleanup := func() {
		c := context.WithoutCancel(ctx)
		began := time.Now()
		removeNamespace(c, name, true)
		for _, i := range insts {
			_ = env.Client.CoreV1().Nodes().Delete(c, i.PrivateDNSName, metav1.DeleteOptions{})
		}
		progress("background removed in %s", time.Since(began).Round(100*time.Millisecond))
	}
	if added != nil {
		cleanup()
		b.Fatal(added)
	}
	if err := env.Namespace(ctx, name); err != nil {
		cleanup()
		b.Fatal(err)
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 64 {
		wg.Go(func() {
			for j := range jobs {
				p := backgroundPod(name, j, insts[j%len(insts)].PrivateDNSName)
				if _, err := env.Client.CoreV1().Pods(name).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for j := range n {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		cleanup()
		b.Fatalf("creating background pods: %v", firstErr)
	}
	progress("background: %d pods created on %d nodes in %s; waiting for Running", n, nodes, time.Since(begin).Round(100*time.Millisecond))
	last := 0
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		r, err := countRunning(ctx, name)
		if err != nil {
			return false, nil
		}
		if r/1000 != last/1000 {
			progress("background: %d of %d Running", r, n)
		}
		last = r
		return r == n, nil
	})
	if err != nil {
		cleanup()
		b.Fatalf("background: %d of %d pods Running: %v", last, n, err)
	}
	progress("background: %d pods Running in %s", n, time.Since(begin).Round(100*time.Millisecond))
	return cleanup
}

func backgroundPod(ns string, j int, nodeName string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("bg-%05d", j), Labels: map[string]string{"app": fmt.Sprintf("bg%d", j%10)}},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			TerminationGracePeriodSeconds: &zero,
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
		},
	}
}

// outcomesOn is our function with its outcome events put on a bus of the
// emulator's (OUTCOME_EVENT_BUS), made once.
func outcomesOn(b *testing.B, ctx context.Context) ours {
	b.Helper()
	const bus = "bench-outcomes"
	_, err := eventbridge.NewFromConfig(env.AWS.AWSConfig()).CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(bus)})
	var exists *ebtypes.ResourceAlreadyExistsException
	if err != nil && !errors.As(err, &exists) {
		b.Fatalf("creating the outcome events' bus: %v", err)
	}
	return ours{env: []string{"OUTCOME_EVENT_BUS=" + bus}, suffix: "_outcomes_on"}
}
