package drain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	kubectl "k8s.io/kubectl/pkg/drain"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
)

const nodeName = "ip-10-0-1-23.ec2.internal"

// The drains below run in testing/synctest bubbles (clustertest.Bubble):
// the drain's clock is the real one (Options.Clock unset), which in a
// bubble is the bubble's, so their deadlines, retry caps and PDB waits are
// exact and take no wall time however loaded the machine (in real time, 1
// in 20 runs of TestDrainRemainingErrors on a loaded machine reported a
// refusal as a timeout, and the package took 17 s). Nothing blocks inside a
// reactor of the fake clientset (it holds its lock meanwhile: see
// clustertest.Outside).

// podOpt changes a test pod.
type podOpt func(*corev1.Pod)

func pod(ns, name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)},
		Spec:       corev1.PodSpec{NodeName: nodeName},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ownedBy(kind, name string, controller bool) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{
			APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(kind + name), Controller: &controller,
		})
	}
}

func managed(p *corev1.Pod) { ownedBy("ReplicaSet", "web-abc", true)(p) }

func claim(volume, claimName string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName},
		}})
	}
}

func ephemeral(volume string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{
			Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{}},
		}})
	}
}

func emptyDir(volume string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
}

func mirror(p *corev1.Pod) {
	p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "static"}
}

func TestClaimsOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want []string
	}{
		{"none", nil, []string{}},
		{"no volumes", []*corev1.Pod{pod("a", "p")}, []string{}},
		{"other volume kinds", []*corev1.Pod{pod("a", "p", emptyDir("scratch"), func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}})
		})}, []string{}},
		{"claim", []*corev1.Pod{pod("db", "db-0", claim("data", "data-db-0"))}, []string{"db/data-db-0"}},
		{"ephemeral: <pod>-<volume>", []*corev1.Pod{pod("ci", "runner-x7", ephemeral("work"))}, []string{"ci/runner-x7-work"}},
		{"mixed, sorted, deduplicated, per namespace", []*corev1.Pod{
			pod("b", "p1", claim("data", "shared"), ephemeral("cache"), emptyDir("tmp")),
			pod("b", "p2", claim("data", "shared")),
			pod("a", "p3", claim("data", "shared")),
			pod("a", "p4", claim("one", "c1"), claim("two", "c2")),
		}, []string{"a/c1", "a/c2", "a/shared", "b/p1-cache", "b/shared"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pods []corev1.Pod
			for _, p := range tc.pods {
				pods = append(pods, *p)
			}
			if got := claimsOf(pods); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("claimsOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSkipUnmanaged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		delete bool
	}{
		{"bare pod", pod("a", "bare"), false},
		{"owner that is not its controller", pod("a", "adopted", ownedBy("ReplicaSet", "rs", false)), false},
		{"ReplicaSet pod", pod("a", "web", managed), true},
		{"StatefulSet pod", pod("a", "db-0", ownedBy("StatefulSet", "db", true)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := skipUnmanaged(*tc.pod)
			if st.Delete != tc.delete {
				t.Errorf("Delete = %v, want %v", st.Delete, tc.delete)
			}
			if !tc.delete && (st.Reason != kubectl.PodDeleteStatusTypeWarning || !strings.Contains(st.Message, "EVICT_UNMANAGED_PODS=false")) {
				t.Errorf("a skipped pod must be reported as a warning naming the setting, got %+v", st)
			}
		})
	}
}

func TestHelperIsFullyConfigured(t *testing.T) {
	for _, evictUnmanaged := range []bool{true, false} {
		d := New(fake.NewClientset(), Options{GracePeriodSeconds: -1, EvictUnmanaged: evictUnmanaged}, nil)
		h := d.helper(context.Background(), d.client)
		if h.Out == nil || h.ErrOut == nil || h.Timeout <= 0 || h.EvictErrorRetryDelay <= 0 || h.GracePeriodSeconds != -1 ||
			!h.IgnoreAllDaemonSets || !h.DeleteEmptyDirData || h.DisableEviction {
			t.Errorf("helper has a trap left unset: %+v", h)
		}
		if got := len(h.AdditionalFilters); got != map[bool]int{true: 0, false: 1}[evictUnmanaged] {
			t.Errorf("EvictUnmanaged=%v: %d additional filters", evictUnmanaged, got)
		}
	}
}

// nodePods is one node's pods of every kind the filters tell apart.
func nodePods() []runtime.Object {
	return []runtime.Object{
		pod("apps", "web-1", managed, emptyDir("scratch")),
		pod("apps", "db-0", ownedBy("StatefulSet", "db", true), claim("data", "data-db-0")),
		pod("apps", "bare", claim("data", "bare-data")),
		pod("kube-system", "agent-x", ownedBy("DaemonSet", "agent", true)),
		pod("kube-system", "static-etcd", mirror),
		pod("apps", "done", managed, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "agent"}},
	}
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	slices.Sort(out)
	return out
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		evictUnmanaged bool
		want           []string
		warnings       []string
	}{
		{true, []string{"apps/bare", "apps/db-0", "apps/done", "apps/web-1"}, []string{"DaemonSet", "apps/bare"}},
		{false, []string{"apps/db-0", "apps/done", "apps/web-1"}, []string{"DaemonSet", "EVICT_UNMANAGED_PODS=false", "apps/bare"}},
	} {
		t.Run(map[bool]string{true: "evict unmanaged", false: "keep unmanaged"}[tc.evictUnmanaged], func(t *testing.T) {
			d := New(fake.NewClientset(nodePods()...), Options{GracePeriodSeconds: -1, EvictUnmanaged: tc.evictUnmanaged}, nil)
			pods, warnings, err := d.Plan(context.Background(), nodeName)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(pods); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("would evict %v, want %v", got, tc.want)
			}
			for _, w := range tc.warnings {
				if !strings.Contains(warnings, w) {
					t.Errorf("warnings %q do not mention %q", warnings, w)
				}
			}
		})
	}
}

func TestDrainDryRun(t *testing.T) {
	c := fake.NewClientset(nodePods()...)
	d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: false, DryRun: true}, nil)
	res, err := d.Drain(context.Background(), nodeName)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Evicted) != 0 || res.Done() {
		t.Errorf("dry run evicted %v", res.Evicted)
	}
	var remaining []string
	for _, p := range res.Remaining {
		remaining = append(remaining, p.String())
		if !strings.Contains(p.Reason, "would evict") {
			t.Errorf("%s: reason %q", p, p.Reason)
		}
	}
	if want := []string{"apps/db-0", "apps/done", "apps/web-1"}; !reflect.DeepEqual(remaining, want) && !reflect.DeepEqual(sorted(remaining), want) {
		t.Errorf("would evict %v, want %v", remaining, want)
	}
	if want := []string{"apps/data-db-0"}; !reflect.DeepEqual(res.Claims, want) {
		t.Errorf("claims %v, want %v (the unmanaged pod stays, so does its claim)", res.Claims, want)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "delete" {
			t.Errorf("dry run sent %s %s/%s", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// evictions makes the fake clientset act on evictions: a pod named in
// blocked is refused with 429 as a PDB would; any other is deleted (and
// the watches opened later are told: clustertest.PodWatches).
func evictions(c *fake.Clientset, blocked ...string) *[]string {
	pods := clustertest.WatchPods(c)
	var evicted []string
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if slices.Contains(blocked, ev.Name) {
			err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			return true, nil, err
		}
		evicted = append(evicted, ev.Namespace+"/"+ev.Name)
		return true, nil, pods.Delete(ev.Namespace, ev.Name)
	})
	return &evicted
}

// refusingEvictions makes the fake clientset answer the first n evictions
// (every one: n < 0) with err, as a PDB (429), a conflict on its status
// (409) or an admission policy would; nil accepts them and leaves the pod
// there, still terminating. Each one after is accepted and its pod deleted
// (and the watches opened later told: clustertest.PodWatches). It returns
// the count of evictions asked.
func refusingEvictions(c *fake.Clientset, n int32, err error) *atomic.Int32 {
	pods := clustertest.WatchPods(c)
	var tries atomic.Int32
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		if try := tries.Add(1); n < 0 || try <= n {
			return true, nil, err
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		return true, nil, pods.Delete(ev.Namespace, ev.Name)
	})
	return &tries
}

