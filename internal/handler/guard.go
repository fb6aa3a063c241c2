package handler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/volume"
)

// ErrNotSafe says why an irreversible step is not taken: the evidence read
// again at the moment of acting does not show the machine down (or EC2
// reports the instance as it may still run). Outcome.Err matches it when
// nothing was forced.
var ErrNotSafe = errors.New("not safe to force")

// errAlive is the ErrNotSafe that time may cure: the node still looks alive
// (Ready, its kubelet's Lease fresh) though EC2 says the instance is down;
// its Lease goes stale within NODE_LEASE_STALE_AFTER if EC2 is right.
var errAlive = fmt.Errorf("%w: the node's kubelet looks alive", ErrNotSafe)

// guard re-reads, before each irreversible step of the abrupt path (force
// deleting pods, deleting VolumeAttachments, the out-of-service taint,
// deleting the Node), everything that step relies on: EC2's state of the
// instance (never the event's), the Node as it is now (the same object, its
// providerID naming the instance, not created after the event: names are
// reused), and that no kubelet runs on it (NotReady, or its Lease stale).
type guard struct {
	r  *invocation
	n  *corev1.Node // the node the event meant, as first found
	id string

	mu   sync.Mutex
	read *corev1.Node // the Node as the last check that passed read it
}

func (r *abruptRelease) guard(n *corev1.Node, id string) *guard {
	return &guard{r: r.invocation, n: n, id: id}
}

// node is the Node as the last check that passed read it (the node first
// found before any): what a write right after that check starts from.
func (g *guard) node() *corev1.Node {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.read == nil {
		return g.n
	}
	return g.read
}

// check reads the evidence again; nil means the step may be taken.
func (g *guard) check(ctx context.Context) error {
	cur, err := g.evidence(ctx)
	if err == nil {
		g.mu.Lock()
		g.read = cur
		g.mu.Unlock()
	}
	return err
}

// evidence reads EC2, the Node and the kubelet's Lease and returns the Node
// read, or why the step may not be taken.
func (g *guard) evidence(ctx context.Context) (*corev1.Node, error) {
	r, n, id := g.r, g.n, g.id
	// EC2, the Node and the kubelet's Lease are read at once: the step
	// waits for the slowest of the three, not for each in turn. The
	// Lease only counts while the Node says Ready; read beside it, it is
	// dropped (its error too) when the Node says otherwise.
	var (
		cur      *corev1.Node
		nodeErr  error
		renewed  time.Time
		leaseErr error
		reads    sync.WaitGroup
	)
	reads.Go(func() {
		nodeErr = cluster.Retry(ctx, func() (err error) {
			cur, err = node.Get(ctx, r.h.c.Kube, n.Name)
			return err
		})
	})
	reads.Go(func() { renewed, leaseErr = node.KubeletRenewed(ctx, r.h.c.Kube, n.Name) })
	inst, err := instance.Describe(ctx, r.h.c.EC2, r.h.clock, id)
	described := r.h.now()
	reads.Wait()
	// the verdict holds as of the guard's return (volume.Verdict): when the
	// apiserver's reads took longer (retried), EC2 is read again after them
	if err == nil && r.h.now().Sub(described) >= volume.GuardFresh {
		inst, err = instance.Describe(ctx, r.h.c.EC2, r.h.clock, id)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: EC2 unreadable: %v", ErrNotSafe, err)
	}
	if !inst.Down() {
		return nil, fmt.Errorf("%w: %s", ErrNotSafe, inst)
	}
	err = nodeErr
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: node %s is gone", ErrNotSafe, n.Name)
	case err != nil:
		return nil, fmt.Errorf("%w: node %s unreadable: %v", ErrNotSafe, n.Name, err)
	case cur.UID != n.UID:
		return nil, fmt.Errorf("%w: node %s was registered again (uid %s, was %s): a new machine has the name", ErrNotSafe, n.Name, cur.UID, n.UID)
	case cur.Spec.ProviderID != "" && node.ProviderInstanceID(cur.Spec.ProviderID) != id:
		return nil, fmt.Errorf("%w: node %s is instance %q, not %s", ErrNotSafe, n.Name, cur.Spec.ProviderID, id)
	case !r.ev.Time.IsZero() && r.ev.Time.Before(cur.CreationTimestamp.Add(-time.Second)):
		return nil, fmt.Errorf("%w: the event (%s) is older than node %s (registered %s)", ErrNotSafe,
			r.ev.Time.UTC().Format(time.RFC3339), n.Name, cur.CreationTimestamp.UTC().Format(time.RFC3339))
	}
	if !node.Ready(cur) {
		return cur, nil
	}
	if leaseErr != nil {
		return nil, fmt.Errorf("%w: node %s is Ready and its Lease unreadable: %v", ErrNotSafe, n.Name, leaseErr)
	}
	if age := r.h.now().Sub(renewed); age < r.h.cfg.NodeLeaseStaleAfter {
		return nil, fmt.Errorf("%w (node %s Ready, Lease renewed %s ago)", errAlive, n.Name, age.Round(time.Second))
	}
	return cur, nil
}

