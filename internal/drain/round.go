package drain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// drainPods is one round of Drain: the planned pods, evicted tier by tier
// and waited for; read is the plan's list of the node's pods, where the
// watch of them starts.
func (d *Drainer) drainPods(ctx context.Context, node string, pods []corev1.Pod, read *corev1.PodList) Result {
	var res Result
	plan := Plan{TierOther: pods}
	if !d.opts.Unordered {
		plan = d.Order(ctx, pods)
	}
	cluster.Logger(ctx).InfoContext(ctx, "drain plan", "node", node, "pods", len(pods), "tiers", plan.String(), "dryRun", d.opts.DryRun)
	if d.opts.DryRun {
		for _, p := range pods {
			res.Remaining = append(res.Remaining, Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Reason: "dry run: would evict"})
		}
		return res
	}
	d.phase(PhasePlanned, "%d pods: %s", len(pods), plan.Sizes())
	r := d.start(ctx, node, pods, read)
	defer r.stop()
	d.phase(PhaseWatching, "the node's pods, the PDBs of %s", r.pdbScope)
	var wg sync.WaitGroup
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
	wg.Wait()
	res = tally(r, pods, r.waitGone(ctx))
	d.phase(PhaseGone, "%d of %d pods gone", len(res.Evicted), len(pods))
	return res
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
