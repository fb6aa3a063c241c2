package drain

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// covering lists the PDBs (from the watch) that select the pod.
func (r *run) covering(p corev1.Pod) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for _, o := range r.pdbs.List() {
		pdb := o.(*policyv1.PodDisruptionBudget)
		if pdb.Namespace == p.Namespace && r.selects(pdb, p) {
			out = append(out, pdb)
		}
	}
	return out
}

// coversAny reports whether obj, a PDB, selects one of the drain's pods:
// only a change of such a PDB wakes the pods waiting on the PDBs.
func (r *run) coversAny(obj any) bool {
	pdb, ok := obj.(*policyv1.PodDisruptionBudget)
	if !ok {
		return true
	}
	for _, p := range r.want {
		if pdb.Namespace == p.Namespace && r.selects(pdb, p) {
			return true
		}
	}
	return false
}

// parsed is a PDB's selector, parsed for one generation of its spec.
type parsed struct {
	uid types.UID
	gen int64
	sel labels.Selector // nil: the selector is invalid, it selects nothing
}

// selects is covers, with each PDB's selector parsed once per generation:
// parsing validates each label key with a regexp, and take looks at every
// PDB each time a pod's eviction may go.
func (r *run) selects(pdb *policyv1.PodDisruptionBudget, p corev1.Pod) bool {
	key := pdb.Namespace + "/" + pdb.Name
	r.selMu.Lock()
	c, ok := r.sels[key]
	if !ok || c.uid != pdb.UID || c.gen != pdb.Generation {
		c = parsed{uid: pdb.UID, gen: pdb.Generation}
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil {
			c.sel = sel
		}
		r.sels[key] = c
	}
	r.selMu.Unlock()
	return c.sel != nil && c.sel.Matches(labels.Set(p.Labels))
}

// blockers names the PDBs that cover the pod, for the log and the reason;
// "unknown" when the PDBs could not be watched.
func (r *run) blockers(p corev1.Pod) string {
	if !r.pdbs.Synced() {
		return "unknown"
	}
	var names []string
	for _, pdb := range r.covering(p) {
		names = append(names, fmt.Sprintf("%s/%s (disruptions allowed %d)", pdb.Namespace, pdb.Name, pdb.Status.DisruptionsAllowed))
	}
	if len(names) == 0 {
		return "none matching"
	}
	return strings.Join(names, ", ")
}