// safeToForce runs the guard, waiting (bounded by the stopping wait and the
// budget) while the only objection is a kubelet that still looks alive. The
// wait is on a watch of the node's Lease (kube-node-lease, by name): the
// guard runs again when the Lease turns stale without a renewal, not on a
// timer; a Lease that cannot be watched (403) ends the wait, not forced,
// with that cause.
func (r *abruptRelease) safeToForce(ctx context.Context, nodeName string, check func(context.Context) error) error {
	if r.h.cfg.DryRun {
		return check(ctx) // a dry run says what it sees now; it does not wait (rule 7)
	}
	limit := r.h.now().Add(r.h.cfg.StoppingWaitTimeout)
	if b := r.budget(ctx); b.Before(limit) {
		limit = b
	}
	var kubelet *node.KubeletLease // watched from the first time the kubelet looks alive
	for {
		err := check(ctx)
		if !errors.Is(err, errAlive) || !r.h.now().Add(r.h.StoppingPollInterval).Before(limit) {
			return err
		}
		if kubelet == nil {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			kubelet = node.WatchKubeletLease(wctx, r.h.c.Kube, nodeName)
		}
		if werr := r.waitStale(ctx, kubelet, limit); werr != nil {
			return fmt.Errorf("%w (%v); and the node's Lease cannot be watched: %w", ErrNotSafe, err, werr)
		}
		if !r.h.now().Before(limit) || ctx.Err() != nil {
			return err
		}
	}
}

// waitStale waits until the watched Lease is older than NODE_LEASE_STALE_AFTER
// by the handler's clock (or gone), until limit, or ctx's end; a renewal
// seen on the watch moves the wait on. Its error is the watch's, when the
// Lease cannot be watched. The wait for the watch's first list is bounded by
// a context deadline at limit, on the runtime's timer; the rest waits on the
// handler's clock.
func (r *abruptRelease) waitStale(ctx context.Context, kubelet *node.KubeletLease, limit time.Time) error {
	sctx, cancel := context.WithDeadline(ctx, limit)
	synced := kubelet.WaitSynced(sctx)
	cancel()
	if err := kubelet.Err(); err != nil || !synced {
		return err // not synced by the limit: the guard says so itself
	}
	for {
		changed := kubelet.Changed()
		if err := kubelet.Err(); err != nil {
			return err
		}
		until := limit
		if stale := kubelet.Renewed().Add(r.h.cfg.NodeLeaseStaleAfter); stale.Before(until) {
			until = stale
		}
		if !r.h.now().Before(until) {
			return nil
		}
		timer := r.h.clock.NewTimer(until.Sub(r.h.now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C():
			return nil
		case <-changed:
			timer.Stop()
		}
	}
}
