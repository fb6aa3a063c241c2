package handler

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/volume"
)

// Before each irreversible step the abrupt path reads its evidence again;
// any of these, seen at that moment, stops it with nothing forced.
func TestGuardReadsAgain(t *testing.T) {
	fresh := func(e *env) {
		renewed := metav1.NewMicroTime(e.now.Add(-2 * time.Second))
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName(idA), Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{RenewTime: &renewed}}
		if _, err := e.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		ec2    []reading
		at     time.Time // the event's time; zero: now
		setup  func(*env)
		forced bool
	}{
		{name: "EC2 says stopped twice, node Ready, Lease stale: forced", ec2: []reading{stopped},
			setup: func(e *env) {
				old := metav1.NewMicroTime(e.now.Add(-time.Minute))
				l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName(idA), Namespace: corev1.NamespaceNodeLease},
					Spec: coordinationv1.LeaseSpec{RenewTime: &old}}
				_, _ = e.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(t.Context(), l, metav1.CreateOptions{})
			},
			forced: true},
		// the instance was started again between the event's reading and the step
		{name: "running again at the re-read", ec2: []reading{stopped, running}},
		{name: "EC2 unreadable at the re-read", ec2: []reading{stopped, throttled}},
		{name: "node Ready and its kubelet renewing", ec2: []reading{stopped}, setup: fresh},
		{name: "node registered again under the name", ec2: []reading{stopped},
			setup: func(e *env) {
				gets := 0
				e.kube.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					gets++
					if gets == 1 {
						return false, nil, nil // the lookup sees the old node
					}
					n := newNode(idA)
					n.UID = ktypes.UID("uid-new-machine")
					return true, n, nil
				})
			}},
		{name: "providerID names another instance", ec2: []reading{stopped},
			setup: func(e *env) {
				gets := 0
				e.kube.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					gets++
					if gets == 1 {
						return false, nil, nil
					}
					n := newNode(idA)
					n.Spec.ProviderID = "aws:///us-east-1a/" + idB
					return true, n, nil
				})
			}},
		{name: "event older than the node", ec2: []reading{stopped}, at: time.Now().Add(-time.Hour),
			setup: func(e *env) {
				n, _ := e.kube.CoreV1().Nodes().Get(t.Context(), nodeName(idA), metav1.GetOptions{})
				n.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Minute))
				_, _ = e.kube.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(append(aNode(), attachment("csi-db", idA, "pv-db"))...)
			e.cfg.StoppingWaitTimeout = 100 * time.Millisecond
			e.ec2.readings[idA] = tc.ec2
			if tc.setup != nil {
				tc.setup(e)
			}
			at := tc.at
			if at.IsZero() {
				at = time.Now()
			}
			out, err := e.handle(t, stateEvent(idA, "stopped", at), 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var forced []string
			for _, w := range e.writes() {
				switch w {
				case "delete pods/", "delete volumeattachments/":
					forced = append(forced, w)
				}
			}
			tainted := false
			if n, err := e.kube.CoreV1().Nodes().Get(t.Context(), nodeName(idA), metav1.GetOptions{}); err == nil {
				for _, tn := range n.Spec.Taints {
					tainted = tainted || tn.Key == "node.kubernetes.io/out-of-service"
				}
			}
			if tc.forced {
				if out.Action != ActionReleased || len(forced) == 0 || !tainted {
					t.Errorf("outcome %+v, forced %v, tainted %v: want the node released", out, forced, tainted)
				}
				return
			}
			if out.Action != ActionNotForced || len(forced) != 0 || tainted {
				t.Errorf("outcome %+v, forced %v, tainted %v: want nothing forced", out, forced, tainted)
			}
		})
	}
}

