package e2e

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// One harness for the package: every test builds its own scene (its own ASG,
// nodes labelled pool=<scene>, namespace) so tests do not see each other.
var (
	env       *harness.Env
	bootstrap string
)

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, &env, &bootstrap))
}

// scene is one test's slice of the cluster.
type scene struct {
	t     *testing.T
	name  string
	asg   string
	insts []harness.Instance
	ns    string
}

func newScene(t *testing.T, ctx context.Context, name string, nodes int, spec harness.ASGSpec) *scene {
	t.Helper()
	spec.Name = name
	spec.Size = nodes
	spec.Hooks = true
	insts, err := env.CreateASG(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	s := &scene{t: t, name: name, asg: name, insts: insts, ns: name}
	for _, i := range insts {
		if err := env.AddNodeFor(ctx, i, map[string]string{"pool": name}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Namespace(ctx, s.ns); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *scene) workload(name string, replicas int32) harness.Workload {
	return harness.Workload{Namespace: s.ns, Name: name, Replicas: replicas, NodeSelector: map[string]string{"pool": s.name}}
}

// guarded runs one pod of a Deployment "guarded" on target, under a PDB
// that never allows its eviction (minAvailable 1 of 1), and returns the
// workload: delete its PDB to let the drain go on.
func (s *scene) guarded(ctx context.Context, target harness.Instance) harness.Workload {
	s.t.Helper()
	w := s.workload("guarded", 1)
	s.onlyOn(ctx, target, func() {
		if _, err := env.Deployment(ctx, w, false); err != nil {
			s.t.Fatal(err)
		}
		if _, err := env.PDB(ctx, w, -1, 1); err != nil {
			s.t.Fatal(err)
		}
		if _, err := env.WaitPodsRunning(ctx, s.ns, "app=guarded", 1, time.Minute); err != nil {
			s.t.Fatal(err)
		}
	})
	return w
}

// onlyOn runs build with every node but target cordoned, so the pods it
// creates land on target, then uncordons the others.
func (s *scene) onlyOn(ctx context.Context, target harness.Instance, build func()) {
	s.t.Helper()
	for _, i := range s.insts {
		if i.ID != target.ID {
			if err := env.SetUnschedulable(ctx, i.PrivateDNSName, true); err != nil {
				s.t.Fatal(err)
			}
		}
	}
	build()
	for _, i := range s.insts {
		if i.ID != target.ID {
			if err := env.SetUnschedulable(ctx, i.PrivateDNSName, false); err != nil {
				s.t.Fatal(err)
			}
		}
	}
}

func (s *scene) function(ctx context.Context, timeout time.Duration, extra ...string) *lambdart.Runtime {
	s.t.Helper()
	rt, err := env.StartFunction(ctx, harness.FunctionOptions{Bootstrap: bootstrap, Timeout: timeout, Env: extra, Log: testWriter{s.t}})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = rt.Stop() })
	return rt
}

// recordingProxy starts a fault proxy in front of the apiserver that records
// every request (and faults none until a rule is added), stopped when the
// test ends; point the function at it with CLUSTER_ENDPOINT=api.URL.
func recordingProxy(t *testing.T) *fp.Proxy {
	t.Helper()
	serving, err := env.ServingTLS()
	if err != nil {
		t.Fatal(err)
	}
	api, err := fp.Start(fp.Options{Upstream: env.Server, Flavor: fp.Kubernetes, ServeTLS: serving, UpstreamTLS: env.ClientTLS(), Record: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Stop() })
	return api
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// completions returns the scene's recorded CompleteLifecycleAction calls.
func (s *scene) completions(ctx context.Context, instance string) (ok, failed []moto.LifecycleCall) {
	s.t.Helper()
	calls, err := env.AWS.LifecycleCalls(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, c := range calls {
		if c.Operation != "CompleteLifecycleAction" || c.Params["InstanceId"] != instance {
			continue
		}
		if c.OK() {
			ok = append(ok, c)
		} else {
			failed = append(failed, c)
		}
	}
	return ok, failed
}

func (s *scene) nodeEvents(ctx context.Context, nodeName string, reason node.Reason) []corev1.Event {
	s.t.Helper()
	list, err := env.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + nodeName + ",reason=" + string(reason),
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return list.Items
}

// TestTerminateDrainsSafely: a node with a Deployment under a PDB, a
// StatefulSet with an RWO volume, a DaemonSet, an emptyDir pod, a bare pod
// and a mirror pod is drained
// through the real bootstrap; the PDB is never violated, the volume is
// detached before the lifecycle action is completed, exactly once, with the
// event's token; a duplicate event is safe.
func TestTerminateDrainsSafely(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "drain", 3, harness.ASGSpec{})
	target := s.insts[0]
	var pv string
	s.onlyOn(ctx, target, func() {
		pv = s.webAndDB(ctx)
		if _, err := env.Deployment(ctx, s.workload("scratch", 1), true); err != nil {
			t.Fatal(err)
		}
		if _, err := env.DaemonSet(ctx, s.workload("agent", 0)); err != nil {
			t.Fatal(err)
		}
		if _, err := env.BarePod(ctx, s.workload("bare", 1), target.PrivateDNSName); err != nil {
			t.Fatal(err)
		}
		if _, err := env.MirrorPod(ctx, s.workload("static", 1), target.PrivateDNSName); err != nil {
			t.Fatal(err)
		}
		for sel, want := range map[string]int{"app=scratch": 1, "app=bare": 1, "app=static": 1} {
			if _, err := env.WaitPodsRunning(ctx, s.ns, sel, want, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	})
	if _, err := env.WaitPodsRunning(ctx, s.ns, "app=agent", 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitAttached(t, ctx, s.ns, "db-0", pv)

	// during the drain: the PDB's floor, and when the VA went away
	floor := pdbFloor(ctx, s.ns, "app=web")
	var vaGone atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for vaGone.Load() == 0 {
			// one last look once the invocation has returned: the VA may
			// have gone within the last poll's 20 ms (a completion before
			// the detach still finds it there)
			ended := false
			select {
			case <-stop:
				ended = true
			case <-time.After(20 * time.Millisecond):
			}
			if !attachmentPresent(ctx, target.PrivateDNSName, pv) {
				vaGone.Store(time.Now().UnixNano())
			}
			if ended {
				return
			}
		}
	})

	payload, err := env.StartTerminating(ctx, s.asg, target, "token-drain-1")
	if err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute)
	out, err := harness.Invoke(ctx, rt, payload)
	close(stop)
	wg.Wait()
	minReady := floor()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome: %+v", out)
	if out.Action != "drained" || out.LifecycleResult != "CONTINUE" || out.Node != target.PrivateDNSName {
		t.Fatalf("outcome %+v: want drained, CONTINUE, node %s", out, target.PrivateDNSName)
	}
	if minReady < 3 {
		t.Errorf("PDB violated: only %d web pods ready at one point (maxUnavailable 1 of 4)", minReady)
	}
	ok, _ := s.completions(ctx, target.ID)
	if len(ok) != 1 || ok[0].Params["LifecycleActionResult"] != "CONTINUE" || ok[0].Params["LifecycleActionToken"] != "token-drain-1" {
		t.Fatalf("want exactly one CONTINUE with the event's token, got %+v", ok)
	}
	// the poller sees the deletion up to one poll and one list late (tens of
	// ms on a loaded machine); a completion before the detach would come
	// the attacher's 500 ms earlier than the VA going
	const seen = 150 * time.Millisecond
	if vaGone.Load() == 0 || time.Unix(0, vaGone.Load()).After(ok[0].Time.Add(seen)) {
		t.Errorf("VolumeAttachment of %s not gone before the lifecycle action was completed (gone at %v, completed at %v)",
			pv, time.Unix(0, vaGone.Load()), ok[0].Time)
	}
	// what stays and what moved
	pods, err := env.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + target.PrivateDNSName})
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]int{}
	for _, p := range pods.Items {
		left[p.Labels["app"]]++
	}
	// the DaemonSet pod and the mirror pod stay; the bare pod was evicted
	// (EVICT_UNMANAGED_PODS=true), everything else moved
	if len(pods.Items) != 2 || left["agent"] != 1 || left["static"] != 1 {
		t.Errorf("want the DaemonSet pod and the mirror pod left on the drained node, got %v", left)
	}
	if !slices.Contains(out.Evicted, s.ns+"/bare") {
		t.Errorf("the bare pod was not evicted: %v", out.Evicted)
	}
	if _, err := env.WaitPodsRunning(ctx, s.ns, "app=db", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	n, err := env.Client.CoreV1().Nodes().Get(ctx, target.PrivateDNSName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable || !node.HasTaint(n, node.TaintDraining) || n.Labels[node.LabelExcludeLB] != "true" {
		t.Errorf("node not marked: unschedulable=%v taints=%v labels=%v", n.Spec.Unschedulable, n.Spec.Taints, n.Labels)
	}
	for _, reason := range []node.Reason{node.ReasonDrainStarted, node.ReasonDrainCompleted, node.ReasonVolumesReleased, node.ReasonLifecycleComplete} {
		if len(s.nodeEvents(ctx, target.PrivateDNSName, reason)) == 0 {
			t.Errorf("no %s event on the node", reason)
		}
	}

	// the same event again: safe, nothing more completed
	again, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatalf("duplicate event: %v", err)
	}
	ok, _ = s.completions(ctx, target.ID)
	if len(ok) != 1 {
		t.Errorf("duplicate event completed the action again: %+v", ok)
	}
	t.Logf("duplicate outcome: %+v", again)
}

