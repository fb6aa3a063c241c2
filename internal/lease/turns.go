package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// AnnotationShared lists, while a drain holds the lease, the pods it is
// evicting under PodDisruptionBudgets that pods of other nodes share, as
// JSON: PDB namespace/name → the names of its pods under it. The drains of
// a storm take their turns on those PDBs by it (see Turns).
const AnnotationShared = "node-drainer.io/shared-pdbs"

// AnnotationTurnSince is when the lease's holder first announced its shared
// pods (RFC 3339 in UTC with nanoseconds, fixed width: its text sorts as its
// time does): the drains take their turns in that order.
const AnnotationTurnSince = "node-drainer.io/turn-since"

const turnLayout = "2006-01-02T15:04:05.000000000Z07:00"

// peersSyncWait bounds the wait for the leases' first list: until it is in,
// the drain evicts without turns (its own jitter still spaces it).
const peersSyncWait = 5 * time.Second

// Turns orders the evictions of the drains that hold this namespace's
// leases under the PodDisruptionBudgets they share (a Deployment spread
// over the nodes of a storm). Each drain announces its pods under such PDBs
// on its lease, and watches the leases: a pod of its waits while the drains
// that announced theirs before it (AnnotationTurnSince, then the lease's
// name) have as many pods waiting on the PDB as the PDB has room for. The
// order is one for every PDB, so no two drains wait on each other. It is
// the order of the announcements, not of the leases: a drain that took its
// lease early but announced late (slow to start under a storm) would
// otherwise count none of the evictions that drains after it in the order
// already sent, and send past the room.
//
// Without it each drain sees a PDB's room at the moment the others do, and
// they all send an eviction: all but one conflict in the apiserver, sleep
// there and come back refused. Its cost is one update of the lease per
// announcement and one list and watch of the namespace's leases per drain.
type Turns struct {
	claim *Claim
	peers *cluster.Informer

	mu     sync.Mutex
	plans  map[string]plan // by lease name
	change cluster.Signal  // the peers' informer started
}

// plan is one lease's announcement, parsed for one resourceVersion.
type plan struct {
	rv     string
	shared map[string][]string // nil: none, or not readable
	since  time.Time           // zero: none, or not readable
}

// NewTurns returns the turns of the drain that holds cl (nil when cl is
// nil: no lease, no turns).
func NewTurns(cl *Claim) *Turns {
	if cl == nil {
		return nil
	}
	return &Turns{claim: cl, plans: map[string]plan{}}
}

// Announce records shared on the lease (replacing an earlier announcement)
// and, the first time, starts watching the namespace's leases until ctx
// ends.
func (t *Turns) Announce(ctx context.Context, shared map[string][]string) error {
	b, err := json.Marshal(shared)
	if err != nil {
		return fmt.Errorf("announcing the shared PDBs: %w", err)
	}
	since := t.claim.clock.Now().UTC().Format(turnLayout)
	if err := t.claim.update(ctx, func(l *coordinationv1.Lease) {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[AnnotationShared] = string(b)
		if l.Annotations[AnnotationTurnSince] == "" {
			l.Annotations[AnnotationTurnSince] = since // a later tier keeps its place
		}
	}); err != nil {
		return fmt.Errorf("announcing the shared PDBs on lease %s/%s: %w", t.claim.ns, t.claim.name, err)
	}
	t.mu.Lock()
	started := t.peers != nil
	if !started {
		c, ns := t.claim.client, t.claim.ns
		sel := labels.SelectorFromSet(leaseLabels).String()
		t.peers = cluster.Inform(ctx, &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = sel
				return c.CoordinationV1().Leases(ns).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = sel
				return c.CoordinationV1().Leases(ns).Watch(ctx, o)
			},
		}, &coordinationv1.Lease{})
	}
	peers := t.peers
	t.mu.Unlock()
	if started {
		return nil
	}
	t.change.Broadcast()
	wctx, cancel := context.WithTimeout(ctx, peersSyncWait)
	defer cancel()
	if !peers.WaitSynced(wctx) && peers.Err() != nil {
		return fmt.Errorf("watching the leases of %s: %w", t.claim.ns, peers.Err())
	}
	return nil
}

// informer is the peers' informer, nil before the first announcement.
func (t *Turns) informer() *cluster.Informer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peers
}

// Changed is closed when a lease changes (or the watch starts).
func (t *Turns) Changed() <-chan struct{} {
	if in := t.informer(); in != nil {
		return in.Changed()
	}
	return t.change.C()
}

// Ahead counts the pods under pdb (namespace/name) that the drains before
// this one announced and that are not done (done: the PDB's status showed
// their eviction). ok is false while the leases are not watched (not yet
// announced, not synced, refused): the caller goes on without turns.
func (t *Turns) Ahead(pdb string, done func(pod string) bool) (n int, ok bool) {
	in := t.informer()
	mine := t.claim.written()
	if in == nil || !in.Synced() || in.Err() != nil || mine == nil {
		return 0, false
	}
	now := t.claim.clock.Now()
	me := t.plan(mine)
	for _, o := range in.Store().List() {
		l := o.(*coordinationv1.Lease)
		if l.Name == mine.Name || !Held(l, now) {
			continue
		}
		p := t.plan(l)
		if !before(p, l.Name, me, mine.Name) {
			continue
		}
		for _, pod := range p.shared[pdb] {
			if !done(pod) {
				n++
			}
		}
	}
	return n, true
}

// plan is l's announcement, parsed once per resourceVersion.
func (t *Turns) plan(l *coordinationv1.Lease) plan {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.plans[l.Name]; ok && p.rv == l.ResourceVersion {
		return p
	}
	p := plan{rv: l.ResourceVersion}
	if s, ok := l.Annotations[AnnotationShared]; ok {
		if err := json.Unmarshal([]byte(s), &p.shared); err != nil {
			p.shared = nil // a peer's unreadable announcement orders nothing
		}
	}
	if s, ok := l.Annotations[AnnotationTurnSince]; ok {
		if at, err := time.Parse(turnLayout, s); err == nil {
			p.since = at
		}
	}
	t.plans[l.Name] = p
	return p
}

// before reports whether a (of lease aName) announced before b (of bName):
// the order every drain sees alike. One without a time comes last.
func before(a plan, aName string, b plan, bName string) bool {
	switch {
	case a.since.IsZero():
		return false
	case b.since.IsZero():
		return true
	case !a.since.Equal(b.since):
		return a.since.Before(b.since)
	}
	return aName < bName
}
