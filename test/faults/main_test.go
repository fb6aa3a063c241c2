// Package faults is node-drainer's fault-injection suite (`make faults`): each
// scenario drives the real bootstrap on the real harness behind fault
// proxies (apiserver, EC2/autoscaling), or with the world changed between an
// event and the function's action, and checks that a safety rule of
// ARCHITECTURE.md §4 held. It prints one line per scenario,
//
//	fault=<name> drained=<yes|no|n/a> hook=<result>@<seconds> violations=<n> ok=<yes|no>
//
// and last faults_survived=<N>/<M>. violations counts rule breaches seen:
// the hook completed before the drain finished (where the rule does not
// allow it), a PDB floor broken, anything forced on a running instance,
// someone else's mark removed, more than one completion. ok=no also when an
// expected outcome did not happen (the reasons are in the test log).
package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

var (
	env       *harness.Env
	bootstrap string
)

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, &env, &bootstrap))
}

// parallel bounds how many scenarios run at once (2 cores).
const parallel = 4

type scenario struct {
	name string
	run  func(x *X)
}

// TestFaults runs every scenario (at most `parallel` at once) and prints the
// table; it fails when any scenario is not ok.
func TestFaults(t *testing.T) {
	sem := make(chan struct{}, parallel)
	var mu sync.Mutex
	lines := map[string]string{}
	oks := map[string]bool{}
	t.Run("scenario", func(t *testing.T) {
		for _, sc := range scenarios() {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				x := newX(t, sc.name)
				defer func() {
					line, ok := x.finish()
					mu.Lock()
					lines[sc.name], oks[sc.name] = line, ok
					mu.Unlock()
				}()
				sc.run(x)
			})
		}
	})
	names := make([]string, 0, len(lines))
	for n := range lines {
		names = append(names, n)
	}
	sort.SliceStable(names, func(i, j int) bool { return order(names[i]) < order(names[j]) })
	survived := 0
	for _, n := range names {
		fmt.Println(lines[n])
		if oks[n] {
			survived++
		}
	}
	fmt.Printf("faults_survived=%d/%d\n", survived, len(names))
	if survived != len(names) {
		t.Errorf("%d of %d fault scenarios did not hold their rule", len(names)-survived, len(names))
	}
}

func order(name string) int {
	for i, s := range scenarios() {
		if s.name == name {
			return i
		}
	}
	return 1 << 30
}

// X is one scenario's run: its scene (ASG, nodes, namespace), its function
// and proxies, and what was seen.
type X struct {
	t     *testing.T
	ctx   context.Context
	name  string
	asg   string
	ns    string
	insts []harness.Instance
	// target is the instance the scenario acts on.
	target harness.Instance

	began   time.Time // first invocation
	drained string    // yes, no or n/a
	// hookAfterDrain: completing the hook before the drain finished is a
	// violation (rule 8) in this scenario.
	hookAfterDrain bool

	mu         sync.Mutex
	violations []string
	failures   []string
	logs       bytes.Buffer
	obs        *observer
}

func newX(t *testing.T, name string) *X {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	return &X{t: t, ctx: ctx, name: name, asg: name, ns: name, drained: "n/a"}
}

// violate records a rule breach.
func (x *X) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	x.t.Errorf("VIOLATION: %s", msg)
	x.mu.Lock()
	x.violations = append(x.violations, msg)
	x.mu.Unlock()
}

// expect records an expected outcome that did not happen.
func (x *X) expect(ok bool, format string, args ...any) bool {
	if !ok {
		msg := fmt.Sprintf(format, args...)
		x.t.Errorf("NOT HELD: %s", msg)
		x.mu.Lock()
		x.failures = append(x.failures, msg)
		x.mu.Unlock()
	}
	return ok
}

// must fails the scenario's setup (the harness, not the product).
func (x *X) must(err error) {
	x.t.Helper()
	if err != nil {
		x.t.Fatalf("setup: %v", err)
	}
}