func TestDrainEvictsAndReportsBlocked(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		c := fake.NewClientset(nodePods()...)
		evicted := evictions(c, "db-0")
		d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true, RetryCap: 50 * time.Millisecond}, nil)
		// db-0 is refused until the end: the drain lasts the whole deadline (500
		// ms was too short on a loaded machine to sync the watches and evict)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		res, err := d.Drain(ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range res.Evicted {
			got = append(got, p.String())
		}
		if want := []string{"apps/bare", "apps/done", "apps/web-1"}; !reflect.DeepEqual(sorted(got), want) {
			t.Errorf("evicted %v, want %v", got, want)
		}
		if len(res.Remaining) != 1 || res.Remaining[0].String() != "apps/db-0" || !strings.Contains(res.Remaining[0].Reason, "PodDisruptionBudget") {
			t.Errorf("remaining %+v: want apps/db-0 blocked by its PodDisruptionBudget", res.Remaining)
		}
		if res.Done() {
			t.Error("Done() with a pod remaining")
		}
		if want := []string{"apps/bare-data", "apps/data-db-0"}; !reflect.DeepEqual(res.Claims, want) {
			t.Errorf("claims %v, want %v", res.Claims, want)
		}
		// the blocked pod was never deleted: a PDB is never violated
		if _, err := c.CoreV1().Pods("apps").Get(context.Background(), "db-0", metav1.GetOptions{}); err != nil {
			t.Errorf("the PDB-protected pod is gone: %v", err)
		}
		for _, a := range c.Actions() {
			if a.GetVerb() == "delete" && a.GetResource().Resource == "pods" {
				t.Errorf("drain deleted a pod instead of evicting it: %v", a)
			}
		}
		// DaemonSet and mirror pods were left alone
		for _, name := range []string{"agent-x", "static-etcd"} {
			if slices.Contains(*evicted, "kube-system/"+name) {
				t.Errorf("%s evicted", name)
			}
		}
	})
}

func TestDrainEmptyNode(t *testing.T) {
	d := New(fake.NewClientset(), Options{GracePeriodSeconds: -1, EvictUnmanaged: true}, nil)
	res, err := d.Drain(context.Background(), nodeName)
	if err != nil || !res.Done() || len(res.Evicted) != 0 {
		t.Errorf("empty node: %+v, %v", res, err)
	}
}

// pdbWatches serves watches of PodDisruptionBudgets from fake watchers, as the
// fake clientset's own never end (they ignore the context). The first watch
// gets first (if not nil); every watcher is closed after closeAfter, as a
// server ends a watch whose request context ended.
func pdbWatches(c *fake.Clientset, closeAfter time.Duration, first func(*watch.FakeWatcher)) {
	var calls atomic.Int32
	c.PrependWatchReactor("poddisruptionbudgets", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFakeWithChanSize(10, false)
		if calls.Add(1) == 1 && first != nil {
			go first(w)
		}
		time.AfterFunc(closeAfter, w.Stop)
		return true, w, nil
	})
}

func heldPod() (*corev1.Pod, *policyv1.PodDisruptionBudget) {
	p := pod("apps", "web-1", managed, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "web"} })
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0},
	}
	return p, pdb
}

// A pod held by its PDB is evicted as soon as the PDB allows a disruption,
// not after the retry cap.
func TestDrainRetriesWhenPDBAllows(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		p, pdb := heldPod()
		c := fake.NewClientset(p, pdb)
		var allow atomic.Bool
		pods := clustertest.WatchPods(c)
		c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "eviction" {
				return false, nil, nil
			}
			if !allow.Load() {
				return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			}
			ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
			return true, nil, pods.Delete(ev.Namespace, ev.Name)
		})
		pdbWatches(c, time.Minute, func(w *watch.FakeWatcher) {
			time.Sleep(100 * time.Millisecond)
			allow.Store(true)
			ok := pdb.DeepCopy()
			ok.Status.DisruptionsAllowed = 1
			w.Modify(ok)
		})
		d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true, RetryCap: 20 * time.Second}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		res, err := d.Drain(ctx, nodeName)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Done() || len(res.Evicted) != 1 || res.Evicted[0].String() != "apps/web-1" {
			t.Fatalf("result %+v: want apps/web-1 evicted", res)
		}
		if took > 5*time.Second {
			t.Errorf("evicted after %s: the PDB's change was not acted upon (retry cap 20s)", took)
		}
	})
}

// A pod that goes while its eviction waits on a PDB allowing none (the
// abrupt path force-deleted it, a person or its controller deleted it) ends
// that wait: the drain is done at once, not at its deadline, though the PDB
// never changes. Both waits: after the eviction's 429, and before trying it
// (a Ready pod whose PDB's status already allows nothing).
func TestDrainPodGoneWhileHeldByPDB(t *testing.T) {
	for _, ready := range []bool{false, true} {
		t.Run(map[bool]string{false: "refused, then gone", true: "held before trying, then gone"}[ready], clustertest.InBubble(func(t *testing.T) {
			p, pdb := heldPod()
			if ready {
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			}
			c := fake.NewClientset(p, pdb)
			evictions(c, "web-1")
			pdbWatches(c, time.Minute, nil)
			time.AfterFunc(200*time.Millisecond, func() {
				_ = c.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "apps", "web-1")
			})
			d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true, RetryCap: 20 * time.Second}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			res, err := d.Drain(ctx, nodeName)
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); !res.Done() || len(res.Evicted) != 1 || took > 5*time.Second {
				t.Fatalf("result %+v after %s: want apps/web-1 gone, the drain done as it went", res, took.Round(time.Millisecond))
			}
		}))
	}
}

// A pod whose PDB never allows a disruption stays, reported as blocked, and
// is never deleted.
func TestDrainPDBNeverAllows(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		p, pdb := heldPod()
		c := fake.NewClientset(p, pdb)
		evictions(c, "web-1")
		pdbWatches(c, 30*time.Millisecond, nil)
		d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true, RetryCap: 50 * time.Millisecond}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
		defer cancel()
		res, err := d.Drain(ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		if res.Done() || len(res.Remaining) != 1 || !strings.Contains(res.Remaining[0].Reason, "blocked by PodDisruptionBudget") {
			t.Fatalf("result %+v: want apps/web-1 remaining, blocked by its PDB", res)
		}
		if _, err := c.CoreV1().Pods("apps").Get(context.Background(), "web-1", metav1.GetOptions{}); err != nil {
			t.Errorf("the PDB-protected pod is gone: %v", err)
		}
		for _, a := range c.Actions() {
			if a.GetVerb() == "delete" {
				t.Errorf("drain deleted: %v", a)
			}
		}
	})
}

