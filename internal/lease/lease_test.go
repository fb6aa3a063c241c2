package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const (
	ns   = "node-drainer"
	inst = "i-0123456789abcdef0"
)

func holderOf(t *testing.T, c *fake.Clientset) string {
	t.Helper()
	l, err := c.CoordinationV1().Leases(ns).Get(context.Background(), Name(inst), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

func TestOneHolderAtATime(t *testing.T) {
	ctx := context.Background()
	c := newClient()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))

	a, err := Acquire(ctx, c, ns, Name(inst), "req-a", "token-1", clk)
	if err != nil {
		t.Fatal(err)
	}
	if h := holderOf(t, c); h != "req-a" {
		t.Fatalf("holder %q", h)
	}
	// a duplicate while a renews: refused
	if _, err := Acquire(ctx, c, ns, Name(inst), "req-b", "token-1", clk); !errors.Is(err, ErrHeld) {
		t.Fatalf("duplicate acquired: %v", err)
	}
	clk.SetTime(clk.Now().Add(Duration / 2))
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(Duration - time.Second))
	if _, err := Acquire(ctx, c, ns, Name(inst), "req-b", "token-1", clk); !errors.Is(err, ErrHeld) {
		t.Fatalf("renewed lease taken: %v", err)
	}
	// a stops renewing: taken over once stale
	clk.SetTime(clk.Now().Add(2 * time.Second))
	b, err := Acquire(ctx, c, ns, Name(inst), "req-b", "token-1", clk)
	if err != nil {
		t.Fatalf("stale lease not taken over: %v", err)
	}
	if err := a.Renew(ctx); !errors.Is(err, ErrHeld) {
		t.Fatalf("the old holder renewed a lease it lost: %v", err)
	}
	// b finishes the action: a late duplicate of it does nothing, a new action may go
	if err := b.Release(ctx, "token-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(ctx, c, ns, Name(inst), "req-c", "token-1", clk); !errors.Is(err, ErrDone) {
		t.Fatalf("late duplicate of a finished action: %v", err)
	}
	if _, err := Acquire(ctx, c, ns, Name(inst), "req-d", "token-2", clk); err != nil {
		t.Fatalf("next action refused: %v", err)
	}
}

// A continuation takes the lease its predecessor released.
func TestReleaseForContinuation(t *testing.T) {
	ctx := context.Background()
	c := newClient()
	clk := clocktesting.NewFakeClock(time.Now())
	a, err := Acquire(ctx, c, ns, Name(inst), "req-a", "token-1", clk)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(ctx, c, ns, Name(inst), "req-cont", "token-1", clk); err != nil {
		t.Fatalf("continuation refused: %v", err)
	}
}

// A continuation whose predecessor could not give the lease up (the
// apiserver down across the hand-over) takes it from that predecessor at
// once; anyone else still waits for it to go stale (rule 16).
func TestContinuationTakesOverFromItsPredecessor(t *testing.T) {
	ctx := context.Background()
	c := newClient()
	clk := clocktesting.NewFakeClock(time.Now())
	if _, err := Acquire(ctx, c, ns, Name(inst), "req-a", "token-1", clk); err != nil {
		t.Fatal(err)
	}
	if _, err := AcquireFrom(ctx, c, ns, Name(inst), "req-dup", []string{"req-other"}, "token-1", clk); !errors.Is(err, ErrHeld) {
		t.Fatalf("a duplicate naming another predecessor took a held lease: %v", err)
	}
	if _, err := AcquireFrom(ctx, c, ns, Name(inst), "req-cont", []string{"req-b", "req-a"}, "token-1", clk); err != nil {
		t.Fatalf("the continuation of req-a was refused its lease: %v", err)
	}
	if h := holderOf(t, c); h != "req-cont" {
		t.Fatalf("holder %q, want req-cont", h)
	}
}

func TestRaceLostIsHeld(t *testing.T) {
	c := newClient()
	c.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, Name(inst))
	})
	if _, err := Acquire(context.Background(), c, ns, Name(inst), "req-a", "t", nil); !errors.Is(err, ErrHeld) {
		t.Fatalf("lost create race: %v", err)
	}
}