// The abrupt path waits for a live-looking kubelet on a watch of its Lease:
// it goes on when the Lease turns stale (no renewal), not before, and a
// Lease it cannot watch is an error with its cause, never a silent wait.
func TestWaitStale(t *testing.T) {
	const name = "ip-10-0-1-23.ec2.internal"
	lease := func(renewed time.Time) *coordinationv1.Lease {
		rt := metav1.NewMicroTime(renewed)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{RenewTime: &rt}}
	}
	newRun := func(c *fake.Clientset) *abruptRelease {
		h := New(config.Config{NodeLeaseStaleAfter: 300 * time.Millisecond}, Clients{Kube: c}, nil, WithClock(clock.RealClock{}))
		return &abruptRelease{&invocation{h: h}}
	}
	// in a bubble: judged on the bubble's clock, a loaded machine's pauses
	// between renewals do not count
	t.Run("renewed, then the kubelet dies", clustertest.InBubble(func(t *testing.T) {
		const staleAfter = 300 * time.Millisecond
		first := time.Now()
		c := fake.NewClientset(lease(first))
		var mu sync.Mutex
		renewals := []time.Time{first} // the RenewTimes written
		stop := first.Add(400 * time.Millisecond)
		go func() { // the kubelet renews every 50 ms for 400 ms
			for time.Now().Before(stop) {
				time.Sleep(50 * time.Millisecond)
				at := time.Now()
				if _, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(context.Background(), lease(at), metav1.UpdateOptions{}); err == nil {
					mu.Lock()
					renewals = append(renewals, at)
					mu.Unlock()
				}
			}
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		r := newRun(c)
		if err := r.waitStale(ctx, node.WatchKubeletLease(ctx, c, name), first.Add(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		went := time.Now()
		mu.Lock()
		defer mu.Unlock()
		// judged against the renewals as they happened (on a loaded machine
		// a pause between two of them can itself make the Lease stale): it
		// went on only once the Lease was stale, and soon after the last
		last := first
		for _, at := range renewals {
			if !at.After(went) {
				last = at
			}
		}
		if went.Before(last.Add(staleAfter)) {
			t.Errorf("went on %s after a renewal: want the Lease %s stale", went.Sub(last), staleAfter)
		}
		if final := renewals[len(renewals)-1]; went.After(final.Add(staleAfter + 1500*time.Millisecond)) {
			t.Errorf("went on %s after the last renewal: want soon after it is %s old", went.Sub(final), staleAfter)
		}
	}))
	t.Run("no Lease: stale at once", func(t *testing.T) {
		c := fake.NewClientset()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		begin := time.Now()
		if err := newRun(c).waitStale(ctx, node.WatchKubeletLease(ctx, c, name), begin.Add(3*time.Second)); err != nil || time.Since(begin) > time.Second {
			t.Errorf("err %v after %s", err, time.Since(begin))
		}
	})
	t.Run("watch forbidden: an error", func(t *testing.T) {
		c := fake.NewClientset(lease(time.Now()))
		c.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
			return true, nil, forbidden("leases")
		})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		err := newRun(c).waitStale(ctx, node.WatchKubeletLease(ctx, c, name), time.Now().Add(3*time.Second))
		if !apierrors.IsForbidden(err) {
			t.Errorf("err %v: want the 403", err)
		}
	})
}

// readsAtOnce is the clientset whose Node and kubelet Lease reads each wait
// (a few seconds at most) for the other to be under way: read one after the
// other, the first fails. The fake clientset runs its reactors one at a
// time, so the wait is held before them.
type readsAtOnce struct {
	*fake.Clientset
	nodeAsked, leaseAsked chan struct{}
}

func (c readsAtOnce) CoreV1() typedcorev1.CoreV1Interface {
	return nodesAtOnce{c.Clientset.CoreV1(), c}
}
func (c readsAtOnce) CoordinationV1() typedcoordinationv1.CoordinationV1Interface {
	return leasesHolder{c.Clientset.CoordinationV1(), c}
}

// meet says the read is under way and waits for the other one.
func meet(mine, other chan struct{}) error {
	close(mine)
	select {
	case <-other:
		return nil
	case <-time.After(3 * time.Second):
		return apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("read alone: the other read did not start beside it"))
	}
}

type nodesAtOnce struct {
	typedcorev1.CoreV1Interface
	c readsAtOnce
}