// Every eviction names the UID of the pod it means; a refused precondition
// (the name now belongs to a replacement) counts as the pod gone, and the
// replacement is never touched.
func TestEvictionNamesTheUID(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		p, _ := heldPod()
		p.UID = "uid-old"
		c := fake.NewClientset(p)
		var preconditions []types.UID
		c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "eviction" {
				return false, nil, nil
			}
			ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
			if ev.DeleteOptions == nil || ev.DeleteOptions.Preconditions == nil || ev.DeleteOptions.Preconditions.UID == nil {
				t.Errorf("eviction of %s without a UID precondition", ev.Name)
				return true, nil, nil
			}
			preconditions = append(preconditions, *ev.DeleteOptions.Preconditions.UID)
			// the pod was deleted meanwhile (its StatefulSet makes the
			// replacement elsewhere: the fake's lists and watches ignore field
			// selectors, so it is not made here; TestStillThere reads one)
			_ = c.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name)
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "Pod"}, ev.Name,
				errors.New("the UID in the precondition (uid-old) does not match the UID in record (uid-new). The object might have been deleted and then recreated"))
		})
		d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true, RetryCap: 50 * time.Millisecond}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if _, err := d.Drain(ctx, nodeName); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(preconditions, []types.UID{"uid-old"}) {
			t.Errorf("preconditions %v: want one eviction naming uid-old, not retried against the replacement", preconditions)
		}
	})
}

// A 409 from the eviction API while the pod is still there (1.35's handler
// returns the PDB status write's last conflict after 20 tries under
// contention) is no answer: the eviction is asked again, as after a 429,
// until it is accepted; the pod is not counted gone while it runs.
func TestEvictionConflictOnPDBIsRetried(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		p, pdb := heldPod()
		pdb.Status.DisruptionsAllowed = 1
		c := fake.NewClientset(p, pdb)
		tries := refusingEvictions(c, 2, apierrors.NewConflict(schema.GroupResource{Group: "policy", Resource: "poddisruptionbudgets"}, pdb.Name,
			errors.New("the object has been modified; please apply your changes to the latest version and try again")))
		d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true, RetryCap: 100 * time.Millisecond}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := d.Drain(ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		if n := tries.Load(); n != 3 {
			t.Errorf("%d evictions: want the two conflicts retried, then the accepted one", n)
		}
		if !res.Done() || len(res.Evicted) != 1 {
			t.Fatalf("result %+v: want apps/web-1 evicted after the conflicts", res)
		}
		if _, err := c.CoreV1().Pods("apps").Get(context.Background(), "web-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("web-1 still there (%v): its eviction was given up at the first 409", err)
		}
	})
}

// After a 409 the pod is read again: the one meant (its UID) is still there,
// or the name is another pod's now, or nobody's.
func TestStillThere(t *testing.T) {
	p, _ := heldPod()
	repl := p.DeepCopy()
	repl.UID = "uid-replacement"
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want bool
	}{{"the same pod", []runtime.Object{p}, true}, {"a replacement", []runtime.Object{repl}, false}, {"none", nil, false}} {
		d := New(fake.NewClientset(tc.objs...), Options{}, nil)
		if got, err := d.stillThere(context.Background(), *p); err != nil || got != tc.want {
			t.Errorf("%s: stillThere %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// A PDB with an empty selector covers every pod of its namespace (policy/v1):
// its refusals are waited on like any PDB's, and retries are paced, not a
// 50 ms loop.
func TestEmptySelectorPDBIsPaced(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		p, pdb := heldPod()
		pdb.Spec.Selector = &metav1.LabelSelector{}
		c := fake.NewClientset(p, pdb)
		tries := refusingEvictions(c, -1, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0))
		var watches atomic.Int32
		c.PrependWatchReactor("poddisruptionbudgets", func(k8stesting.Action) (bool, watch.Interface, error) {
			watches.Add(1)
			return true, watch.NewFakeWithChanSize(1, false), nil
		})
		d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true, RetryCap: 200 * time.Millisecond}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res, err := d.Drain(ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		if res.Done() || !strings.Contains(res.Remaining[0].Reason, "blocked by PodDisruptionBudget") {
			t.Errorf("result %+v: want the pod blocked by its PDB", res)
		}
		if watches.Load() == 0 {
			t.Error("the empty-selector PDB was not recognised as the pod's: no watch")
		}
		if n := tries.Load(); n > 8 {
			t.Errorf("%d evictions in 1 s: want them paced by the PDB's watch (cap 200 ms)", n)
		}
	})
}

// Each reason a pod remains is an error callers tell apart with errors.Is
// and apimachinery's predicates: a PDB, a timeout, a refusal by admission
// (403, 422), which is asked again until the drain's end (rule 13).
func TestDrainRemainingErrors(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "web-1", errors.New("no eviction for you"))
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "policy", Kind: "Eviction"}, "web-1", nil)
	for _, tc := range []struct {
		name             string
		evict            func() error // the eviction's answer
		pdb, to, refused bool
		forbid           bool
	}{
		{"held by its PDB", func() error {
			return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}, true, false, false, false},
		{"forbidden by a policy", func() error { return forbidden }, false, false, true, true},
		{"invalid by a policy", func() error { return invalid }, false, false, true, false},
		{"evicted, still terminating", func() error { return nil }, false, true, false, false},
		{"apiserver unavailable until the end", func() error {
			return apierrors.NewServiceUnavailable("etcd leader changed")
		}, false, true, false, false},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			p, pdb := heldPod()
			c := fake.NewClientset(p, pdb)
			tries := refusingEvictions(c, -1, tc.evict())
			pdbWatches(c, 20*time.Millisecond, nil)
			d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true, RetryCap: 20 * time.Millisecond}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			res, err := d.Drain(ctx, nodeName)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Remaining) != 1 || res.Remaining[0].Err == nil {
				t.Fatalf("remaining %+v: want apps/web-1 with its error", res.Remaining)
			}
			got := res.Remaining[0]
			if errors.Is(got.Err, ErrBlockedByPDB) != tc.pdb || errors.Is(got.Err, ErrTimeout) != tc.to || errors.Is(got.Err, ErrRefused) != tc.refused || apierrors.IsForbidden(got.Err) != tc.forbid {
				t.Errorf("error %q: blocked by PDB %v, timeout %v, refused %v, forbidden %v; want %v, %v, %v, %v", got.Err,
					errors.Is(got.Err, ErrBlockedByPDB), errors.Is(got.Err, ErrTimeout), errors.Is(got.Err, ErrRefused), apierrors.IsForbidden(got.Err), tc.pdb, tc.to, tc.refused, tc.forbid)
			}
			if tc.refused && tries.Load() < 2 {
				t.Errorf("a refusal by admission was asked %d time(s) in 500 ms: want it asked again until the drain's end", tries.Load())
			}
			if got.Reason != got.Err.Error() {
				t.Errorf("reason %q is not the error's text %q", got.Reason, got.Err)
			}
		}))
	}
}