// gated reports whether the eviction API would refuse the pod for its PDB's
// sake alone: a Ready pod that is not terminating. An unready pod may be
// evicted under the PDB's unhealthy-pod policy, a terminal or terminating
// one always: those are tried at once.
func gated(p corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// admit waits until the eviction of p may be tried: when exactly one PDB
// covers a Ready pod, until that PDB allows a disruption that no eviction of
// this drain has taken yet, and no other eviction of this drain against it
// is in flight. Without the PDBs' watch (not synced, refused), it admits at
// once: the eviction API still decides, and a 429 is waited on. The token
// is given back (release) when the eviction returns.
func (r *run) admit(ctx context.Context, p corev1.Pod, logged *bool) (token, error) {
	for {
		pdbC, podsC, freedC, turnsC, stateC := r.pdbs.Changed(), r.pods.Changed(), r.freed.C(), r.turnsChanged(), r.change.C()
		if r.gone(p) {
			// gone while it waited (force-deleted by the abrupt path, deleted
			// by a person or its controller): nothing left to evict, and a
			// PDB that never changes must not hold the drain to its deadline
			return token{}, errGone
		}
		tk, v, blocking := r.take(p)
		if v != held {
			// a pod no PDB holds is started (queued too: the next tier
			// waits for it)
			if st, _ := r.get(p.UID); st == stateBlocked {
				r.set(p.UID, stateStarted, nil)
			}
		}
		switch v {
		case admitted:
			return tk, nil
		case deferred:
			// its turn comes at its jitter, unless another drain takes the
			// allowance first (the PDB's status says so)
			r.mu.Lock()
			wait := r.jitter[p.UID].Sub(r.clock.Now())
			r.mu.Unlock()
			select {
			case <-ctx.Done():
				return token{}, timedOut{fmt.Errorf("not evicted: the drain ended while it waited its turn against %s", blocking)}
			case <-r.clock.After(wait):
			case <-pdbC:
			case <-podsC:
			}
			continue
		case behind:
			// its turn comes when the drains before it took the room, or
			// after turnGrace if none of them does
			r.mu.Lock()
			wait := turnGrace - r.clock.Since(r.behind[tk.pdb])
			r.mu.Unlock()
			select {
			case <-ctx.Done():
				return token{}, timedOut{fmt.Errorf("not evicted: the drain ended while it waited behind other drains' evictions against %s", blocking)}
			case <-r.clock.After(max(wait, time.Millisecond)):
			case <-turnsC:
			case <-stateC: // an announcement ended
			case <-pdbC:
			case <-podsC:
			}
			continue
		case queued:
			// its turn comes when the eviction in flight returns
			select {
			case <-ctx.Done():
				return token{}, timedOut{fmt.Errorf("not evicted: the drain ended while it waited for another eviction against %s", blocking)}
			case <-freedC:
			case <-pdbC:
			case <-podsC:
			}
			continue
		}
		r.set(p.UID, stateBlocked, nil)
		if !*logged {
			*logged = true
			cluster.Logger(ctx).InfoContext(ctx, "eviction waits for PodDisruptionBudget", "pod", p.Namespace+"/"+p.Name, "pdbs", blocking)
		}
		select {
		case <-ctx.Done():
			return token{}, fmt.Errorf("%w (%s): no disruption allowed", ErrBlockedByPDB, blocking)
		case <-pdbC:
		case <-podsC:
		case <-r.clock.After(takenTTL): // a local re-check: an old taken entry may lapse
		}
	}
}

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
	pdb := pdbs[0]
	key := pdb.Namespace + "/" + pdb.Name
	r.record(pdb) // a re-list's statuses reach the store, not the handler
	present := r.presentNames()
	now := r.clock.Now()
	for name := range pdb.Status.DisruptedPods {
		if !r.contended[key] && !r.mine[pdb.Namespace+"/"+name] {
			r.contended[key] = true // another drain evicts against it
		}
	}
	taken := r.taken[key]
	for name, at := range taken {
		if _, shown := pdb.Status.DisruptedPods[name]; shown || (!present[pdb.Namespace+"/"+name] && now.Sub(at) > takenTTL) {
			delete(taken, name)
		}
	}
	room := pdb.Status.DisruptionsAllowed - int32(len(taken))
	if pdb.Status.ObservedGeneration < pdb.Generation || room <= 0 {
		delete(r.jitter, p.UID) // the next allowance is a new round
		delete(r.behind, key)
		delete(r.lapsed, key)
		return token{}, held, fmt.Sprintf("%s (disruptions allowed %d, %d of them taken by this drain)", key, pdb.Status.DisruptionsAllowed, len(taken))
	}
	if r.inflight[key] {
		return token{}, queued, key
	}
	// the drains before this one first, when they are known (see Turns)
	turns := false
	if r.turns != nil {
		ahead, ok := r.turns.Ahead(key, r.doneUnder(key))
		if !ok && r.pending.Has(key) {
			// this drain's announcement is on its way: its turn is known
			// soon (turnGrace at most)
			since, waiting := r.behind[key]
			if !waiting {
				r.behind[key] = now
			}
			if !waiting || now.Sub(since) < turnGrace {
				return token{pdb: key}, behind, fmt.Sprintf("%s (announcing this drain to the others)", key)
			}
		}
		if ok {
			since, waiting := r.behind[key]
			if ahead >= int(room) && (!waiting || now.Sub(since) < turnGrace) {
				if !waiting {
					r.behind[key] = now
				}
				return token{pdb: key}, behind, fmt.Sprintf("%s (its room %d, %d pods of drains before this one wait on it)", key, room, ahead)
			}
			turns = !waiting || now.Sub(since) < turnGrace
			if !turns && ahead >= int(room) && !r.lapsed[key] {
				// said once per round: the pods below go on the jitter
				r.lapsed[key] = true
				cluster.Logger(r.ctx).InfoContext(r.ctx, "drains before this one left the PDB's room untaken: evicting on a jitter",
					"pdb", key, "room", room, "waitingAhead", ahead, "waited", now.Sub(since).Round(time.Millisecond).String())
			}
		}
	}
	// without turns, a jitter on the drain's first eviction against the
	// PDB, and on each room once another drain's eviction showed in its
	// status; here is counted only then (take runs on every wake)
	if (!r.tried[key] || r.contended[key]) && !turns {
		if here := r.here(pdb, present); pdb.Status.ExpectedPods > here && room < pdb.Status.ExpectedPods {
			others := pdb.Status.ExpectedPods - here
			at, drawn := r.jitter[p.UID]
			if !drawn {
				window := min(jitterCap, raceSpacing*time.Duration(others)/time.Duration(room))
				at = now.Add(rand.N(window) + 1)
				r.jitter[p.UID] = at
			}
			if now.Before(at) {
				return token{}, deferred, fmt.Sprintf("%s (shared with %d pods of other nodes)", key, others)
			}
			delete(r.jitter, p.UID)
		}
	}
	if taken == nil {
		taken = map[string]time.Time{}
		r.taken[key] = taken
	}
	taken[p.Name] = now
	r.inflight[key] = true
	r.tried[key] = true
	delete(r.behind, key)
	delete(r.lapsed, key)
	return token{pdb: key, pod: p.Name}, admitted, ""
}

