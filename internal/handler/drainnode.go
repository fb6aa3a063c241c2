package handler

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/drain"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/internal/node"
)

// nodeDrain is the graceful drain of a node, shared by the terminate hook's
// path and the advisory ones: mark, evict, wait for the pods to go and for
// their volumes to be detached (volumes.go); a dry run plans it (dryrun.go).
type nodeDrain struct{ *invocation }

// drainNode marks the node for cause (until expires, if not zero), evicts its
// pods until deadline (or this invocation's budget) and waits for their
// volumes to be detached. It reports whether the node is fully drained; what
// remains is in r.out.Remaining.
func (r *nodeDrain) drainNode(ctx context.Context, n *corev1.Node, cause node.Cause, expires, deadline time.Time) (bool, error) {
	if r.h.cfg.DryRun {
		r.afterMark(ctx)
		return r.planDrain(ctx, n, cause, deadline)
	}
	owned, err := r.mark(ctx, n, cause, expires)
	if err != nil {
		return false, err
	}
	r.afterMark(ctx)
	r.drainConditions(ctx, n, owned, node.PhaseDraining, cause)
	done, err := r.evictAndWait(ctx, n, cause, deadline)
	if done {
		r.drainConditions(ctx, n, owned, node.PhaseDrained, cause)
	}
	return done, err
}