// A refusal that is lifted (the policy removed, the webhook back) lets the
// pod go within the same drain: the drain does not end on the first no.
func TestDrainRefusalLifted(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		p, pdb := heldPod()
		pdb.Status.DisruptionsAllowed = 1
		c := fake.NewClientset(p, pdb)
		tries := refusingEvictions(c, 2, apierrors.NewInvalid(schema.GroupKind{Group: "policy", Kind: "Eviction"}, p.Name, nil))
		d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := d.Drain(ctx, nodeName)
		if err != nil || !res.Done() || len(res.Evicted) != 1 {
			t.Fatalf("result %+v err %v after %d tries: want the pod evicted once the refusal was lifted", res, err, tries.Load())
		}
	})
}

func TestDrainListForbidden(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("rbac"))
	})
	_, err := New(c, Options{GracePeriodSeconds: -1}, nil).Drain(context.Background(), nodeName)
	if !apierrors.IsForbidden(err) || errors.Is(err, ErrTimeout) {
		t.Errorf("error %v: want the 403 wrapped, not a timeout", err)
	}
}

// The drain watches the node's pods: a pod is gone when its UID is no longer
// there, so a replacement of the same name is not the original.
func TestWaitGone(t *testing.T) {
	opened := func(c *fake.Clientset) <-chan struct{} {
		ch := make(chan struct{}, 10)
		c.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
			ch <- struct{}{}
			return false, nil, nil
		})
		return ch
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	start := func(ctx context.Context, c *fake.Clientset, pods ...*corev1.Pod) *run {
		var ps []corev1.Pod
		for _, p := range pods {
			ps = append(ps, *p)
		}
		r := New(c, Options{}, nil).start(ctx, nodeName, ps, nil)
		for _, p := range ps {
			r.set(p.UID, stateAccepted, nil)
		}
		return r
	}
	t.Run("deleted, and replaced under the same name", clustertest.InBubble(func(t *testing.T) {
		a, b := pod("apps", "db-0"), pod("apps", "web-1")
		c := fake.NewClientset(a, b)
		watching := opened(c)
		go func() {
			<-watching
			_ = c.Tracker().Delete(gvr, "apps", "web-1")
			_ = c.Tracker().Delete(gvr, "apps", "db-0")
			repl := pod("apps", "db-0")
			repl.UID = "replacement"
			_ = c.Tracker().Create(gvr, repl, "apps")
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		r := start(ctx, c, a, b)
		defer r.stop()
		err := r.waitGone(ctx)
		if err != nil || ctx.Err() != nil || !r.gone(*a) || !r.gone(*b) {
			t.Fatalf("gone %v %v, err %v, ctx %v: want both gone before the deadline", r.gone(*a), r.gone(*b), err, ctx.Err())
		}
	}))
	t.Run("still there at the deadline", clustertest.InBubble(func(t *testing.T) {
		a := pod("apps", "db-0")
		c := fake.NewClientset(a)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		r := start(ctx, c, a)
		defer r.stop()
		if err := r.waitGone(ctx); err != nil || r.gone(*a) {
			t.Fatalf("gone %v, err %v: want not gone, no error", r.gone(*a), err)
		}
	}))
	t.Run("a forbidden watch is an error with its cause", clustertest.InBubble(func(t *testing.T) {
		a := pod("apps", "db-0")
		c := fake.NewClientset(a)
		c.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("rbac"))
		})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		begin := time.Now()
		r := start(ctx, c, a)
		defer r.stop()
		err := r.waitGone(ctx)
		if !apierrors.IsForbidden(err) || time.Since(begin) > 5*time.Second {
			t.Fatalf("err %v after %s: want the 403 at once", err, time.Since(begin))
		}
	}))
}

func readyPod(ns, name string, opts ...podOpt) *corev1.Pod {
	p := pod(ns, name, append([]podOpt{managed, func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "web"}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}}, opts...)...)
	return p
}

// apiserverEvictions plays the eviction API over a PDB: while allowed is 0 a
// Ready pod is refused (429); otherwise allowed is decremented and the pod
// goes; pods not in governed go at once. It returns the evictions tried, in
// order, and the refusals.
func apiserverEvictions(c *fake.Clientset, allowed *atomic.Int32, governed ...string) (func() []string, *atomic.Int32) {
	var (
		tried   []string
		refused atomic.Int32
		mu      = make(chan struct{}, 1)
	)
	get := func() []string {
		mu <- struct{}{}
		defer func() { <-mu }()
		return slices.Clone(tried)
	}
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		mu <- struct{}{}
		defer func() { <-mu }()
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		tried = append(tried, ev.Name)
		if slices.Contains(governed, ev.Name) {
			if allowed.Load() <= 0 {
				refused.Add(1)
				return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			}
			allowed.Add(-1)
		}
		go func() { // the pod goes a moment later, as a kubelet ends it
			time.Sleep(20 * time.Millisecond)
			_ = c.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ev.Namespace, ev.Name)
		}()
		return true, nil, nil
	})
	return get, &refused
}

// Ready pods under a PDB that allows no disruption are not evicted (no 429
// storm) until the PDB allows one; one allowance admits one eviction, even
// for two pods waiting on it.
func TestEvictionsPacedByPDB(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		a, b := readyPod("apps", "web-1"), readyPod("apps", "web-2")
		_, pdb := heldPod()
		c := fake.NewClientset(a, b, pdb)
		var allowed atomic.Int32
		tried, refused := apiserverEvictions(c, &allowed, "web-1", "web-2")
		var fw atomic.Pointer[watch.FakeWatcher]
		c.PrependWatchReactor("poddisruptionbudgets", func(k8stesting.Action) (bool, watch.Interface, error) {
			w := watch.NewFakeWithChanSize(10, false)
			fw.CompareAndSwap(nil, w)
			return true, w, nil
		})
		status := func(rv string, n int32) {
			allowed.Store(n)
			p := pdb.DeepCopy()
			p.ResourceVersion, p.Status.DisruptionsAllowed = rv, n
			fw.Load().Modify(p)
		}
		d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true, RetryCap: 50 * time.Millisecond}, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		done := make(chan Result)
		go func() { res, _ := d.Drain(ctx, nodeName); done <- res }()
		time.Sleep(300 * time.Millisecond)
		if len(tried()) != 0 {
			t.Fatalf("evictions %v while the PDB allowed none", tried())
		}
		status("2", 1)
		time.Sleep(300 * time.Millisecond)
		if len(tried()) != 1 {
			t.Fatalf("evictions %v: want one for one allowed disruption", tried())
		}
		status("3", 1)
		res := <-done
		if !res.Done() || len(tried()) != 2 || refused.Load() != 0 {
			t.Errorf("result %+v, evictions %v, %d refused: want both evicted, one eviction each, none refused", res, tried(), refused.Load())
		}
	})
}

