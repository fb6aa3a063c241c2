package handler

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/node"
)

// StepLBWait is the timeline's step of the load balancer's wait.
const StepLBWait = "lb-wait"

// waitLB waits, before the first eviction, until LB_DRAIN_WAIT has passed
// since the node was excluded from external load balancers (mark: the
// label is set with the cordon and the drain's taint, whose TimeAdded says
// when), so that its targets deregister and their connections drain while
// its pods still serve. A retry or a continuation of the drain waits only
// what is left of it. The wait is the drain's own time: it ends at the
// drain's deadline (drainEnd) at the latest — for a warning's drain, soon
// enough that its pods keep their grace period within the notice
// (graceCap) — and at limit (the invocation's budget, rule 16): cut there,
// it says false, nothing is evicted, and the drain's next try or
// continuation waits the rest. The hook is heartbeated meanwhile, as
// through the whole drain (drainKeptAlive, rules 3 and 17). ok false: the
// wait did not end (cut, or ctx ended).
func (r *nodeDrain) waitLB(ctx context.Context, n *corev1.Node, cause node.Cause, drainEnd, limit time.Time) (ok bool) {
	w := r.h.cfg.LBDrainWait
	if w <= 0 {
		return true
	}
	now := r.h.now()
	until := excludedSince(n, now).Add(w)
	if gc := graceCap(r.h.cfg, cause); gc > 0 && until.After(drainEnd.Add(-gc)) {
		until = drainEnd.Add(-gc)
	}
	if until.After(drainEnd) {
		until = drainEnd
	}
	if !until.After(now) {
		return true
	}
	end := until
	if limit.Before(end) {
		end = limit
	}
	r.step(StepLBWait, "excluded from load balancers: evictions wait until %s (LB_DRAIN_WAIT %s)", until.UTC().Format(time.RFC3339), w)
	select {
	case <-ctx.Done():
		return false
	case <-r.h.clock.After(end.Sub(now)):
	}
	if end.Before(until) {
		r.out.Detail = fmt.Sprintf("waiting for the load balancers until %s (LB_DRAIN_WAIT): the invocation's time ran out first", until.UTC().Format(time.RFC3339))
		return false
	}
	return ctx.Err() == nil
}

// excludedSince is when n was excluded from load balancers by a drain: its
// drain taint's TimeAdded (set with the label); now when n (as read before
// its mark) had none.
func excludedSince(n *corev1.Node, now time.Time) time.Time {
	for _, t := range n.Spec.Taints {
		if t.Key == node.TaintDraining && t.TimeAdded != nil && t.TimeAdded.Time.Before(now) {
			return t.TimeAdded.Time
		}
	}
	return now
}

// lbWaitPlan is what a dry run says of the load balancer's wait ("": none;
// a node not Ready is drained as a dead kubelet's may be, with no wait).
func lbWaitPlan(w time.Duration, ready bool) string {
	if w <= 0 || !ready {
		return ""
	}
	return fmt.Sprintf("would exclude the node from external load balancers (%s, with the cordon) and wait %s (LB_DRAIN_WAIT) before the first eviction, within the drain's deadline",
		node.LabelExcludeLB, w)
}