// An instance's first event finds no lease and takes it with one request,
// a create; a lease that exists is read after the create fails.
func TestAcquireCreatesFirst(t *testing.T) {
	c := newClient()
	if _, err := Acquire(context.Background(), c, ns, Name(inst), "req-a", "t", nil); err != nil {
		t.Fatal(err)
	}
	if got := verbs(c); !slices.Equal(got, []string{"create"}) {
		t.Fatalf("first acquire sent %v, want one create", got)
	}
	c.ClearActions()
	if _, err := Acquire(context.Background(), c, ns, Name(inst), "req-b", "t", nil); !errors.Is(err, ErrHeld) {
		t.Fatalf("second holder while the first renews: %v, want ErrHeld", err)
	}
	if got := verbs(c); !slices.Equal(got, []string{"create", "get"}) {
		t.Fatalf("acquire of a held lease sent %v, want create then get", got)
	}
}

func verbs(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		out = append(out, a.GetVerb())
	}
	return out
}

func TestUnavailable(t *testing.T) {
	c := newClient()
	c.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, Name(inst), errors.New("no role"))
	})
	if _, err := Acquire(context.Background(), c, ns, Name(inst), "req-a", "t", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("forbidden: %v", err)
	}
	var none *Claim
	if err := none.Renew(context.Background()); err != nil {
		t.Fatalf("a nil claim renews nothing: %v", err)
	}
}

// A release that meets an expired token (401) is retried, so the lease is
// handed over; the continuation would otherwise find it held.
func TestReleaseRetriesUnauthorized(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := newClient()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	a, err := Acquire(ctx, c, ns, Name(inst), "req-a", "token-1", clk)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed == 0 {
			failed++
			return true, nil, apierrors.NewUnauthorized("token expired")
		}
		return false, nil, nil
	})
	if err := a.Release(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if h := holderOf(t, c); h != "" || failed != 1 {
		t.Errorf("holder %q after release (%d 401s): want none", h, failed)
	}
}

// A renewal writes the lease at the version this claim last wrote, with no
// read first; a lease someone else changed since is a conflict, and the
// renewal reads it again: refused when another holder has it.
func TestRenewWithoutRead(t *testing.T) {
	ctx := context.Background()
	c := newClient()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	a, err := Acquire(ctx, c, ns, Name(inst), "req-a", "token-1", clk)
	if err != nil {
		t.Fatal(err)
	}
	c.ClearActions()
	for range 3 {
		clk.SetTime(clk.Now().Add(Duration / 3))
		if err := a.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var verbs []string
	for _, act := range c.Actions() {
		verbs = append(verbs, act.GetVerb())
	}
	if want := []string{"update", "update", "update"}; !slices.Equal(verbs, want) {
		t.Errorf("three renewals sent %v, want %v", verbs, want)
	}
	// taken over meanwhile (a stale lease, as if a renewal had been lost)
	l, err := c.CoordinationV1().Leases(ns).Get(ctx, Name(inst), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("req-b")
	if _, err := c.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Renew(ctx); !errors.Is(err, ErrHeld) {
		t.Fatalf("renewal of a lease req-b took: %v, want ErrHeld", err)
	}
	if h := holderOf(t, c); h != "req-b" {
		t.Errorf("holder %q after the refused renewal, want req-b", h)
	}
}

// KeepAlive sends nothing at once (Acquire has just written the lease), then
// one update per period. In a synctest bubble the claim's real clock is the
// bubble's: the periods are exact however loaded the machine (in real time,
// a 50 ms sleep stretched past the first period renewed "at once").
func TestKeepAliveWaitsOnePeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		c := newClient()
		a, err := Acquire(ctx, c, ns, Name(inst), "req-a", "token-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		c.ClearActions()
		const every = 100 * time.Millisecond
		stop := a.keepAlive(ctx, every, func(err error) { t.Errorf("renewal: %v", err) })
		time.Sleep(every / 2)
		synctest.Wait()
		if n := len(c.Actions()); n != 0 {
			t.Errorf("%d requests before the first period ended, want none", n)
		}
		time.Sleep(every * 2)
		synctest.Wait()
		stop()
		if n := len(c.Actions()); n != 2 {
			t.Errorf("%d requests in %v of renewals every %v, want 2", n, every*5/2, every)
		}
	})
}

