package drain

import (
	"context"
	"fmt"
	"strings"
	"sync"
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
		if pdb.Namespace == p.Namespace && r.sel.selects(pdb, p) {
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
		if pdb.Namespace == p.Namespace && r.sel.selects(pdb, p) {
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

// selectors are the PDBs' selectors, each parsed once per generation of
// its spec: parsing validates each label key with a regexp, and take looks
// at every PDB each time a pod's eviction may go.
type selectors struct {
	mu     sync.Mutex
	parsed map[string]parsed // by PDB (namespace/name)
}

// selects is covers, with the PDB's selector parsed once per generation.
func (s *selectors) selects(pdb *policyv1.PodDisruptionBudget, p corev1.Pod) bool {
	key := pdb.Namespace + "/" + pdb.Name
	s.mu.Lock()
	c, ok := s.parsed[key]
	if !ok || c.uid != pdb.UID || c.gen != pdb.Generation {
		c = parsed{uid: pdb.UID, gen: pdb.Generation}
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil {
			c.sel = sel
		}
		if s.parsed == nil {
			s.parsed = map[string]parsed{}
		}
		s.parsed[key] = c
	}
	s.mu.Unlock()
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
		w := wakes{pdbs: r.pdbs.Changed(), pods: r.pods.Changed(), freed: r.freed.C(), turns: turnsChanged(r.turns), state: r.change.C()}
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
		if v == admitted {
			return tk, nil
		}
		if v == held {
			r.set(p.UID, stateBlocked, nil)
			if !*logged {
				*logged = true
				cluster.Logger(ctx).InfoContext(ctx, "eviction waits for PodDisruptionBudget", "pod", p.Namespace+"/"+p.Name, "pdbs", blocking)
			}
		}
		if err := r.await(ctx, w, v, tk, p, blocking); err != nil {
			return token{}, err
		}
	}
}

// wakes are what may change a take's verdict, read before the take: a
// change after it has closed one of them.
type wakes struct{ pdbs, pods, freed, turns, state <-chan struct{} }

// await waits until the verdict take gave p (blocking: what it waits on)
// may have changed; its error is why the pod is not evicted when ctx ends
// first.
func (r *run) await(ctx context.Context, w wakes, v verdict, tk token, p corev1.Pod, blocking string) error {
	var after <-chan time.Time
	var also1, also2 <-chan struct{}
	var ended error
	switch v {
	case deferred:
		// its turn comes at its jitter, unless another drain takes the
		// allowance first (the PDB's status says so)
		r.mu.Lock()
		wait := r.jitter[p.UID].Sub(r.clock.Now())
		r.mu.Unlock()
		after = r.clock.After(wait)
		ended = timedOut{fmt.Errorf("not evicted: the drain ended while it waited its turn against %s", blocking)}
	case behind:
		// its turn comes when the drains before it took the room, or
		// after turnGrace if none of them does; or an announcement ended
		r.mu.Lock()
		wait := turnGrace - r.clock.Since(r.behind[tk.pdb])
		r.mu.Unlock()
		after = r.clock.After(max(wait, time.Millisecond))
		also1, also2 = w.turns, w.state
		ended = timedOut{fmt.Errorf("not evicted: the drain ended while it waited behind other drains' evictions against %s", blocking)}
	case queued:
		// its turn comes when the eviction in flight returns
		also1 = w.freed
		ended = timedOut{fmt.Errorf("not evicted: the drain ended while it waited for another eviction against %s", blocking)}
	default: // held
		after = r.clock.After(takenTTL) // a local re-check: an old taken entry may lapse
		ended = fmt.Errorf("%w (%s): no disruption allowed", ErrBlockedByPDB, blocking)
	}
	select {
	case <-ctx.Done():
		return ended
	case <-after:
	case <-also1:
	case <-also2:
	case <-w.pdbs:
	case <-w.pods:
	}
	return nil
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

// disruptions are, per PDB (namespace/name), every pod its watched
// statuses listed in disruptedPods: the other drains' pods done with it.
type disruptions struct {
	mu   sync.Mutex
	seen map[string]sets.Set[string]
}

// record remembers the pods pdb's status lists as disrupted.
func (d *disruptions) record(pdb *policyv1.PodDisruptionBudget) {
	if len(pdb.Status.DisruptedPods) == 0 {
		return
	}
	key := pdb.Namespace + "/" + pdb.Name
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil {
		d.seen = map[string]sets.Set[string]{}
	}
	seen := d.seen[key]
	if seen == nil {
		seen = sets.New[string]()
		d.seen[key] = seen
	}
	for name := range pdb.Status.DisruptedPods {
		seen.Insert(name)
	}
}

// doneUnder reports, for a pod under the PDB key, whether a status of the
// PDB listed it as disrupted.
func (d *disruptions) doneUnder(key string) func(pod string) bool {
	d.mu.Lock()
	seen := d.seen[key].Clone()
	d.mu.Unlock()
	return seen.Has
}