// finish renders the scenario's line.
func (x *X) finish() (string, bool) {
	hook := "none@-"
	if x.began.IsZero() {
		x.began = time.Now()
	}
	if x.target.ID != "" {
		if ok, _ := x.completions(); len(ok) > 0 {
			hook = fmt.Sprintf("%s@%.1f", ok[0].Params["LifecycleActionResult"], ok[0].Time.Sub(x.began).Seconds())
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	ok := !x.t.Failed() && len(x.violations) == 0 && len(x.failures) == 0
	line := fmt.Sprintf("fault=%s drained=%s hook=%s violations=%d ok=%s", x.name, x.drained, hook, len(x.violations), map[bool]string{true: "yes", false: "no"}[ok])
	x.t.Log(line)
	return line, ok
}

// ---- the scene ----

type sceneOpts struct {
	nodes      int
	clusterTag string
	// groupTags are more tags of the group (ASG_TAG_KEY's); noHooks: the
	// group gets neither lifecycle hook.
	groupTags map[string]string
	noHooks   bool
	// noNode lists instance indexes that get no node.
	noNode map[int]bool
}

// scene creates the scenario's ASG (lifecycle hooks, heartbeat timeout
// 300 s), a kwok node per instance labelled pool=<name>, and the namespace.
// The first instance is the target.
func (x *X) scene(o sceneOpts) {
	x.t.Helper()
	insts, err := env.CreateASG(x.ctx, harness.ASGSpec{Name: x.asg, Size: o.nodes, Hooks: !o.noHooks, ClusterTag: o.clusterTag, Tags: o.groupTags})
	x.must(err)
	x.insts, x.target = insts, insts[0]
	for i, in := range insts {
		if !o.noNode[i] {
			x.must(env.AddNodeFor(x.ctx, in, map[string]string{"pool": x.name}))
		}
	}
	x.must(env.Namespace(x.ctx, x.ns))
}

func (x *X) workload(name string, replicas int32) harness.Workload {
	return harness.Workload{Namespace: x.ns, Name: name, Replicas: replicas, NodeSelector: map[string]string{"pool": x.name}}
}

// onTarget runs build with every other node cordoned, so what it creates
// lands on the target, then uncordons them.
func (x *X) onTarget(build func()) {
	x.t.Helper()
	set := func(on bool) {
		for _, i := range x.insts {
			if i.PrivateDNSName == x.target.PrivateDNSName {
				continue
			}
			if err := env.SetUnschedulable(x.ctx, i.PrivateDNSName, on); err != nil && !apierrors.IsNotFound(err) {
				x.must(err)
			}
		}
	}
	set(true)
	build()
	set(false)
}

// web places a Deployment of replicas pods on the target, under a PDB with
// maxUnavailable (none when maxUnavailable < 0 and minAvailable < 0).
func (x *X) web(name string, replicas int32, maxUnavailable, minAvailable int) {
	x.t.Helper()
	w := x.workload(name, replicas)
	x.onTarget(func() {
		_, err := env.Deployment(x.ctx, w, false)
		x.must(err)
		if maxUnavailable >= 0 || minAvailable >= 0 {
			_, err = env.PDB(x.ctx, w, maxUnavailable, minAvailable)
			x.must(err)
		}
		_, err = env.WaitPodsRunning(x.ctx, x.ns, "app="+name, int(replicas), time.Minute)
		x.must(err)
	})
}

// daemonSet runs a DaemonSet pod on every node of the scene.
func (x *X) daemonSet(nodes int) {
	_, err := env.DaemonSet(x.ctx, x.workload("agent", 0))
	x.must(err)
	_, err = env.WaitPodsRunning(x.ctx, x.ns, "app=agent", nodes, time.Minute)
	x.must(err)
}

// statefulSet places the one-pod StatefulSet db (RWO CSI volume) on the
// target and waits until its volume is attached; it returns the PV.
func (x *X) statefulSet() string {
	var pv string
	x.onTarget(func() {
		var err error
		pv, err = env.StatefulSet(x.ctx, x.workload("db", 1), harness.Zone)
		x.must(err)
		_, err = env.WaitPodsRunning(x.ctx, x.ns, "app=db", 1, time.Minute)
		x.must(err)
	})
	_, err := env.WaitPodVolumeAttached(x.ctx, x.ns, "db-0", pv, time.Minute)
	x.must(err)
	return pv
}

// killKubelet stops the target's kubelet and waits until the node is NotReady.
func (x *X) killKubelet(name string) {
	x.must(env.StopKubelet(x.ctx, name))
	x.must(env.WaitNodeReady(x.ctx, name, false, 90*time.Second))
}

func (x *X) getNode(name string) *corev1.Node {
	n, err := env.Client.CoreV1().Nodes().Get(x.ctx, name, metav1.GetOptions{})
	x.must(err)
	return n
}

// updateNode changes a node as an operator or another controller would.
func (x *X) updateNode(name string, change func(*corev1.Node)) {
	x.must(env.UpdateNode(x.ctx, name, change))
}

// operatorTaint is a mark someone else placed; node-drainer never removes it.
var operatorTaint = corev1.Taint{Key: "ops.example.com/hold", Value: "investigating", Effect: corev1.TaintEffectNoSchedule}

func addOperatorTaint(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, operatorTaint) }

func (x *X) podsOn(nodeName string) []corev1.Pod {
	list, err := env.Client.CoreV1().Pods(x.ns).List(x.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	x.must(err)
	return list.Items
}

// untouched reports pods of before that are gone or being deleted now.
func (x *X) touched(before []corev1.Pod) []string {
	var out []string
	for _, p := range before {
		now, err := env.Client.CoreV1().Pods(p.Namespace).Get(x.ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, p.Name+" gone")
		case err != nil:
			x.must(err)
		case now.UID != p.UID:
			out = append(out, p.Name+" replaced")
		case now.DeletionTimestamp != nil:
			out = append(out, p.Name+" deleting")
		}
	}
	return out
}

// ---- function, proxies, events ----

// function starts the real bootstrap under its own runtime; its logs go to
// the test log and to x.logs.
func (x *X) function(timeout time.Duration, extra ...string) *lambdart.Runtime {
	x.t.Helper()
	rt, err := env.StartFunction(x.ctx, harness.FunctionOptions{Bootstrap: bootstrap, Timeout: timeout, Env: extra, Log: logWriter{x}})
	x.must(err)
	x.t.Cleanup(func() { _ = rt.Stop() })
	return rt
}

type logWriter struct{ x *X }

func (w logWriter) Write(p []byte) (int, error) {
	w.x.mu.Lock()
	w.x.logs.Write(p)
	w.x.mu.Unlock()
	w.x.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (x *X) logged(s string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return bytes.Contains(x.logs.Bytes(), []byte(s))
}

// apiProxy starts a recording fault proxy in front of the apiserver; pass
// its env entry to function.
func (x *X) apiProxy(o fp.Options) (*fp.Proxy, string) {
	serving, err := env.ServingTLS()
	x.must(err)
	o.Upstream, o.Flavor, o.ServeTLS, o.UpstreamTLS, o.Record = env.Server, fp.Kubernetes, serving, env.ClientTLS(), true
	p, err := fp.Start(o)
	x.must(err)
	x.t.Cleanup(func() { _ = p.Stop() })
	return p, "CLUSTER_ENDPOINT=" + p.URL
}

// awsProxy starts a recording fault proxy in front of EC2 and autoscaling.
func (x *X) awsProxy(o fp.Options) (*fp.Proxy, []string) {
	o.Upstream, o.Flavor, o.Record = env.AWS.URL(), fp.AWSQuery, true
	p, err := fp.Start(o)
	x.must(err)
	x.t.Cleanup(func() { _ = p.Stop() })
	return p, []string{"AWS_ENDPOINT_URL_EC2=" + p.URL, "AWS_ENDPOINT_URL_AUTO_SCALING=" + p.URL}
}

// invoke invokes synchronously; the first invocation starts the clock.
func (x *X) invoke(rt *lambdart.Runtime, payload []byte) (handler.Outcome, error) {
	if x.began.IsZero() {
		x.began = time.Now()
	}
	out, err := harness.Invoke(x.ctx, rt, payload)
	x.t.Logf("outcome: %+v err=%v", out, err)
	return out, err
}

// terminating registers the target's terminate lifecycle action and
// returns its event.
func (x *X) terminating(token string) []byte {
	b, err := env.StartTerminating(x.ctx, x.asg, x.target, token)
	x.must(err)
	return b
}

// event is a sample event from events/ with detail fields set to any JSON
// value and the envelope's fields in top (e.g. "time").
func (x *X) event(file string, detail map[string]any, top map[string]any) []byte {
	b, err := harness.EventFile(file, nil)
	x.must(err)
	var ev map[string]any
	x.must(json.Unmarshal(b, &ev))
	d := ev["detail"].(map[string]any)
	for k, v := range detail {
		d[k] = v
	}
	for k, v := range top {
		ev[k] = v
	}
	b, err = json.Marshal(ev)
	x.must(err)
	return b
}

func (x *X) stateEvent(id, state string, at time.Time) []byte {
	return x.event("state-change-stopped.json", map[string]any{"instance-id": id, "state": state},
		map[string]any{"time": at.UTC().Format(time.RFC3339)})
}

// healthEvent is an AWS Health scheduled change for the instances.
func (x *X) healthEvent(status string, start time.Time, ids ...string) []byte {
	var ents []map[string]any
	for _, id := range ids {
		ents = append(ents, map[string]any{"entityValue": id, "tags": map[string]string{}})
	}
	when := start.UTC().Format(time.RFC1123)
	return x.event("scheduled-change.json", map[string]any{
		"statusCode": status, "startTime": when, "endTime": start.Add(2 * time.Hour).UTC().Format(time.RFC1123),
		"affectedEntities": ents,
	}, map[string]any{"resources": ids})
}

// ---- lifecycle calls ----

func (x *X) lifecycleCalls(op string) []moto.LifecycleCall {
	calls, err := env.AWS.LifecycleCalls(x.ctx)
	x.must(err)
	var out []moto.LifecycleCall
	for _, c := range calls {
		if c.Operation == op && c.Params["InstanceId"] == x.target.ID {
			out = append(out, c)
		}
	}
	return out
}

// completions returns the target's CompleteLifecycleAction calls.
func (x *X) completions() (ok []moto.LifecycleCall, all []moto.LifecycleCall) {
	all = x.lifecycleCalls("CompleteLifecycleAction")
	for _, c := range all {
		if c.OK() {
			ok = append(ok, c)
		}
	}
	return ok, all
}

// waitHook waits up to limit from the first invocation for a completion, then
// for the function to go idle.
func (x *X) waitHook(limit time.Duration, rts ...*lambdart.Runtime) *moto.LifecycleCall {
	var got *moto.LifecycleCall
	_ = wait.PollUntilContextTimeout(x.ctx, 200*time.Millisecond, time.Until(x.began.Add(limit)), true, func(context.Context) (bool, error) {
		if ok, _ := x.completions(); len(ok) > 0 {
			got = &ok[0]
			return true, nil
		}
		return false, nil
	})
	for _, rt := range rts {
		ctx, cancel := context.WithTimeout(x.ctx, 2*time.Minute)
		_ = rt.WaitIdle(ctx)
		cancel()
	}
	return got
}

// drainThenComplete invokes payload and checks the graceful outcome: the
// hook completed once with CONTINUE (after the drain where the scene says
// so), the PDB floors held and the node drained; it returns the completion.
func (x *X) drainThenComplete(rt *lambdart.Runtime, payload []byte, limit time.Duration) *moto.LifecycleCall {
	_, err := x.invoke(rt, payload)
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(limit, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	x.checkFloors()
	switch {
	case x.drained == "yes":
	case got == nil:
		x.expect(false, "node not drained, and no completion within %s", limit)
	default:
		x.expect(false, "node not drained: the hook was completed with pods of the drain still on it")
	}
	return got
}

// checkHook applies the completion rules: exactly one call, with want as
// result; before the drain finished only where the scenario allows it.
func (x *X) checkHook(want string, got *moto.LifecycleCall) {
	ok, all := x.completions()
	if len(all) > 1 {
		x.violate("%d CompleteLifecycleAction calls for one lifecycle action", len(all))
	}
	if !x.expect(got != nil && len(ok) > 0, "lifecycle action not completed") {
		return
	}
	x.expect(got.Params["LifecycleActionResult"] == want, "completed with %s, want %s", got.Params["LifecycleActionResult"], want)
	if x.hookAfterDrain && x.obs != nil {
		d := x.obs.drainedTime()
		if d.IsZero() || got.Time.Before(d) {
			x.violate("hook completed at %.1fs, before the drain finished (drained at %s)", got.Time.Sub(x.began).Seconds(), fmtSince(d, x.began))
		}
	}
}

func fmtSince(t, from time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return fmt.Sprintf("%.1fs", t.Sub(from).Seconds())
}

// ---- the observer: PDB floors and when the target was drained ----

type floor struct {
	selector labels.Selector
	min      int // the PDB's floor
	fewest   int
	at       time.Time
}

type observer struct {
	mu        sync.Mutex
	node      string
	floors    map[string]*floor
	drainedAt time.Time
	had       bool
	stop      chan struct{}
}

// observe watches the namespace's pods from now: the fewest ready pods of
// each selector (its PDB floor is min) and when the target node first had
// none left but DaemonSet and mirror pods.
func (x *X) observe(floors map[string]int) *observer {
	o := &observer{node: x.target.PrivateDNSName, floors: map[string]*floor{}, stop: make(chan struct{})}
	for s, m := range floors {
		sel, err := labels.Parse(s)
		x.must(err)
		o.floors[s] = &floor{selector: sel, min: m, fewest: -1}
	}
	f := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(x.ns))
	inf := f.Core().V1().Pods().Informer()
	update := func() {
		pods := inf.GetStore().List()
		o.mu.Lock()
		defer o.mu.Unlock()
		left := 0
		ready := map[string]int{}
		for _, obj := range pods {
			p := obj.(*corev1.Pod)
			if p.Spec.NodeName == o.node && !harness.StaysOnNode(p) {
				left++
			}
			for s, fl := range o.floors {
				if fl.selector.Matches(labels.Set(p.Labels)) && harness.PodReady(p) {
					ready[s]++
				}
			}
		}
		if left > 0 {
			o.had = true
		} else if o.had && o.drainedAt.IsZero() {
			o.drainedAt = time.Now()
		}
		for s, fl := range o.floors {
			if fl.fewest < 0 || ready[s] < fl.fewest {
				fl.fewest, fl.at = ready[s], time.Now()
			}
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(any, any) { update() },
		DeleteFunc: func(any) { update() },
	})
	f.Start(o.stop)
	f.WaitForCacheSync(o.stop)
	update()
	x.obs = o
	x.t.Cleanup(func() { o.close() })
	return o
}

func (o *observer) close() {
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
}

func (o *observer) drainedTime() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.drainedAt
}

// checkFloors records a violation for every PDB floor broken so far.
func (x *X) checkFloors() {
	o := x.obs
	o.mu.Lock()
	defer o.mu.Unlock()
	for s, fl := range o.floors {
		if fl.fewest >= 0 && fl.fewest < fl.min {
			x.violate("PDB floor broken: %d pods %q ready at %s (floor %d)", fl.fewest, s, fmtSince(fl.at, x.began), fl.min)
		}
	}
}

// setDrained sets drained=yes/no from the observer.
func (x *X) setDrained() {
	x.drained = map[bool]string{true: "yes", false: "no"}[!x.obs.drainedTime().IsZero()]
}

// ---- marks ----

// ourMarks lists node-drainer's marks on the node.
func ourMarks(n *corev1.Node) []string {
	var m []string
	if node.HasTaint(n, node.TaintOutOfService) {
		m = append(m, "out-of-service taint")
	}
	if node.HasTaint(n, node.TaintDraining) {
		m = append(m, "draining taint")
	}
	if _, ok := n.Labels[node.LabelExcludeLB]; ok {
		m = append(m, "exclude-from-LB label")
	}
	return m
}

func hasTaint(n *corev1.Node, key string) bool { return node.HasTaint(n, key) }

// evictions returns the eviction requests the proxy forwarded (not faulted),
// by pod name.
func evictions(p *fp.Proxy) map[string][]fp.Request {
	out := map[string][]fp.Request{}
	for _, r := range p.Requests() {
		if r.Method == "POST" && strings.HasSuffix(r.Path, "/eviction") && (r.Fault == "" || r.Fault == fp.Pass) {
			parts := strings.Split(r.Path, "/")
			out[parts[len(parts)-2]] = append(out[parts[len(parts)-2]], r)
		}
	}
	return out
}