// newClient is a fake clientset whose leases keep the apiserver's optimistic
// concurrency.
func newClient() *fake.Clientset {
	c := fake.NewClientset()
	conflictOnStaleVersion(c)
	return c
}

// conflictOnStaleVersion gives the fake's leases resourceVersions and makes
// it refuse an update at a version that is not the stored one, as the
// apiserver does (the fake alone does neither).
func conflictOnStaleVersion(c *fake.Clientset) {
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	version := 0
	stamp := func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(interface{ GetObject() runtime.Object }).GetObject().(*coordinationv1.Lease)
		if a.GetVerb() == "update" {
			stored, err := c.Tracker().Get(gvr, l.Namespace, l.Name)
			if err != nil {
				return false, nil, nil
			}
			if rv := stored.(*coordinationv1.Lease).ResourceVersion; rv != l.ResourceVersion {
				return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, fmt.Errorf("at version %q, stored %q", l.ResourceVersion, rv))
			}
		}
		version++
		l.ResourceVersion = strconv.Itoa(version)
		return false, nil, nil // the tracker stores it, version and all
	}
	c.PrependReactor("create", "leases", stamp)
	c.PrependReactor("update", "leases", stamp)
}

// Every lease of an instance, the hook's and each advisory kind's, names
// the instance (and says which it is); other names none.
func TestInstanceID(t *testing.T) {
	for name, want := range map[string]string{
		Name("i-0abc"): "i-0abc",
		AdvisoryName("spot-interruption", "i-0abc"):     "i-0abc",
		AdvisoryName("rebalance-recommendation", "i-1"): "i-1",
		"kube-node-lease": "",
	} {
		if got := InstanceID(name); got != want {
			t.Errorf("InstanceID(%q) = %q, want %q", name, got, want)
		}
		if got, want := Advisory(name), strings.Contains(name, "."); got != want {
			t.Errorf("Advisory(%q) = %v, want %v", name, got, want)
		}
	}
}

// KeepAlive renews on the claim's clock: nothing while it stands still, one
// renewal per period it is stepped.
func TestKeepAliveOnItsClock(t *testing.T) {
	ctx := context.Background()
	c := newClient()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	a, err := Acquire(ctx, c, ns, Name(inst), "req-a", "token-1", clk)
	if err != nil {
		t.Fatal(err)
	}
	c.ClearActions()
	stop := a.KeepAlive(ctx, func(err error) { t.Errorf("renewal: %v", err) })
	defer stop()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if n := len(c.Actions()); n != 0 {
		t.Fatalf("%d requests while the clock stood still, want none", n)
	}
	clk.Step(Duration / 3)
	deadline := time.Now().Add(5 * time.Second)
	for len(c.Actions()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := len(c.Actions()); n != 1 {
		t.Errorf("%d requests after one period, want 1", n)
	}
}

// Delete deletes the lease as read (UID and resourceVersion named); one gone
// or changed since is left, and no error; another failure is returned.
func TestDelete(t *testing.T) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: Name(inst), Namespace: ns, UID: "uid-1", ResourceVersion: "7"}}
	for _, tc := range []struct {
		name    string
		answer  error
		wantErr bool
	}{
		{name: "deleted"},
		{name: "gone already", answer: apierrors.NewNotFound(schema.GroupResource{Resource: "leases"}, l.Name)},
		{name: "taken again since", answer: apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, l.Name, errors.New("precondition failed"))},
		{name: "forbidden", answer: apierrors.NewForbidden(schema.GroupResource{Resource: "leases"}, l.Name, errors.New("rbac")), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(l.DeepCopy())
			var pre *metav1.Preconditions
			c.PrependReactor("delete", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
				pre = a.(k8stesting.DeleteAction).GetDeleteOptions().Preconditions
				return tc.answer != nil, nil, tc.answer
			})
			err := Delete(context.Background(), c, l)
			if (err != nil) != tc.wantErr {
				t.Errorf("Delete: %v, want an error: %v", err, tc.wantErr)
			}
			if pre == nil || ptr.Deref(pre.UID, "") != l.UID || ptr.Deref(pre.ResourceVersion, "") != l.ResourceVersion {
				t.Errorf("preconditions %+v: want uid-1 at version 7", pre)
			}
		})
	}
}