// The drain goes in tiers: pods with RWO volumes first, critical pods last,
// each tier once the previous one's pods are gone; a tier blocked by a PDB
// does not hold the next one.
func TestDrainOrder(t *testing.T) {
	rwoClaim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "data-db-0"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}
	rwxClaim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "shared"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}}
	high := int32(2000001000)
	db := pod("apps", "db-0", managed, claim("data", "data-db-0"))
	shared := pod("apps", "reader", managed, claim("data", "shared"))
	web := pod("apps", "web-1", managed)
	dns := pod("kube-system", "coredns", managed, func(p *corev1.Pod) { p.Spec.PriorityClassName = "system-cluster-critical" })
	agent := pod("kube-system", "agent", managed, func(p *corev1.Pod) { p.Spec.Priority = &high })

	t.Run("tiers", clustertest.InBubble(func(t *testing.T) {
		c := fake.NewClientset(rwoClaim, rwxClaim, dns, agent, web, shared, db)
		tried, _ := apiserverEvictions(c, nil)
		d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true}, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		plan := d.Order(ctx, []corev1.Pod{*dns, *agent, *web, *shared, *db})
		if got := plan.String(); got != "rwo-volumes: apps/db-0; other: apps/web-1, apps/reader; critical: kube-system/coredns, kube-system/agent" {
			t.Errorf("plan %q", got)
		}
		res, err := d.Drain(ctx, nodeName)
		if err != nil || !res.Done() {
			t.Fatalf("result %+v, %v", res, err)
		}
		if len(tried()) != 5 || (tried())[0] != "db-0" || !slices.Contains([]string{"coredns", "agent"}, (tried())[3]) || !slices.Contains([]string{"coredns", "agent"}, (tried())[4]) {
			t.Errorf("evicted in the order %v: want db-0 first, the critical pods last", tried())
		}
	}))
	t.Run("a PDB-blocked tier does not hold the next", clustertest.InBubble(func(t *testing.T) {
		blocked := readyPod("apps", "db-0", claim("data", "data-db-0"))
		_, pdb := heldPod()
		c := fake.NewClientset(rwoClaim, blocked, web, pdb)
		var allowed atomic.Int32
		tried, refused := apiserverEvictions(c, &allowed, "db-0")
		d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true}, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		res, err := d.Drain(ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tried(), []string{"web-1"}) || refused.Load() != 0 {
			t.Errorf("evictions %v (%d refused): want web-1 only", tried(), refused.Load())
		}
		if len(res.Remaining) != 1 || !errors.Is(res.Remaining[0].Err, ErrBlockedByPDB) || !strings.Contains(res.Remaining[0].Reason, "apps/web") {
			t.Errorf("remaining %+v: want db-0 blocked, its PDB named", res.Remaining)
		}
	}))
	t.Run("an unreadable claim counts as RWO", clustertest.InBubble(func(t *testing.T) {
		c := fake.NewClientset()
		c.PrependReactor("get", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumeclaims"}, "", errors.New("rbac"))
		})
		plan := New(c, Options{}, nil).Order(t.Context(), []corev1.Pod{*web, *db})
		if len(plan[TierVolumes]) != 1 || plan[TierVolumes][0].Name != "db-0" {
			t.Errorf("plan %s", plan)
		}
	}))
}

// A grace cap (a spot warning's) shortens a pod's own grace period, never
// lengthens it, and never sends 0 (an immediate kill).
func TestGraceCap(t *testing.T) {
	long, short := int64(300), int64(10)
	for _, tc := range []struct {
		name  string
		own   *int64
		opt   int
		limit time.Duration
		want  *int64
	}{
		{"no cap: the pod's own", &long, -1, 0, nil},
		{"capped", &long, -1, 90 * time.Second, ptr(int64(90))},
		{"shorter than the cap: kept", &short, -1, 90 * time.Second, &short},
		{"default 30 s capped", nil, -1, 20 * time.Second, ptr(int64(20))},
		{"configured period capped", nil, 120, 90 * time.Second, ptr(int64(90))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod("apps", "web-1")
			p.Spec.TerminationGracePeriodSeconds = tc.own
			o := New(fake.NewClientset(), Options{GracePeriodSeconds: tc.opt}, nil).deleteOptions(*p, tc.limit)
			if !reflect.DeepEqual(o.GracePeriodSeconds, tc.want) || o.Preconditions == nil || *o.Preconditions.UID != p.UID {
				t.Errorf("options %+v: want grace %v and the UID", o, tc.want)
			}
		})
	}
	d := New(fake.NewClientset(), Options{GraceCap: 90 * time.Second}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if g := d.tierGrace(ctx, 3); g > 20*time.Second || g < 19*time.Second {
		t.Errorf("tier grace %s with 60 s left for 3 tiers: want each a third", g)
	}
	if g := d.tierGrace(t.Context(), 1); g != 90*time.Second {
		t.Errorf("tier grace %s without a deadline: want the cap", g)
	}
}

func ptr[T any](v T) *T { return &v }

// A tier whose pods are still terminating at the deadline holds the next
// tier: those pods are reported not evicted, as timed out, and were never
// sent an eviction.
func TestTierNotStartedByTheDeadline(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		rwoClaim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "data-db-0"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}
		db, web := pod("apps", "db-0", managed, claim("data", "data-db-0")), pod("apps", "web-1", managed)
		c := fake.NewClientset(rwoClaim, db, web)
		var tried []string
		c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "eviction" {
				return false, nil, nil
			}
			tried = append(tried, a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name)
			return true, nil, nil // accepted; the pod terminates slowly (never, here)
		})
		ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
		defer cancel()
		res, err := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true}, nil).Drain(ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tried, []string{"db-0"}) {
			t.Errorf("evictions %v: want db-0 only", tried)
		}
		var webErr error
		for _, p := range res.Remaining {
			if p.Name == "web-1" {
				webErr = p.Err
			}
		}
		if !errors.Is(webErr, ErrTimeout) || !strings.Contains(webErr.Error(), "before its tier started") {
			t.Errorf("web-1: %v, want not evicted, timed out", webErr)
		}
	})
}

// The eviction API's own bookkeeping, played by the fake: an accepted
// eviction decrements the PDB's allowance and lists the pod in
// disruptedPods (one status update), then the pod goes; the disruption
// controller gives the allowance back once a replacement is Ready. Six pods
// under an allowance of 2, evicted in parallel: each pod is evicted once,
// none is refused.
func TestParallelEvictionsTakeEachAllowanceOnce(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		var objs []runtime.Object
		for i := range 6 {
			objs = append(objs, readyPod("apps", fmt.Sprintf("web-%d", i)))
		}
		_, pdb := heldPod()
		pdb.Status.DisruptionsAllowed = 2
		c := fake.NewClientset(append(objs, pdb)...)
		var (
			mu      sync.Mutex
			status  = pdb.DeepCopy()
			rv      = 1
			fw      *watch.RaceFreeFakeWatcher // its sends after Stop are dropped
			tried   []string
			refused int
		)
		status.Status.DisruptedPods = map[string]metav1.Time{}
		// the fake's watches start from now, not from the list's version as the
		// apiserver's do: a pod goes once the node's pods are watched, or its
		// deletion could fall between the drain's list and watch, unseen
		podsWatched := make(chan struct{})
		var controllers sync.WaitGroup // the disruption controller's goroutines below
		var once sync.Once
		c.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
			w, err := c.Tracker().Watch(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, a.GetNamespace())
			once.Do(func() { close(podsWatched) })
			return true, w, err
		})
		c.PrependWatchReactor("poddisruptionbudgets", func(k8stesting.Action) (bool, watch.Interface, error) {
			mu.Lock()
			defer mu.Unlock()
			if fw == nil {
				fw = watch.NewRaceFreeFake()
			}
			return true, fw, nil
		})
		publish := func(change func(*policyv1.PodDisruptionBudget)) { // under mu
			change(status)
			rv++
			status.ResourceVersion = fmt.Sprint(rv)
			// stored too, so that a re-list (the informer's) sees it, as the
			// apiserver's would
			_ = c.Tracker().Update(schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, status.DeepCopy(), "apps")
			if fw != nil {
				fw.Modify(status.DeepCopy())
			}
		}
		c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "eviction" {
				return false, nil, nil
			}
			// no waiting here: the fake holds its lock while a reactor runs
			ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
			mu.Lock()
			defer mu.Unlock()
			tried = append(tried, ev.Name)
			if status.Status.DisruptionsAllowed <= 0 {
				refused++
				return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			}
			publish(func(p *policyv1.PodDisruptionBudget) {
				p.Status.DisruptionsAllowed--
				p.Status.DisruptedPods[ev.Name] = metav1.Now()
			})
			controllers.Go(func() {
				<-podsWatched
				_ = c.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ev.Namespace, ev.Name)
				time.Sleep(50 * time.Millisecond) // the replacement turns Ready elsewhere
				mu.Lock()
				defer mu.Unlock()
				publish(func(p *policyv1.PodDisruptionBudget) {
					delete(p.Status.DisruptedPods, ev.Name)
					p.Status.DisruptionsAllowed++
				})
			})
			return true, nil, nil
		})
		d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true, RetryCap: 50 * time.Millisecond}, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		res, err := d.Drain(ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		controllers.Wait() // the last allowances given back: the bubble ends with no goroutine asleep
		mu.Lock()
		defer mu.Unlock()
		if !res.Done() || len(tried) != 6 || refused != 0 {
			t.Errorf("result %+v; evictions %v, %d refused: want 6 pods evicted once each, none refused", res, tried, refused)
		}
	})
}

