package drain

import (
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// takenTTL is how long an eviction this drain sent counts against its PDB
// once its pod is gone, when no status showed it (a re-listed watch can
// skip that status).
const takenTTL = 5 * time.Second

// verdict is what take decided for one eviction.
type verdict int

const (
	admitted verdict = iota // send it
	held                    // the PDB allows no disruption that is not taken
	queued                  // another eviction against the PDB is in flight
	deferred                // other drains may want the PDB's room: wait for the pod's jitter
	behind                  // drains before this one wait on the PDB's room: wait for them
)

// raceSpacing is a shared PDB's jitter window per other pod it expects for
// each disruption it has room for: the time for one drain's eviction to
// reach the PDB's status and the other drains' watches before the next
// drain looks. In a 10-node storm whose PDBs span every node, 150 ms let
// one eviction in five lose its race, 300 ms one in fifteen. Spacing by
// the drain's own eviction times, about a second in the 50-node storm, cut
// the lost races by a quarter more but made the storm 44 % longer (see
// docs/benchmarks.md). jitterCap bounds the window.
const (
	raceSpacing = 200 * time.Millisecond
	jitterCap   = 10 * time.Second
)

// turnGrace is how long a pod waits its turn behind other drains while the
// PDB has room and none of them takes it: a drain before it may have
// announced a pod it evicts later (a later tier), or one whose eviction
// this drain's watch never saw. Then the pod goes, jittered. Under a
// 50-node storm an eviction takes about a second in the apiserver.
const turnGrace = 5 * time.Second

// take takes a disruption from the PDB covering p, if p is gated by one.
//
// The eviction API decrements the PDB's disruptionsAllowed and lists the pod
// in its disruptedPods in one status update, before the pod is deleted. An
// eviction this drain sent counts against the status as watched until a
// status lists the pod in disruptedPods (the watch delivers the statuses in
// order, so a later one counts it as disrupted or, once the disruption
// controller saw it go, as not healthy), or until takenTTL after its pod
// went, should the watch have skipped that status. So evictions sent in
// parallel do not take one allowance twice (no 429 storm), and a skipped
// status costs at most one refusal, never a stall.
//
// One eviction per PDB is in flight at a time. The eviction API updates the
// PDB's status with its resourceVersion as a precondition, and on a conflict
// sleeps 500 ms before it reads the PDB again (EvictionsRetry in the
// apiserver's eviction handler): ten evictions sent at once against one PDB
// take about five seconds, the last one, where ten in a row take ten round
// trips; after 20 conflicts one fails with a 504.
//
// Drains of other nodes may evict against the same PDB (a Deployment spread
// over the nodes of a storm), and each sees the PDB's room as soon as the
// others do: sent at once, all but the first conflict in the apiserver,
// sleep there, and come back refused (one wasted eviction, holding a seat
// of the apiserver for seconds, per drain and per disruption allowed). So
// a pod whose PDB expects pods on other nodes waits a random jitter, drawn
// when the PDB has room, within raceSpacing per such pod and per
// disruption of room (jitterCap at most; none when the room is enough for
// every pod the PDB expects), and is sent only if the PDB still has room
// then: the first of the drains goes after about one spacing, and
// the others see its eviction in the status before their turn (listen
// before talk). It does so for the drain's first eviction against the PDB
// and, once the PDB's status listed a pod of another node among its
// disrupted pods (other drains are at work), each time the PDB has room
// again. A drain alone pays half a window, once per PDB.
func (r *run) take(p corev1.Pod) (token, verdict, string) {
	if !r.pdbs.Synced() || r.pdbs.Err() != nil || !gated(r.current(p)) {
		return token{}, admitted, ""
	}
	// the status is read under the lock: takes then see the watched statuses
	// in their order. One that read an older status than the take before it
	// would count without the evictions that take's newer status had already
	// absorbed (and removed from taken), and evict past the allowance
	r.mu.Lock()
	defer r.mu.Unlock()
	pdbs := r.covering(p)
	if len(pdbs) != 1 {
		return token{}, admitted, "" // none; or several, which the eviction API refuses by itself
	}
	rd := r.read(p, pdbs[0])
	if rd.pdb.Status.ObservedGeneration < rd.pdb.Generation || rd.room <= 0 {
		delete(r.jitter, p.UID) // the next allowance is a new round
		delete(r.behind, rd.key)
		delete(r.lapsed, rd.key)
		return token{}, held, fmt.Sprintf("%s (disruptions allowed %d, %d of them taken by this drain)", rd.key, rd.pdb.Status.DisruptionsAllowed, len(rd.taken))
	}
	if r.inflight[rd.key] {
		return token{}, queued, rd.key
	}
	turns, v, why := rd.turn()
	if v != admitted {
		return token{pdb: rd.key}, v, why
	}
	if !turns {
		if why := rd.jittered(); why != "" {
			return token{}, deferred, why
		}
	}
	return rd.send(), admitted, ""
}

// reading is one take's reading of the PDB that covers its pod, under the
// run's lock: the status as watched, less this drain's evictions it does
// not show yet (taken), is the room left.
type reading struct {
	r       *run
	p       corev1.Pod
	pdb     *policyv1.PodDisruptionBudget
	key     string
	present map[string]bool // the node's pods (namespace/name)
	now     time.Time
	taken   map[string]time.Time
	room    int32
}

// read reads pdb for p's take: a status listing another node's pod as
// disrupted makes the PDB contended; an eviction of this drain the status
// lists, or whose pod went takenTTL ago, no longer counts as taken.
func (r *run) read(p corev1.Pod, pdb *policyv1.PodDisruptionBudget) *reading {
	rd := &reading{r: r, p: p, pdb: pdb, key: pdb.Namespace + "/" + pdb.Name, now: r.clock.Now()}
	r.dis.record(pdb) // a re-list's statuses reach the store, not the handler
	rd.present = r.presentNames()
	for name := range pdb.Status.DisruptedPods {
		if !r.contended[rd.key] && !r.mine[pdb.Namespace+"/"+name] {
			r.contended[rd.key] = true // another drain evicts against it
		}
	}
	rd.taken = r.taken[rd.key]
	for name, at := range rd.taken {
		if _, shown := pdb.Status.DisruptedPods[name]; shown || (!rd.present[pdb.Namespace+"/"+name] && rd.now.Sub(at) > takenTTL) {
			delete(rd.taken, name)
		}
	}
	rd.room = pdb.Status.DisruptionsAllowed - int32(len(rd.taken))
	return rd
}

// turn decides by the other drains' turns (see Turns), when they are
// known: behind (v) while the drains before this one wait on the PDB's
// room, up to turnGrace; turns tells whether they were known and are
// heeded (then no jitter), v admitted that the pod may go.
func (rd *reading) turn() (turns bool, v verdict, why string) {
	r, key, now := rd.r, rd.key, rd.now
	if r.turns == nil {
		return false, admitted, ""
	}
	ahead, ok := r.turns.Ahead(key, r.dis.doneUnder(key))
	if !ok && r.pending.Has(key) {
		// this drain's announcement is on its way: its turn is known
		// soon (turnGrace at most)
		since, waiting := r.behind[key]
		if !waiting {
			r.behind[key] = now
		}
		if !waiting || now.Sub(since) < turnGrace {
			return false, behind, fmt.Sprintf("%s (announcing this drain to the others)", key)
		}
	}
	if !ok {
		return false, admitted, ""
	}
	since, waiting := r.behind[key]
	if ahead >= int(rd.room) && (!waiting || now.Sub(since) < turnGrace) {
		if !waiting {
			r.behind[key] = now
		}
		return false, behind, fmt.Sprintf("%s (its room %d, %d pods of drains before this one wait on it)", key, rd.room, ahead)
	}
	turns = !waiting || now.Sub(since) < turnGrace
	if !turns && ahead >= int(rd.room) && !r.lapsed[key] {
		// said once per round: the pods below go on the jitter
		r.lapsed[key] = true
		cluster.Logger(r.ctx).InfoContext(r.ctx, "drains before this one left the PDB's room untaken: evicting on a jitter",
			"pdb", key, "room", rd.room, "waitingAhead", ahead, "waited", now.Sub(since).Round(time.Millisecond).String())
	}
	return turns, admitted, ""
}

// jittered is, without turns, why the pod waits its jitter ("" when it
// goes now): on the drain's first eviction against the PDB, and on each
// room once another drain's eviction showed in its status, when the PDB
// expects pods of other nodes (here is counted only then: take runs on
// every wake).
func (rd *reading) jittered() string {
	r, pdb := rd.r, rd.pdb
	if r.tried[rd.key] && !r.contended[rd.key] {
		return ""
	}
	here := r.here(pdb, rd.present)
	if pdb.Status.ExpectedPods <= here || rd.room >= pdb.Status.ExpectedPods {
		return ""
	}
	others := pdb.Status.ExpectedPods - here
	at, drawn := r.jitter[rd.p.UID]
	if !drawn {
		window := min(jitterCap, raceSpacing*time.Duration(others)/time.Duration(rd.room))
		at = rd.now.Add(rand.N(window) + 1)
		r.jitter[rd.p.UID] = at
	}
	if rd.now.Before(at) {
		return fmt.Sprintf("%s (shared with %d pods of other nodes)", rd.key, others)
	}
	delete(r.jitter, rd.p.UID)
	return ""
}

// send takes the disruption for the pod's eviction: counted as taken, the
// PDB's one eviction in flight.
func (rd *reading) send() token {
	r, key := rd.r, rd.key
	if rd.taken == nil {
		rd.taken = map[string]time.Time{}
		r.taken[key] = rd.taken
	}
	rd.taken[rd.p.Name] = rd.now
	r.inflight[key] = true
	r.tried[key] = true
	delete(r.behind, key)
	delete(r.lapsed, key)
	return token{pdb: key, pod: rd.p.Name}
}

// here counts the drain's pods on the node (present) that pdb selects.
func (r *run) here(pdb *policyv1.PodDisruptionBudget, present map[string]bool) int32 {
	n := int32(0)
	for _, p := range r.want {
		if p.Namespace == pdb.Namespace && present[p.Namespace+"/"+p.Name] && r.sel.selects(pdb, p) {
			n++
		}
	}
	return n
}

// presentNames is the set of pods (namespace/name) on the node.
func (r *run) presentNames() map[string]bool {
	out := map[string]bool{}
	for _, o := range r.pods.Store().List() {
		p := o.(*corev1.Pod)
		out[p.Namespace+"/"+p.Name] = true
	}
	return out
}