// here counts the drain's pods on the node (present) that pdb selects.
func (r *run) here(pdb *policyv1.PodDisruptionBudget, present map[string]bool) int32 {
	n := int32(0)
	for _, p := range r.want {
		if p.Namespace == pdb.Namespace && present[p.Namespace+"/"+p.Name] && r.selects(pdb, p) {
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

// release ends the eviction tk was taken for, the next one against its PDB
// may go; refused, the disruption it took is given back.
func (r *run) release(tk token, refused bool) {
	if tk.pdb == "" {
		return
	}
	r.mu.Lock()
	delete(r.inflight, tk.pdb)
	if refused {
		delete(r.taken[tk.pdb], tk.pod)
	}
	r.mu.Unlock()
	r.freed.Broadcast()
}

// waitPDBChange waits, after a refusal, at least pause (the backoff's step,
// or the server's Retry-After), then until a PDB covering p has a new status
// or limit has passed since the refusal (a status seen stale). It reports
// false when ctx ended first. A pod that no PDB covers is tried again after
// pause. A pod gone meanwhile ends the wait (true).
func (r *run) waitPDBChange(ctx context.Context, p corev1.Pod, pause, limit time.Duration) bool {
	versions := func() string {
		var v []string
		for _, pdb := range r.covering(p) {
			v = append(v, fmt.Sprintf("%s@%s/%d", pdb.Name, pdb.ResourceVersion, pdb.Status.DisruptionsAllowed))
		}
		return strings.Join(v, ",")
	}
	before := versions()
	minT := r.clock.NewTimer(pause)
	defer minT.Stop()
	maxT := r.clock.NewTimer(max(pause, limit))
	defer maxT.Stop()
	paced := false
	for {
		pdbC, podsC := r.pdbs.Changed(), r.pods.Changed()
		if r.gone(p) {
			return true // gone meanwhile: the next try finds it so, whatever the PDB
		}
		if paced && (before == "" || versions() != before || r.pdbs.Err() != nil) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-maxT.C():
			return true
		case <-minT.C():
			paced = true
		case <-pdbC:
		case <-podsC:
		}
	}
}

// record remembers the pods pdb's status lists as disrupted.
func (r *run) record(pdb *policyv1.PodDisruptionBudget) {
	if len(pdb.Status.DisruptedPods) == 0 {
		return
	}
	key := pdb.Namespace + "/" + pdb.Name
	r.disMu.Lock()
	defer r.disMu.Unlock()
	seen := r.disrupted[key]
	if seen == nil {
		seen = sets.New[string]()
		r.disrupted[key] = seen
	}
	for name := range pdb.Status.DisruptedPods {
		seen.Insert(name)
	}
}

// doneUnder reports, for a pod under the PDB key, whether a status of the
// PDB listed it as disrupted.
func (r *run) doneUnder(key string) func(pod string) bool {
	r.disMu.Lock()
	seen := r.disrupted[key].Clone()
	r.disMu.Unlock()
	return seen.Has
}