// One eviction per PDB is in flight at a time: the eviction API retries a
// conflict on the PDB's status after 500 ms, so evictions sent together
// against one PDB finish one per half second. A pod under another PDB, or
// under none, does not wait.
func TestOneEvictionInFlightPerPDB(t *testing.T) {
	a, b := readyPod("apps", "web-1"), readyPod("apps", "web-2")
	other := readyPod("apps", "api-1", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "api"} })
	free := readyPod("apps", "job-1", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "job"} })
	_, pdb := heldPod()
	pdb.Status.DisruptionsAllowed = 5
	api := pdb.DeepCopy()
	api.Name, api.Spec.Selector = "api", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}}
	c := fake.NewClientset(a, b, other, free, pdb, api)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r := New(c, Options{}, nil).start(ctx, nodeName, []corev1.Pod{*a, *b, *other, *free}, nil)
	defer r.stop()
	if !r.pdbs.Synced() {
		t.Fatal("the PDBs' watch did not sync")
	}
	tk, v, _ := r.take(*a)
	if v != admitted {
		t.Fatalf("web-1: %v, want admitted", v)
	}
	if _, v, _ := r.take(*b); v != queued {
		t.Fatalf("web-2 while web-1's eviction is in flight: %v, want queued", v)
	}
	for _, p := range []*corev1.Pod{other, free} {
		if tk, v, _ := r.take(*p); v != admitted {
			t.Fatalf("%s: %v, want admitted beside web-1", p.Name, v)
		} else {
			r.release(tk, false)
		}
	}
	freed := r.freed.C()
	r.release(tk, false)
	select {
	case <-freed:
	default:
		t.Fatal("release did not wake the pods queued behind it")
	}
	if _, v, _ := r.take(*b); v != admitted {
		t.Fatalf("web-2 once web-1's eviction returned: %v, want admitted", v)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if got := len(r.taken["apps/web"]); got != 2 {
		t.Errorf("%d disruptions taken from apps/web, want 2 (web-1's is kept until a status shows it)", got)
	}
}

// Only a change of a PDB that covers one of the drain's pods wakes the pods
// waiting on the PDBs: the watch sees every PDB of the namespace.
func TestWakesOnCoveringPDBsOnly(t *testing.T) {
	a := readyPod("apps", "web-1")
	_, pdb := heldPod()
	api := pdb.DeepCopy()
	api.Name, api.Spec.Selector = "api", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}}
	c := fake.NewClientset(a, pdb, api)
	var fw atomic.Pointer[watch.FakeWatcher]
	c.PrependWatchReactor("poddisruptionbudgets", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFakeWithChanSize(10, false)
		fw.CompareAndSwap(nil, w)
		return true, w, nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r := New(c, Options{}, nil).start(ctx, nodeName, []corev1.Pod{*a}, nil)
	defer r.stop()
	changed := r.pdbs.Changed()
	// the PDB watch is started by the informer's goroutine: wait for it
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return fw.Load() != nil, nil
	}); err != nil {
		t.Fatal("the PDB watch never started")
	}
	api.ResourceVersion, api.Status.DisruptionsAllowed = "5", 3
	fw.Load().Modify(api.DeepCopy())
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		o, _, _ := r.pdbs.GetByKey("apps/api")
		return o.(*policyv1.PodDisruptionBudget).ResourceVersion == "5", nil
	}); err != nil {
		t.Fatal("the api PDB's update never reached the store")
	}
	select {
	case <-changed:
		t.Fatal("an update of a PDB that covers none of the drain's pods woke its waiters")
	default:
	}
	pdb.ResourceVersion, pdb.Status.DisruptionsAllowed = "6", 1
	fw.Load().Modify(pdb.DeepCopy())
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("an update of the PDB covering web-1 did not wake its waiters")
	}
}

// A pod whose PDB expects pods on other nodes (whose drains may evict
// against it too) waits a random jitter, drawn when the PDB has room,
// within raceSpacing per such pod and per disruption of room, and is sent
// only if the PDB still has room then: on the drain's first eviction
// against the PDB, and on each room once the status listed another node's
// pod as disrupted. A PDB that fills up during a jitter draws a new one
// the next time. A PDB of this node's pods alone, or with room for every pod
// it expects, is taken at once.
func TestSharedPDBJitters(t *testing.T) {
	a := readyPod("apps", "web-1")
	alone := readyPod("apps", "api-1", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "api"} })
	roomy := readyPod("apps", "job-1", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "job"} })
	_, pdb := heldPod()
	pdb.Status.DisruptionsAllowed, pdb.Status.ExpectedPods = 2, 50
	api := pdb.DeepCopy()
	api.Name, api.Spec.Selector, api.Status.ExpectedPods = "api", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}}, 1
	job := pdb.DeepCopy()
	job.Name, job.Spec.Selector, job.Status.ExpectedPods, job.Status.DisruptionsAllowed = "job", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "job"}}, 3, 3
	c := fake.NewClientset(a, alone, roomy, pdb, api, job)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r := New(c, Options{}, nil).start(ctx, nodeName, []corev1.Pod{*a, *alone, *roomy}, nil)
	defer r.stop()
	if !r.pdbs.Synced() {
		t.Fatal("the PDBs' watch did not sync")
	}
	for _, p := range []*corev1.Pod{alone, roomy} { // a PDB of the node's pods alone; one with room for all it expects
		if tk, v, _ := r.take(*p); v != admitted {
			t.Fatalf("%s: %v, want admitted at once", p.Name, v)
		} else {
			r.release(tk, false)
		}
	}
	update := func(rv string, f func(*policyv1.PodDisruptionBudget)) {
		t.Helper()
		updateWebStatus(t, ctx, c, r, rv, f)
	}
	turn := func() {
		r.mu.Lock()
		r.jitter[a.UID] = time.Now().Add(-time.Millisecond)
		r.mu.Unlock()
	}
	// 49 pods elsewhere, room for 2: a window of 24.5 spacings
	before := time.Now()
	if _, v, _ := r.take(*a); v != deferred {
		t.Fatalf("the first eviction against a PDB shared with other nodes: %v, want deferred", v)
	}
	r.mu.Lock()
	at := r.jitter[a.UID]
	r.mu.Unlock()
	if window := min(jitterCap, 49*raceSpacing/2); at.Before(before) || at.After(time.Now().Add(window)) {
		t.Fatalf("jitter at %v, want within %v of %v", at, window, before)
	}
	if _, v, _ := r.take(*a); v != deferred {
		t.Fatalf("before its jitter: %v, want deferred", v)
	}
	turn()
	tk, v, _ := r.take(*a)
	if v != admitted {
		t.Fatalf("at its jitter, the PDB with room: %v, want admitted", v)
	}
	r.release(tk, true)
	if tk, v, _ := r.take(*a); v != admitted {
		t.Fatalf("again, no other drain seen: %v, want admitted at once", v)
	} else {
		r.release(tk, true)
	}
	// another drain's eviction shows in the status: each room is jittered
	update("7", func(p *policyv1.PodDisruptionBudget) {
		p.Status.DisruptedPods = map[string]metav1.Time{"web-9": metav1.Now()}
	})
	if _, v, _ := r.take(*a); v != deferred {
		t.Fatalf("another drain at work on the PDB: %v, want deferred", v)
	}
	// and fills the PDB during the jitter
	update("8", func(p *policyv1.PodDisruptionBudget) { p.Status.DisruptionsAllowed = 0 })
	if _, v, _ := r.take(*a); v != held {
		t.Fatalf("the PDB full: %v, want held", v)
	}
	r.mu.Lock()
	_, kept := r.jitter[a.UID]
	r.mu.Unlock()
	if kept {
		t.Fatal("the jitter of a room another drain took was kept for the next")
	}
	update("9", func(p *policyv1.PodDisruptionBudget) { p.Status.DisruptionsAllowed, p.Status.DisruptedPods = 1, nil })
	if _, v, _ := r.take(*a); v != deferred {
		t.Fatalf("the PDB with room again: %v, want deferred on a new jitter", v)
	}
	turn()
	if _, v, _ := r.take(*a); v != admitted {
		t.Fatalf("at its jitter, the PDB with room: %v, want admitted", v)
	}
}

