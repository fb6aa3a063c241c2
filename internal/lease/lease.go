// Package lease makes one invocation the only one acting on an instance: a
// coordination.k8s.io Lease per instance, taken with the apiserver's
// optimistic concurrency (create, or update at the resourceVersion read), kept
// fresh while the invocation works, and taken over only when its holder
// stopped renewing it. EventBridge delivers at least once and Lambda retries:
// three copies of one terminate hook arriving together give one drain and one
// completion.
package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// Duration is how long a holder that stopped renewing keeps its lease.
const Duration = 60 * time.Second

// AnnotationDone records the lifecycle action (its token) whose handling
// ended, so a late duplicate of its event does nothing.
const AnnotationDone = "node-drainer.io/done"

var (
	// ErrHeld means another live invocation holds the instance.
	ErrHeld = errors.New("held by another invocation")
	// ErrDone means the work for this key was already finished.
	ErrDone = errors.New("already handled")
	// ErrUnavailable means no lease can be kept (its namespace is missing
	// or not granted): the caller goes on without one, and says so.
	ErrUnavailable = errors.New("lease unavailable")
)

// Claim is a held lease.
type Claim struct {
	client kubernetes.Interface
	ns     string
	name   string
	holder string
	clock  clock.WithTicker

	mu sync.Mutex
	// last is the lease as this claim last wrote it: a renewal updates it at
	// that resourceVersion without reading it first (one request, not two;
	// a drain that waits minutes renews every Duration/3). Any change by
	// someone else since is a conflict, and the lease is read again.
	last *coordinationv1.Lease
}

// prefix starts the name of every instance's lease.
const prefix = "node-drainer-"

// leaseLabels label every instance's lease.
var leaseLabels = map[string]string{"app.kubernetes.io/name": "node-drainer"}

// Name is the name of an instance's lease for its lifecycle hooks.
func Name(instanceID string) string { return prefix + instanceID }

// AdvisoryName is the name of an instance's lease for the drains of one
// kind of advisory event (a spot warning, a rebalance recommendation, a
// scheduled change): apart from the hook's, so that a drain on a warning
// never makes the terminate hook that follows it look like a duplicate (the
// hook would then wait out its timeout, uncompleted), and apart from each
// other's, so that a spot warning arriving during a rebalance drain still
// drains within its 2-minute notice.
func AdvisoryName(kind, instanceID string) string { return prefix + kind + "." + instanceID }

// Advisory reports whether a lease of that name is an advisory drain's
// (AdvisoryName), not the hook's.
func Advisory(name string) bool {
	return strings.HasPrefix(name, prefix) && strings.Contains(name[len(prefix):], ".")
}

// InstanceID is the instance a lease of that name is for ("" when the name
// is not an instance's lease).
func InstanceID(name string) string {
	id, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return ""
	}
	if i := strings.LastIndexByte(id, '.'); i >= 0 {
		id = id[i+1:] // an advisory lease; an instance id has no dot
	}
	return id
}

// Held reports whether an invocation holds the lease at now: it names a
// holder that renewed it within its duration.
func Held(l *coordinationv1.Lease, now time.Time) bool {
	return ptr.Deref(l.Spec.HolderIdentity, "") != "" && !stale(l, now)
}

// stale reports whether the lease's holder, if any, stopped renewing it: its
// last renewal is older than its duration, or there was none.
func stale(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil {
		return true
	}
	d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, int32(Duration/time.Second))) * time.Second
	return now.After(l.Spec.RenewTime.Add(d))
}

// Acquire takes the lease of that name (Name, AdvisoryName) for holder,
// working on key (the lifecycle action's token, the advisory event's id).
// It fails with ErrHeld while another holder renews it, ErrDone when key
// was finished, ErrUnavailable when leases cannot be used at all; other
// errors are the API's. The claim reads the time and waits on clk (nil: the
// real clock).
func Acquire(ctx context.Context, c kubernetes.Interface, ns, name, holder, key string, clk clock.WithTicker) (*Claim, error) {
	return AcquireFrom(ctx, c, ns, name, holder, nil, key, clk)
}

// AcquireFrom is Acquire for the successor of predecessors (a continuation
// of the invocations that handed the drain over): a lease one of them still
// holds, because it could not give it up, is taken over at once instead of
// being waited for until it goes stale. None: Acquire.
func AcquireFrom(ctx context.Context, c kubernetes.Interface, ns, name, holder string, predecessors []string, key string, clk clock.WithTicker) (*Claim, error) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	cl := &Claim{client: c, ns: ns, name: name, holder: holder, clock: clk}
	// created first: an instance's first event (the usual case) finds no
	// lease, and takes it in one request; the create is atomic, so a lease
	// that exists (a duplicate, a continuation, a key finished) fails it
	// and is read and judged as before
	var l *coordinationv1.Lease
	for tries := 0; ; tries++ {
		var err error
		l, err = c.CoordinationV1().Leases(ns).Create(ctx, cl.fresh(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: cl.name, Namespace: ns,
			Labels: leaseLabels}}), metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			cl.wrote(l, err)
			return cl, cl.classify(err)
		}
		l, err = c.CoordinationV1().Leases(ns).Get(ctx, cl.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && tries == 0:
			continue // deleted between the two: created again
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("%w: lease %s/%s created and deleted by others while this one took it", ErrHeld, ns, cl.name)
		case err != nil:
			return nil, cl.classify(err)
		}
		break
	}
	if key != "" && l.Annotations[AnnotationDone] == key {
		return nil, fmt.Errorf("%w: lease %s/%s says %s", ErrDone, ns, cl.name, key)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" && h != holder && !slices.Contains(predecessors, h) && !stale(l, cl.clock.Now()) {
		return nil, fmt.Errorf("%w: %s (lease %s/%s renewed %s)", ErrHeld, h, ns, cl.name, l.Spec.RenewTime)
	}
	l = cl.fresh(l.DeepCopy())
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	return cl, cl.classify(cl.put(ctx, l)) // at the version read: a race is a conflict
}