// webAndDB creates the scenes' usual tenants (call it inside onlyOn): a
// 4-replica Deployment web under a PDB with maxUnavailable 1, and a
// StatefulSet db whose pod has an RWO CSI volume; it waits until they run
// and returns db's PV.
func (s *scene) webAndDB(ctx context.Context) string {
	s.t.Helper()
	web := s.workload("web", 4)
	if _, err := env.Deployment(ctx, web, false); err != nil {
		s.t.Fatal(err)
	}
	if _, err := env.PDB(ctx, web, 1, 0); err != nil {
		s.t.Fatal(err)
	}
	pv, err := env.StatefulSet(ctx, s.workload("db", 1), harness.Zone)
	if err != nil {
		s.t.Fatal(err)
	}
	for sel, want := range map[string]int{"app=web": 4, "app=db": 1} {
		if _, err := env.WaitPodsRunning(ctx, s.ns, sel, want, time.Minute); err != nil {
			s.t.Fatal(err)
		}
	}
	return pv
}

// pdbFloor samples, every 20 ms until stopped, how many pods matching
// selector are ready and not terminating; stop returns the fewest seen.
func pdbFloor(ctx context.Context, ns, selector string) (stop func() int) {
	fewest := -1
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err == nil {
				if n := readyPods(pods.Items); fewest < 0 || n < fewest {
					fewest = n
				}
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	return func() int {
		close(done)
		wg.Wait()
		return fewest
	}
}

func readyPods(pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		if harness.PodReady(&pods[i]) {
			n++
		}
	}
	return n
}

func attachmentPresent(ctx context.Context, nodeName, pv string) bool {
	list, err := env.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return true
	}
	for _, va := range list.Items {
		if va.Spec.NodeName == nodeName && va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv {
			return true
		}
	}
	return false
}

// waitAttached waits until the pod's volume is attached on its node as the
// attach/detach controller sees it (its attach operation finished).
func waitAttached(t *testing.T, ctx context.Context, ns, pod, pv string) string {
	t.Helper()
	node, err := env.WaitPodVolumeAttached(ctx, ns, pod, pv, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return node
}
