package drain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// drainPods is one round of Drain: the planned pods, evicted tier by tier
// and waited for; read is the plan's list of the node's pods, where the
// watch of them starts. The pods the policy holds (protect) are kept, or
// evicted last, each at its own moment.
func (d *Drainer) drainPods(ctx context.Context, node string, pods []corev1.Pod, read *corev1.PodList) Result {
	pods, last, kept := d.opts.protect(pods)
	res := Result{Remaining: kept}
	plan := d.order(ctx, pods, last)
	cluster.Logger(ctx).InfoContext(ctx, "drain plan", "node", node, "pods", len(pods)+len(last)+len(kept), "tiers", plan.String(), "dryRun", d.opts.DryRun)
	want := slices.Concat(pods, last)
	if d.opts.DryRun {
		for _, p := range want {
			res.Remaining = append(res.Remaining, Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Reason: "dry run: would evict"})
		}
		return res
	}
	if len(want) == 0 {
		return res // every pod kept by the policy: nothing to evict or watch
	}
	d.phase(PhasePlanned, "%d pods: %s", len(want), plan.Sizes())
	r := d.start(ctx, node, want, read)
	defer r.stop()
	d.phase(PhaseWatching, "the node's pods, the PDBs of %s", r.pdbScope)
	var wg sync.WaitGroup
	tiersDone := make(chan struct{})
	for _, p := range last {
		wg.Go(func() { r.done(p.UID, d.evictLast(ctx, r, p, tiersDone)) })
	}
	d.evictTiers(ctx, r, plan, &wg)
	close(tiersDone)
	wg.Wait()
	round := tally(r, want, r.waitGone(ctx))
	res.Evicted, res.Remaining = round.Evicted, append(res.Remaining, round.Remaining...)
	d.phase(PhaseGone, "%d of %d pods gone", len(res.Evicted), len(want))
	return res
}

// evictTiers evicts the plan's tiers one after the other (the pods of one
// concurrently, on wg), each once the pods of the one before are gone,
// blocked or failed, until ctx ends.
func (d *Drainer) evictTiers(ctx context.Context, r *run, plan Plan, wg *sync.WaitGroup) {
	var started []corev1.Pod // the pods of the tiers started
	tiersLeft := 0
	for _, t := range Tiers {
		if len(plan[t]) > 0 {
			tiersLeft++
		}
	}
	for _, t := range Tiers {
		if len(plan[t]) == 0 || ctx.Err() != nil {
			continue // a tier not started by the end: its pods stay pending
		}
		grace := d.tierGrace(ctx, tiersLeft)
		tiersLeft--
		started = append(started, plan[t]...)
		r.announce(started)
		for _, p := range plan[t] {
			r.set(p.UID, stateStarted, nil)
			wg.Go(func() { r.done(p.UID, d.evict(ctx, r, p, grace)) })
		}
		r.waitTier(ctx, plan[t])
	}
}

// tally is the round's result: each of its pods gone (evicted) or
// remaining, with why; werr is the pods' watch's error, if it failed.
func tally(r *run, pods []corev1.Pod, werr error) Result {
	var res Result
	gone := r.goneNow()
	for _, p := range pods {
		pp := Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
		st, reason := r.get(p.UID)
		if gone(p.UID) {
			res.Evicted = append(res.Evicted, pp)
			continue
		}
		pp.Err = reason
		switch {
		case pp.Err != nil:
		case st == statePending:
			pp.Err = timedOut{errors.New("not evicted: the drain ended before its tier started")}
		case werr != nil:
			pp.Err = fmt.Errorf("evicted, not watched to the end: %w", werr)
		default:
			pp.Err = timedOut{errors.New("evicted, still terminating")}
		}
		pp.Reason = pp.Err.Error()
		res.Remaining = append(res.Remaining, pp)
	}
	return res
}

// tierGrace caps the grace period of a tier's pods (0: each pod's own or
// the configured one): GraceCap, and, when ctx has a deadline, the share of
// the time left that this tier and those after it each get.
func (d *Drainer) tierGrace(ctx context.Context, tiersLeft int) time.Duration {
	limit := d.opts.GraceCap
	if limit <= 0 {
		return 0
	}
	if dl, ok := ctx.Deadline(); ok && tiersLeft > 0 {
		if share := dl.Sub(d.opts.Clock.Now()) / time.Duration(tiersLeft); share < limit {
			limit = share
		}
	}
	return max(limit, time.Second)
}