// evictAndWait is drainNode's evictions, once the node is marked: evict
// its pods until deadline (or this invocation's budget) and wait for their
// volumes to be detached; it reports whether the node is fully drained.
func (r *nodeDrain) evictAndWait(ctx context.Context, n *corev1.Node, cause node.Cause, deadline time.Time) (bool, error) {
	end := deadline      // the drain's own, past this invocation's budget: the pod policy's
	drainEnd := deadline // the drain's own, before this invocation's budget bounds it
	if budget := r.budget(ctx); budget.Before(deadline) {
		deadline = budget
	}
	// a dead kubelet cannot finish its pods: evict them (their controllers
	// create replacements elsewhere), wait a short window, and leave the
	// volumes to the abrupt path once EC2 says the instance is down. Dead is
	// NotReady and a stale kubelet Lease, read now: one read of the Ready
	// condition is a blip as often as a death (rule 16)
	dead := !node.Ready(n) && !r.h.cfg.DryRun && r.kubeletDead(ctx, n.Name)
	windowEnd := r.h.now().Add(r.h.cfg.DeadNodeEvictionWindow)
	windowed := dead && windowEnd.Before(deadline) // the drain ends with the window
	if windowed {
		deadline, end = windowEnd, windowEnd
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if !dead && !r.waitLB(dctx, n, cause, drainEnd, deadline) { // a dead node serves no load balancer
		return false, nil
	}
	r.step(StepEvicting, "until %s", deadline.UTC().Format(time.RFC3339))
	drainer := r.drainer(cause, dead, n.Name, end, startTeller(ctx, r.invocation, n))
	res, err := drainer.Drain(dctx, n.Name)
	listed := r.h.now() // the drain's last act: its list of the node's pods (rule 15)
	r.evicted(res)
	if err != nil {
		return false, fmt.Errorf("draining node %s: %w", n.Name, err)
	}
	r.out.Action = ActionDrained
	// the window is spent when the drain ran to it: its context ended at the
	// window's end (the injected clock may read a hair before it)
	spent := !r.h.now().Before(windowEnd) || windowed && dctx.Err() != nil
	if dead && cause == node.CauseTerminate && spent && r.stillDead(ctx, n.Name) {
		r.out.Detail = strings.TrimSpace(r.out.Detail + " node NotReady (kubelet dead): pods evicted, not waited for past DEAD_NODE_EVICTION_WINDOW; volumes are released when EC2 reports the instance down")
		r.record(ctx, n, node.EventDrainCompletedDeadKubelet(len(res.Evicted), r.out.Remaining))
		r.drainEnded() // its end told (Node Drained) and measured, as a live node's
		return true, nil
	}
	if !res.Done() {
		return false, nil
	}
	if len(res.Evicted) > 0 {
		r.recordSoon(ctx, n, node.EventDrainCompleted(r.out.Evicted))
	}
	if dead {
		r.drainEnded()
		return true, nil // no kubelet unmounts them: the abrupt path releases the volumes
	}
	return r.detachedAndEmpty(ctx, drainer, n, res.Claims, deadline, listed)
}

// mark marks the node for cause (until expires, if not zero): cordon, the
// drain's taint, the load-balancer exclusion; with NODE_CONDITIONS, the
// drain's Node conditions taken as node-drainer's unless another writer's
// are there. owned says that they are node-drainer's to write.
func (r *nodeDrain) mark(ctx context.Context, n *corev1.Node, cause node.Cause, expires time.Time) (owned bool, err error) {
	mark := node.Mark{Cause: cause, Expires: expires, Cordon: true, ExcludeLB: true, Draining: true, Conditions: r.h.cfg.NodeConditions}
	if cause == node.CauseTerminate && !r.fromSweep && !r.ev.Time.IsZero() {
		// a terminate hold from before this action's event is an earlier
		// action's (an instance back from a warm pool whose hold was not
		// lifted): its Since restarts, so that a sweep resuming this drain
		// counts from it (resumeStart). Not past this drain's start: a
		// hold this action placed is never renewed. The sweep knows no
		// event time, and renews nothing.
		renew := r.ev.Time.Add(-markSkew)
		if r.started.Before(renew) {
			renew = r.started
		}
		mark.Renew = renew
	}
	made, err := node.ApplyTo(ctx, r.h.c.Kube, n, mark, r.h.now(), r.h.cfg.DryRun)
	if err != nil {
		return false, err
	}
	before, _ := node.Marks(n)
	r.step(StepMarked, "cordon, taint %s, load-balancer exclusion (changed now: %v)", node.TaintDraining, made.Any())
	if made.Any() {
		r.marked = true
		r.record(ctx, n, node.EventDrainStarted(r.ev.DetailType))
	}
	return made.Conditions || before.Owned.Conditions, nil
}

// evicted puts in the outcome what the drain evicted, and what remains
// after this attempt (an earlier attempt's list is stale).
func (r *nodeDrain) evicted(res drain.Result) {
	r.step(StepEvicted, "%d evicted, %d remaining", len(res.Evicted), len(res.Remaining))
	for _, p := range res.Evicted {
		r.out.Evicted = append(r.out.Evicted, p.String())
	}
	r.out.Remaining = nil
	for _, p := range res.Remaining {
		r.out.Remaining = append(r.out.Remaining, p.String()+": "+p.Reason)
	}
}

// detachedAndEmpty waits for the drained node's volumes to be detached, and
// says whether it is drained: done means read again (rule 15) at the moment
// of completing — when the volumes took a while since the drain last listed
// the node's pods (listed), a pod bound meanwhile (straight to the node) is
// drained too, by the next try.
func (r *nodeDrain) detachedAndEmpty(ctx context.Context, drainer *drain.Drainer, n *corev1.Node, claims []string, deadline, listed time.Time) (bool, error) {
	err := r.waitVolumes(ctx, n, claims, deadline)
	if err == nil && r.h.now().Sub(listed) >= listFresh {
		late, _, err := drainer.Plan(ctx, n.Name)
		if err != nil {
			return false, err
		}
		if len(late) > 0 {
			names := make([]string, len(late))
			for i, p := range late {
				names[i] = p.Namespace + "/" + p.Name
			}
			r.log.InfoContext(ctx, "pods bound to the node while its volumes detached: draining them too", "node", n.Name, "pods", names)
			return false, nil
		}
	}
	if err == nil {
		r.drainEnded()
	}
	return true, err
}

// listFresh is how old the drain's last list of the node's pods may be when
// the hook is completed as drained: past it, the pods are listed again.
const listFresh = 500 * time.Millisecond

// stillDead reads again, at the moment of completing a dead node's drain,
// that it is dead: a kubelet back within DEAD_NODE_EVICTION_WINDOW runs its
// pods again, and its drain goes on as a live node's (not done). An
// unreadable node counts as alive: nothing is completed on a guess.
func (r *nodeDrain) stillDead(ctx context.Context, name string) bool {
	cur, err := node.Get(ctx, r.h.c.Kube, name)
	if err == nil && !node.Ready(cur) && r.kubeletDead(ctx, name) {
		return true
	}
	r.log.InfoContext(ctx, "node no longer looks dead at the end of DEAD_NODE_EVICTION_WINDOW: drained as a live node", "error", err)
	return false
}

// kubeletDead reports whether the node's kubelet stopped renewing its Lease
// NODE_LEASE_STALE_AFTER ago or more (or has none). A Lease that cannot be
// read says nothing: the kubelet is taken for alive, and its pods are waited
// for as on any node.
func (r *nodeDrain) kubeletDead(ctx context.Context, name string) bool {
	renewed, err := node.KubeletRenewed(ctx, r.h.c.Kube, name)
	if err != nil {
		r.log.WarnContext(ctx, "node NotReady and its kubelet Lease unreadable: drained as a live node", "error", err)
		return false
	}
	age := r.h.now().Sub(renewed)
	if age < r.h.cfg.NodeLeaseStaleAfter {
		r.log.InfoContext(ctx, "node NotReady but its kubelet renews its Lease: drained as a live node", "leaseRenewedAgo", age.Round(time.Second).String())
		return false
	}
	return true
}

// drainer is the node's Drainer, for a drain that ends at end; onEvicted
// (nil: none) is told of each eviction accepted.
func (r *nodeDrain) drainer(cause node.Cause, dead bool, nodeName string, end time.Time, onEvicted func(drain.Pod)) *drain.Drainer {
	o := drain.Options{
		GracePeriodSeconds: -1,
		EvictUnmanaged:     r.h.cfg.EvictUnmanagedPods,
		DryRun:             r.h.cfg.DryRun,
		OnPDBWait:          r.pdbWait,
		OnEvicted:          onEvicted,
		OnPhase:            func(p drain.Phase, detail string) { r.step(string(p), "%s", detail) },
		CriticalPriority:   r.h.cfg.CriticalPriority,
		Unordered:          dead, // a dead kubelet ends no pod: tiers would never end
		Clock:              r.h.clock,
		Policy:             r.podPolicy(cause), // POD_POLICY
		Deadline:           end,
	}
	if !dead {
		// a live node's volumes are waited for once its pods are gone: read
		// them beside the drain's last listing of the pods
		o.AfterGone = func(ctx context.Context) { r.readAttachmentsSoon(ctx, nodeName) }
	}
	o.GraceCap = graceCap(r.h.cfg, cause) // a warning's drain must fit its notice
	if r.claimed != nil {
		// drains that hold leases take turns on the PDBs they share
		o.Turns = lease.NewTurns(r.claimed)
	}
	return drain.New(r.h.c.Kube, o, nil)
}