// put updates the lease at l's resourceVersion and remembers what was written.
func (cl *Claim) put(ctx context.Context, l *coordinationv1.Lease) error {
	out, err := cl.client.CoordinationV1().Leases(cl.ns).Update(ctx, l, metav1.UpdateOptions{})
	cl.wrote(out, err)
	return err
}

// wrote remembers the lease as a successful write returned it.
func (cl *Claim) wrote(l *coordinationv1.Lease, err error) {
	if err != nil || l == nil {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.last = l
}

// written is a copy of the lease as this claim last wrote it, or nil.
func (cl *Claim) written() *coordinationv1.Lease {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.last == nil {
		return nil
	}
	return cl.last.DeepCopy()
}

func (cl *Claim) fresh(l *coordinationv1.Lease) *coordinationv1.Lease {
	t := metav1.NewMicroTime(cl.clock.Now())
	l.Spec.HolderIdentity = ptr.To(cl.holder)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(Duration / time.Second))
	l.Spec.AcquireTime, l.Spec.RenewTime = &t, &t
	return l
}

func (cl *Claim) classify(err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return fmt.Errorf("%w: lost the race for lease %s/%s", ErrHeld, cl.ns, cl.name)
	case apierrors.IsForbidden(err), apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %s/%s: %v", ErrUnavailable, cl.ns, cl.name, err)
	}
	return fmt.Errorf("lease %s/%s: %w", cl.ns, cl.name, err)
}

// update changes the lease if this claim still holds it. A failure a retry
// may cure is retried (a 401 first: the cached token is reset by it, and a
// drain that waits on watches may send nothing else for minutes); a
// conflict is not: another holder changed the lease.
func (cl *Claim) update(ctx context.Context, change func(*coordinationv1.Lease)) error {
	if cl == nil {
		return nil
	}
	return cluster.RetryPinned(ctx, func() error { return cl.updateOnce(ctx, change) })
}

func (cl *Claim) updateOnce(ctx context.Context, change func(*coordinationv1.Lease)) error {
	if l := cl.written(); l != nil {
		change(l)
		if err := cl.put(ctx, l); !apierrors.IsConflict(err) {
			return cl.classify(err)
		}
		// changed since this claim wrote it: read who holds it now
	}
	l, err := cl.client.CoordinationV1().Leases(cl.ns).Get(ctx, cl.name, metav1.GetOptions{})
	if err != nil {
		return cl.classify(err)
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != cl.holder {
		return fmt.Errorf("%w: lease %s/%s taken by %s", ErrHeld, cl.ns, cl.name, ptr.Deref(l.Spec.HolderIdentity, ""))
	}
	l = l.DeepCopy()
	change(l)
	return cl.classify(cl.put(ctx, l))
}

// Renew marks the lease as still held now.
func (cl *Claim) Renew(ctx context.Context) error {
	return cl.update(ctx, func(l *coordinationv1.Lease) {
		t := metav1.NewMicroTime(cl.clock.Now())
		l.Spec.RenewTime = &t
	})
}

// Release gives the lease up (for a continuation to take), recording key as
// done when it is not empty; the drain's announcement (see Turns) goes.
func (cl *Claim) Release(ctx context.Context, doneKey string) error {
	return cl.update(ctx, func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity = nil
		delete(l.Annotations, AnnotationShared)
		delete(l.Annotations, AnnotationTurnSince)
		if doneKey != "" {
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations[AnnotationDone] = doneKey
		}
	})
}

// KeepAlive renews the lease every third of its duration until stop is
// called (the claim has just written it: not at once); failures go to onErr.
func (cl *Claim) KeepAlive(ctx context.Context, onErr func(error)) (stop func()) {
	return cl.keepAlive(ctx, Duration/3, onErr)
}

func (cl *Claim) keepAlive(ctx context.Context, every time.Duration, onErr func(error)) (stop func()) {
	if cl == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := cl.clock.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				if err := cl.Renew(ctx); err != nil && ctx.Err() == nil {
					onErr(err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Delete deletes the lease as it was read (its UID and resourceVersion are
// preconditions): one gone since, or taken again since (a conflict), is left
// and no error. Other errors are the API's.
func Delete(ctx context.Context, c kubernetes.Interface, l *coordinationv1.Lease) error {
	err := c.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