// fakeTurns is a Turns whose drains before this one have ahead pods
// waiting on every PDB, none done.
type fakeTurns struct {
	mu        sync.Mutex
	ahead     int
	known     bool
	announced []map[string][]string
	change    chan struct{}
	hold      chan struct{} // if set, Announce waits until it is closed
}

func (f *fakeTurns) Announce(_ context.Context, shared map[string][]string) error {
	if f.hold != nil {
		<-f.hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.announced = append(f.announced, shared)
	return nil
}

func (f *fakeTurns) Ahead(_ string, done func(string) bool) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for i := range f.ahead {
		if !done(fmt.Sprintf("web-%d", 100+i)) {
			n++
		}
	}
	return n, f.known
}

func (f *fakeTurns) Changed() <-chan struct{} { return f.change }

// With turns, a pod under a PDB shared with other nodes waits while the
// drains before it have as many pods waiting as the PDB has room for, goes
// without a jitter once they are done (their pods listed as disrupted),
// and falls back to its jitter when they leave the room untaken past
// turnGrace.
func TestSharedPDBTurns(t *testing.T) {
	a := readyPod("apps", "web-1")
	alone := readyPod("apps", "api-1", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "api"} })
	_, pdb := heldPod()
	pdb.Status.DisruptionsAllowed, pdb.Status.ExpectedPods = 1, 50
	api := pdb.DeepCopy()
	api.Name, api.Spec.Selector, api.Status.ExpectedPods = "api", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}}, 1
	c := fake.NewClientset(a, alone, pdb, api)
	var logged syncBuffer
	ctx, cancel := context.WithTimeout(cluster.WithLogger(t.Context(), slog.New(slog.NewTextHandler(&logged, nil))), 10*time.Second)
	defer cancel()
	turns := &fakeTurns{ahead: 1, change: make(chan struct{}), hold: make(chan struct{})}
	r := New(c, Options{Turns: turns}, nil).start(ctx, nodeName, []corev1.Pod{*a, *alone}, nil)
	defer r.stop()
	if !r.pdbs.Synced() {
		t.Fatal("the PDBs' watch did not sync")
	}
	r.announce([]corev1.Pod{*a, *alone})
	// while this drain's announcement is on its way, a pod under the shared
	// PDB waits for it; one under the node's own PDB does not
	if _, v, _ := r.take(*a); v != behind {
		t.Fatalf("the announcement on its way: %v, want behind", v)
	}
	if tk, v, _ := r.take(*alone); v != admitted {
		t.Fatalf("a PDB of the node's pods alone, the announcement on its way: %v, want admitted", v)
	} else {
		r.release(tk, false)
	}
	turns.mu.Lock()
	turns.known = true
	turns.mu.Unlock()
	close(turns.hold)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		turns.mu.Lock()
		defer turns.mu.Unlock()
		return len(turns.announced) == 1, nil
	}); err != nil {
		t.Fatal("nothing announced")
	}
	if want := map[string][]string{"apps/web": {"web-1"}}; !reflect.DeepEqual(turns.announced[0], want) {
		t.Fatalf("announced %v, want %v (the PDB of the node's pods alone is not shared)", turns.announced[0], want)
	}
	r.announce([]corev1.Pod{*a, *alone}) // the same again: not sent
	time.Sleep(50 * time.Millisecond)
	if n := len(turns.announced); n != 1 {
		t.Fatalf("%d announcements of one plan", n)
	}

	if _, v, _ := r.take(*a); v != behind {
		t.Fatalf("one pod of a drain before this one waits on a room of 1: %v, want behind", v)
	}
	update := func(rv string, f func(*policyv1.PodDisruptionBudget)) {
		t.Helper()
		updateWebStatus(t, ctx, c, r, rv, f)
	}
	// the drain before evicts its pod (a status lists it), the room is
	// taken, then freed again once the status no longer lists it
	update("7", func(p *policyv1.PodDisruptionBudget) {
		p.Status.DisruptionsAllowed, p.Status.DisruptedPods = 0, map[string]metav1.Time{"web-100": metav1.Now()}
	})
	if _, v, _ := r.take(*a); v != held {
		t.Fatalf("the PDB full: %v, want held", v)
	}
	update("8", func(p *policyv1.PodDisruptionBudget) { p.Status.DisruptionsAllowed, p.Status.DisruptedPods = 1, nil })
	tk, v, _ := r.take(*a)
	if v != admitted {
		t.Fatalf("the drain before done, another drain's eviction seen: %v, want admitted without a jitter", v)
	}
	r.release(tk, true)

	// two pods of drains before this one, a room of 2 of which this drain
	// took one: behind; then the room left untaken past turnGrace: jittered
	turns.mu.Lock()
	turns.ahead = 3 // web-100 is done
	turns.mu.Unlock()
	update("9", func(p *policyv1.PodDisruptionBudget) { p.Status.DisruptionsAllowed = 2 })
	if _, v, _ := r.take(*a); v != behind {
		t.Fatalf("two pods before this drain's on a room of 2: %v, want behind", v)
	}
	r.mu.Lock()
	r.behind["apps/web"] = time.Now().Add(-turnGrace - time.Millisecond)
	r.mu.Unlock()
	if _, v, _ := r.take(*a); v != deferred {
		t.Fatalf("the room untaken past turnGrace: %v, want deferred on its jitter", v)
	}
	if _, v, _ := r.take(*a); v != deferred {
		t.Fatalf("taken again: %v, want still deferred", v)
	}
	if n := strings.Count(logged.String(), "left the PDB's room untaken"); n != 1 {
		t.Errorf("the fallback to the jitter logged %d times, want once: %s", n, logged.String())
	}
	// without turns known, the jitter alone
	turns.mu.Lock()
	turns.known = false
	turns.mu.Unlock()
	update("10", func(p *policyv1.PodDisruptionBudget) { p.Status.DisruptionsAllowed = 0 })
	update("11", func(p *policyv1.PodDisruptionBudget) { p.Status.DisruptionsAllowed = 1 })
	if _, v, _ := r.take(*a); v != deferred {
		t.Fatalf("turns unknown, another drain seen: %v, want deferred on its jitter", v)
	}
}