func (n nodesAtOnce) Nodes() typedcorev1.NodeInterface {
	return nodeGet{n.CoreV1Interface.Nodes(), n.c}
}

type nodeGet struct {
	typedcorev1.NodeInterface
	c readsAtOnce
}

func (n nodeGet) Get(ctx context.Context, name string, o metav1.GetOptions) (*corev1.Node, error) {
	if err := meet(n.c.nodeAsked, n.c.leaseAsked); err != nil {
		return nil, err
	}
	return n.NodeInterface.Get(ctx, name, o)
}

type leasesHolder struct {
	typedcoordinationv1.CoordinationV1Interface
	c readsAtOnce
}

func (l leasesHolder) Leases(ns string) typedcoordinationv1.LeaseInterface {
	return leaseGet{l.CoordinationV1Interface.Leases(ns), l.c}
}

type leaseGet struct {
	typedcoordinationv1.LeaseInterface
	c readsAtOnce
}

func (l leaseGet) Get(ctx context.Context, name string, o metav1.GetOptions) (*coordinationv1.Lease, error) {
	if err := meet(l.c.leaseAsked, l.c.nodeAsked); err != nil {
		return nil, err
	}
	return l.LeaseInterface.Get(ctx, name, o)
}

// The guard reads the Node and the kubelet's Lease at once (and EC2 beside
// them), not the Lease after the Node; a check that passes keeps the Node it
// read, which the write after it starts from.
func TestGuardReadsAtOnce(t *testing.T) {
	n := newNode(idA)
	n.ResourceVersion = "41"
	old := metav1.NewMicroTime(time.Now().Add(-time.Minute))
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{RenewTime: &old}}
	c := readsAtOnce{fake.NewClientset(n, l), make(chan struct{}), make(chan struct{})}
	ec2 := &fakeEC2{readings: map[string][]reading{idA: {stopped}}}
	h := New(config.Config{NodeLeaseStaleAfter: 15 * time.Second}, Clients{Kube: c, EC2: ec2}, nil, WithClock(clock.RealClock{}))
	g := (&abruptRelease{&invocation{h: h}}).guard(n, idA)
	if got := g.node(); got != n {
		t.Errorf("before any check the guard's node is %v, want the node found", got)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := g.check(ctx); err != nil {
		t.Fatalf("check: %v; want the stopped instance's stale node to pass, its Node and Lease read at once", err)
	}
	if got := g.node(); got == n || got.UID != n.UID || got.ResourceVersion != "41" {
		t.Errorf("after the check the guard's node is %p %v, want the Node it read", got, got)
	}
}

// The guard's verdict holds as of its return: when the Node's read took
// longer than volume.GuardFresh (retried through the apiserver's faults),
// EC2 is read again after it, and an instance started meanwhile (pending)
// stops the step.
func TestGuardReadsEC2AgainAfterSlowReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newNode(idA)
		// the Node's read takes GuardFresh (retried for a second), delayed
		// outside the fake clientset: a reactor that slept would hold the
		// clientset's lock, and the Lease's read beside it would then stop
		// the bubble's clock for good
		c := clustertest.Outside{Interface: fake.NewClientset(n), Before: func(verb, resource, _ string) {
			if verb == "get" && resource == "nodes" {
				time.Sleep(volume.GuardFresh)
			}
		}}
		pending := reading{state: instance.StatePending, tagged: true}
		ec2 := &fakeEC2{readings: map[string][]reading{idA: {stopped, pending}}}
		h := New(config.Config{NodeLeaseStaleAfter: 15 * time.Second}, Clients{Kube: c, EC2: ec2}, nil, WithClock(clock.RealClock{}))
		g := (&abruptRelease{&invocation{h: h}}).guard(n, idA)
		if err := g.check(t.Context()); !errors.Is(err, ErrNotSafe) || ec2.calls != 2 {
			t.Fatalf("check = %v after %d EC2 reads; want EC2 read again after the slow Node read, and its pending to stop the step", err, ec2.calls)
		}
	})
}
