package drain

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// turnsChanged is closed when the other drains' announcements change (never
// without turns).
func turnsChanged(t Turns) <-chan struct{} {
	if t == nil {
		return nil
	}
	return t.Changed()
}

// announce tells the other drains (Turns) this drain's pods under PDBs that
// pods of other nodes share, among pods, those of the tiers started: in the
// background, the evictions do not wait for it. An announcement that fails
// is logged; the drain goes on with its jitter alone.
func (r *run) announce(pods []corev1.Pod) {
	if r.turns == nil {
		return
	}
	shared := r.shared(pods)
	if len(shared) == 0 {
		return
	}
	r.mu.Lock()
	r.announcing++
	r.pending.Insert(slices.Collect(maps.Keys(shared))...)
	r.mu.Unlock()
	go func() {
		r.annTurn <- struct{}{}
		defer func() { <-r.annTurn }()
		defer func() {
			r.mu.Lock()
			if r.announcing--; r.announcing == 0 {
				r.pending.Clear()
			}
			r.mu.Unlock()
			r.change.Broadcast()
		}()
		text := fmt.Sprint(shared) // maps print sorted
		if text == r.announced || r.ctx.Err() != nil {
			return
		}
		if err := r.turns.Announce(r.ctx, shared); err != nil {
			if r.ctx.Err() == nil {
				cluster.Logger(r.ctx).WarnContext(r.ctx, "evicting without turns: the other drains were not told of this one", "error", err)
			}
			return
		}
		r.announced = text
	}()
}

// shared lists, by PDB, the pods (still on the node, Ready) under a PDB that
// expects pods on other nodes, as the PDBs' watch has them; nothing when
// the PDBs are not watched.
func (r *run) shared(pods []corev1.Pod) map[string][]string {
	if !r.pdbs.Synced() || r.pdbs.Err() != nil {
		return nil
	}
	present := r.presentNames()
	out := map[string][]string{}
	for _, p := range pods {
		if !present[p.Namespace+"/"+p.Name] || !gated(r.current(p)) {
			continue
		}
		pdbs := r.covering(p)
		if len(pdbs) != 1 || pdbs[0].Status.ExpectedPods <= r.here(pdbs[0], present) {
			continue
		}
		key := pdbs[0].Namespace + "/" + pdbs[0].Name
		out[key] = append(out[key], p.Name)
	}
	return out
}