// updateWebStatus writes apps/web's status as r's watch last saw it, changed
// by f, at resourceVersion rv, and waits until the watch delivers it.
func updateWebStatus(t *testing.T, ctx context.Context, c *fake.Clientset, r *run, rv string, f func(*policyv1.PodDisruptionBudget)) {
	t.Helper()
	o, _, _ := r.pdbs.GetByKey("apps/web")
	next := o.(*policyv1.PodDisruptionBudget).DeepCopy()
	next.ResourceVersion = rv
	f(next)
	if _, err := c.PolicyV1().PodDisruptionBudgets("apps").UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		o, _, _ := r.pdbs.GetByKey("apps/web")
		return o.(*policyv1.PodDisruptionBudget).ResourceVersion == rv, nil
	}); err != nil {
		t.Fatalf("the PDB's status %s never reached the drain", rv)
	}
}

// syncBuffer is a log sink the drain's goroutines may write to at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Done means read again (rule 15): a pod bound to the node after the plan
// (created with spec.nodeName while the first pod was being evicted) is
// found by the listing that follows, and evicted too. AfterGone is called
// once a round's pods are gone, as that listing is sent: after the round's
// evictions, right before the list.
func TestDrainEvictsLateBoundPods(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		first := pod("apps", "web-1", managed)
		late := pod("apps", "late", managed)
		late.UID = "late-uid"
		c := fake.NewClientset(first)
		var evicted, seq []string
		var mu sync.Mutex
		pods := clustertest.WatchPods(c)
		c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			seq = append(seq, "list")
			mu.Unlock()
			return false, nil, nil
		})
		c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "eviction" {
				return false, nil, nil
			}
			ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
			mu.Lock()
			evicted = append(evicted, ev.Name)
			seq = append(seq, "evict "+ev.Name)
			n := len(evicted)
			mu.Unlock()
			if n == 1 { // bound while the drain was under way
				if err := c.Tracker().Add(late); err != nil {
					return true, nil, err
				}
			}
			return true, nil, pods.Delete(ev.Namespace, ev.Name)
		})
		afterGone := func(context.Context) {
			mu.Lock()
			seq = append(seq, "after-gone")
			mu.Unlock()
		}
		d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true, AfterGone: afterGone}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := d.Drain(ctx, nodeName)
		if err != nil || !res.Done() {
			t.Fatalf("result %+v err %v: want done", res, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(evicted, "late") || len(res.Evicted) != 2 {
			t.Errorf("evictions %v, evicted %v: want the late-bound pod evicted too", evicted, res.Evicted)
		}
		calls := 0
		for i, e := range seq {
			if e != "after-gone" {
				continue
			}
			calls++
			if i == 0 || !strings.HasPrefix(seq[i-1], "evict ") || i+1 == len(seq) || seq[i+1] != "list" {
				t.Errorf("sequence %v: want each after-gone after its round's evictions, right before the listing", seq)
			}
		}
		if calls != 2 {
			t.Errorf("sequence %v: AfterGone called %d times, want once a round (2)", seq, calls)
		}
	})
}

// The PDBs watched are those of the pods' namespaces, one list and one
// watch each: another namespace's PDBs are neither read nor kept, and pods
// of more namespaces than maxPDBNamespaces are served by one watch of all.
func TestPDBsWatchedByNamespace(t *testing.T) {
	pdbIn := func(ns string) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	}
	for _, tc := range []struct {
		name string
		nss  []string
		want []string // namespaces listed and watched
	}{
		{"two namespaces", []string{"apps", "db"}, []string{"apps", "db"}},
		{"one namespace", []string{"apps", "apps"}, []string{"apps"}},
		{"more than the cap: all", func() []string {
			var nss []string
			for i := range maxPDBNamespaces + 1 {
				nss = append(nss, fmt.Sprintf("ns-%02d", i))
			}
			return nss
		}(), []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{pdbIn("elsewhere")}
			var pods []corev1.Pod
			for i, ns := range tc.nss {
				p := readyPod(ns, fmt.Sprintf("web-%d", i))
				objs = append(objs, p)
				if !slices.ContainsFunc(pods, func(q corev1.Pod) bool { return q.Namespace == ns }) {
					objs = append(objs, pdbIn(ns))
				}
				pods = append(pods, *p)
			}
			c := fake.NewClientset(objs...)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			r := New(c, Options{}, nil).start(ctx, nodeName, pods, nil)
			defer r.stop()
			if !r.pdbs.Synced() {
				t.Fatal("the PDBs' watches did not sync")
			}
			// synced is the lists' end; each watch is opened just after it
			var seen map[string][]string
			_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
				seen = map[string][]string{}
				for _, a := range c.Actions() {
					if a.GetResource().Resource == "poddisruptionbudgets" {
						seen[a.GetVerb()] = append(seen[a.GetVerb()], a.GetNamespace())
					}
				}
				return len(seen["watch"]) >= len(tc.want), nil
			})
			for _, verb := range []string{"list", "watch"} {
				got := slices.Sorted(slices.Values(seen[verb]))
				if !slices.Equal(got, tc.want) {
					t.Errorf("%s in namespaces %q, want %q", verb, got, tc.want)
				}
			}
			if _, ok, _ := r.pdbs.GetByKey("elsewhere/web"); ok && tc.want[0] != "" {
				t.Error("a PDB of another namespace is kept")
			}
			for _, ns := range tc.nss {
				if _, ok, _ := r.pdbs.GetByKey(ns + "/web"); !ok {
					t.Errorf("the PDB of %s is not in the view", ns)
				}
			}
		})
	}
}

// A listing of the node's pods again (rule 15) that fails ends the drain
// with its error: a done round is not done once the re-read cannot be made.
func TestDrainReturnsTheReReadsError(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		c := fake.NewClientset(pod("apps", "web-1", managed))
		pods := clustertest.WatchPods(c)
		var evicted atomic.Bool
		c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if evicted.Load() {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("rbac"))
			}
			return false, nil, nil
		})
		c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "eviction" {
				return false, nil, nil
			}
			ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
			evicted.Store(true)
			return true, nil, pods.Delete(ev.Namespace, ev.Name)
		})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		res, err := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true}, nil).Drain(ctx, nodeName)
		if !apierrors.IsForbidden(err) || len(res.Evicted) != 1 {
			t.Errorf("result %+v, error %v: want the pod evicted and the re-read's 403", res, err)
		}
	})
}
