package handler

import (
	"context"
	"errors"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
)

// terminateHook is the path of an ASG terminate hook. From the moment the
// hook is known to be ours it is completed on every path, in this order:
// whose hook it is, the drain's start and deadline, the claim of the
// instance, the drain with the lease and the hook kept alive, then the end —
// completed as drained, handed over to a continuation, or completed with the
// failure result at the deadline.
type terminateHook struct {
	hook
	// deadline is the drain's: DRAIN_TIMEOUT from its start (a dry run:
	// dryRunLimit from now)
	deadline time.Time
	claim    *lease.Claim // the instance's lease (nil: none, or not needed)
}

// handle runs the terminate hook's path.
func (t *terminateHook) handle(ctx context.Context) error {
	inst, ours, err := t.whose(ctx)
	if !ours {
		return err // whose did what its verdict asks; err: a retry may tell
	}
	t.deadline = t.drainDeadline(ctx, inst)
	if end, err := t.claimInstance(ctx); end {
		return err
	}
	dctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	n, done, err := t.drainKeptAlive(dctx, stop, inst)
	if t.stopped(ctx, context.Cause(dctx)) {
		return nil
	}
	return t.settle(ctx, n, done, err)
}

// drainDeadline is the drain's deadline, from its start: for a hook the
// sweep took, or an event come late, that start is resumed from the node's
// mark (resumeStart).
func (t *terminateHook) drainDeadline(ctx context.Context, inst instance.Instance) time.Time {
	switch {
	case t.fromSweep:
		t.resumeStart(ctx, inst, time.Time{})
	case t.late():
		// a mark from before the event is an earlier action's (an
		// instance back from a warm pool), not this drain's start
		t.resumeStart(ctx, inst, t.ev.Time.Add(-markSkew))
	}
	timeout := policy{t.invocation}.timeout(ctx, t.act.ASG) // the group's tag, or DRAIN_TIMEOUT
	t.drainTimeout = timeout
	if t.h.cfg.DryRun {
		return t.h.now().Add(dryRunLimit) // plan, then complete at once (the outcome shows the group's policy)
	}
	return t.started.Add(timeout)
}

// claimInstance takes the instance's lease for the hook. end says that the
// path ends there, with err: a duplicate (another invocation holds or
// finished the instance: the outcome says so), or no lease, and then
// nothing was changed in the cluster.
func (t *terminateHook) claimInstance(ctx context.Context) (end bool, err error) {
	t.claim, err = t.invocation.claim(ctx, lease.Name(t.act.InstanceID), t.act.Token, t.deadline)
	switch {
	case err == nil:
		return false, nil
	case isDuplicate(err):
		return true, nil
	case !t.h.now().Before(t.deadline.Add(-time.Second)):
		// the lease was asked for until DRAIN_TIMEOUT (an apiserver that
		// does not answer): the hook is completed with the failure result
		// as any drain's at its deadline (rule 3)
		return true, t.drainFailed(ctx, nil, err)
	case t.canContinue(t.deadline):
		t.drainNotDone(err)
		return true, t.handOver(ctx, nil) // the next invocation asks for the lease again
	default:
		return true, err // a retry may get one
	}
}

// drainKeptAlive drains the node with the instance's lease and the hook
// kept alive meanwhile. A renewal that finds the lease taken by another
// invocation (ours lapsed) stops the drain through stop: two invocations
// never drain and complete one hook. So does a hook no longer active (it
// timed out, or was completed elsewhere): its instance is leaving without
// it, and the lease it holds would keep the sweep from releasing the node.
func (t *terminateHook) drainKeptAlive(ctx context.Context, stop context.CancelCauseFunc, inst instance.Instance) (*corev1.Node, bool, error) {
	stopLease := t.claim.KeepAlive(ctx, func(err error) {
		t.log.WarnContext(ctx, "lease renewal failed", "error", err)
		if errors.Is(err, lease.ErrHeld) {
			stop(err)
		}
	})
	t.claimed = t.claim
	stopHook := t.keepAlive(ctx, stop) // from now on: lookups that retry are heartbeated too
	t.onMarked = t.cordonBatch         // after this drain's mark, before its evictions (BATCH_CORDON)
	n, done, err := t.drainRetrying(ctx, inst)
	stopHook()
	stopLease()
	return n, done, err
}

// stopped says, and the outcome says why, that the drain was stopped from
// outside (cause): the lease lost to another invocation, which goes on with
// the drain; or the hook no longer active, and then the lease is given up
// as done, so that a late duplicate does nothing.
func (t *terminateHook) stopped(ctx context.Context, cause error) bool {
	switch {
	case errors.Is(cause, lease.ErrHeld):
		t.out.Action, t.out.Detail = ActionIgnored, "lease lost to another invocation, which goes on with the drain: "+cause.Error()
	case errors.Is(cause, errHookGone):
		t.out.Action, t.out.Detail = ActionIgnored, "drain stopped: "+cause.Error()
		t.giveUpLease(ctx, t.claim, t.act.Token)
	default:
		return false
	}
	return true
}

// settle ends the drain: the hook completed with CONTINUE when drained (or
// when a lookup succeeded and found no node: nothing to drain), handed over
// while a continuation may go on with it, or else — the drain's deadline,
// or the last invocation's budget, reached — completed with the failure
// result.
func (t *terminateHook) settle(ctx context.Context, n *corev1.Node, done bool, err error) error {
	switch {
	case n == nil && err == nil:
		return t.finish(ctx, lifecycle.Continue, nil)
	case done:
		return t.finish(ctx, lifecycle.Continue, n)
	case t.canContinue(t.deadline):
		t.drainNotDone(err)
		return t.handOver(ctx, n)
	}
	return t.drainFailed(ctx, n, err)
}

// finish completes the lifecycle action and marks it done in the lease, so
// a late duplicate of the event does nothing.
func (t *terminateHook) finish(ctx context.Context, result lifecycle.Result, n *corev1.Node) error {
	err := t.complete(ctx, result, n)
	done := t.act.Token
	if err != nil {
		done = "" // not completed: Lambda's retry of this event must find the lease free
	} else if n != nil && t.ev.Lifecycle.Destination == event.LocationWarmPool {
		t.holdOver(ctx, n)
	}
	t.giveUpLease(ctx, t.claim, done)
	return err
}

// holdOver records on the node of an instance sent into a warm pool, once
// its action is completed, that the drain's hold is over (node.EndHold):
// the node stays with the instance, held, and should it be scaled in again
// before that hold is lifted, the new drain counts DRAIN_TIMEOUT from its
// own start, not from this one's (resumeStart, rule 16). A failure is
// logged (a node gone has nothing to record): the hook is completed already.
func (t *terminateHook) holdOver(ctx context.Context, n *corev1.Node) {
	rctx, cancel := t.reserved(ctx)
	defer cancel()
	lctx, lcancel := context.WithTimeout(rctx, holdOverLimit)
	defer lcancel()
	if err := node.EndHold(lctx, t.h.c.Kube, n.Name, node.CauseTerminate, t.h.now(), t.h.cfg.DryRun); err != nil && !apierrors.IsNotFound(err) {
		t.log.WarnContext(ctx, "the drain's hold not recorded as over", "error", err)
	}
}

// holdOverLimit bounds holdOver.
const holdOverLimit = 2 * time.Second

// drainFailed completes the hook with the failure result: the drain's
// deadline (DRAIN_TIMEOUT) is reached, or the last continuation's budget.
func (t *terminateHook) drainFailed(ctx context.Context, n *corev1.Node, err error) error {
	t.fail(&Failure{Kind: ErrDrainFailed, Cause: err, Result: t.h.onFailure()})
	t.drainEnded()
	if err != nil {
		t.record(ctx, n, node.EventDrainFailed(err))
	} else {
		t.record(ctx, n, node.EventDrainBlocked(t.h.now().Sub(t.started), t.out.Remaining))
	}
	return t.finish(ctx, t.h.onFailure(), n)
}

// handOver gives the drain to a continuation: the lease given up (or, if
// the apiserver does not answer, left for the continuation to take from
// this invocation), the hook heartbeated, the function invoked again. A
// hand-over that fails is never a reason to complete the hook early: the
// invocation fails, Lambda retries it (its heartbeat just sent keeps the
// hook), and the hook's own timeout is the last backstop (rule 16).
func (t *terminateHook) handOver(ctx context.Context, n *corev1.Node) error {
	rctx, cancel := t.reserved(ctx)
	defer cancel()
	lctx, lcancel := context.WithTimeout(rctx, leaseHandOverLimit)
	if err := t.claim.Release(lctx, ""); err != nil {
		t.log.WarnContext(ctx, "could not give the lease up: the continuation takes it from this invocation", "error", err)
	}
	lcancel()
	// the holders the continuation may take the lease from: this
	// invocation; and when it never knowingly got the lease, those before
	// it too: one may hold it still, or this one's claim took it and its
	// answer was lost
	holders := []string{t.holder(ctx)}
	if t.claim == nil {
		holders = append(slices.Clone(t.predecessors), holders...)
	}
	if err := t.continueLater(rctx, n, holders); err != nil {
		t.fail(&Failure{Kind: ErrHandOver, Cause: err})
		return err
	}
	return nil
}

// leaseHandOverLimit bounds giving the lease up at a hand-over: the
// continuation may take it from this invocation (Continuation.Holder), so
// an apiserver that does not answer costs this much, not the margin.
const leaseHandOverLimit = 2 * time.Second

// resumeStart takes, for a lifecycle action the sweep found waiting (its
// event lost, its age unknown) or an event come late (a retry), the start of
// its drain from the node's own record: the terminate mark an earlier
// invocation placed. DRAIN_TIMEOUT then counts from there and does not
// restart at every sweep or retry (rule 16). A node that cannot be read, or
// carries no such mark, or one from before notBefore, or one whose action is
// over (Hold.Over: an earlier trip into a warm pool), leaves the start now.
func (t *terminateHook) resumeStart(ctx context.Context, inst instance.Instance, notBefore time.Time) {
	lctx, cancel := context.WithTimeout(ctx, resumeLookupLimit)
	defer cancel()
	n, err := node.Find(lctx, t.h.c.Kube, inst.PrivateDNSName, inst.ID)
	if err != nil {
		return
	}
	marks, _ := node.Marks(n)
	// a hold whose action is over (an earlier trip into a warm pool) is not
	// this drain's start
	if h, ok := marks.Causes[node.CauseTerminate]; ok && h.Over == nil && !h.Since.IsZero() && h.Since.Before(t.started) && !h.Since.Before(notBefore) {
		t.log.InfoContext(ctx, "drain resumed from the node's mark", "since", h.Since.UTC().Format(time.RFC3339))
		t.started = h.Since
	}
}

// late says that this first attempt came well after its event: Lambda's
// retry of an invocation that failed (a minute or more later), or a
// delivery held up. The drain may have begun already, and its start is read
// from the node's mark (resumeStart), so that DRAIN_TIMEOUT does not restart
// at each retry; an event on time costs no read.
func (t *terminateHook) late() bool {
	return t.attempt == 1 && !t.ev.Time.IsZero() && t.started.Sub(t.ev.Time) > lateAfter
}

// lateAfter is how long after its event an invocation is late: EventBridge
// delivers in seconds, Lambda retries a failed invocation a minute later.
const lateAfter = 30 * time.Second

// markSkew is how much earlier than its event a drain's mark may say it
// began: the event's time is AWS's clock, the mark the function's.
const markSkew = time.Minute

// resumeLookupLimit bounds resumeStart's reading of the node.
const resumeLookupLimit = 5 * time.Second

// drainRetrying finds the instance's node and drains it (or, for an instance
// already down, releases it), retrying every failure with capped, jittered
// backoff until deadline or this invocation's budget. Before the node is
// drained, nothing but a lookup that succeeded and found no node (n nil, err
// nil) ends it early: an apiserver that fails, throttles or times out is
// waited out, never taken for "no node", and a drain that ends with pods
// left while time remains (a refusal, a pod that would not go) is tried
// again, so an invocation hands over only once its budget is spent (rule
// 13). Every call it makes is bounded by that moment, not by the Lambda
// deadline: the hand-over keeps its time (rule 16). It returns the node
// (nil when unknown), whether the drain finished, and the last error when
// it did not.
func (t *terminateHook) drainRetrying(ctx context.Context, inst instance.Instance) (*corev1.Node, bool, error) {
	limit := t.budget(ctx)
	if t.deadline.Before(limit) {
		limit = t.deadline
	}
	wctx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	b := cluster.Backoff()
	var n *corev1.Node
	for attempt := 1; ; attempt++ {
		found, end, err := t.drainOnce(ctx, wctx, &inst)
		if found != nil {
			n = found
		}
		if end {
			return found, found != nil, nil
		}
		pause := cluster.Pause(&b, err)
		if limit.Sub(t.h.now()) < pause || ctx.Err() != nil {
			return n, false, leftOnNode(err)
		}
		t.log.WarnContext(ctx, "drain step failed; retrying", "cause", cluster.Cause(err), "error", err, "attempt", attempt, "pause", pause.String())
		cluster.ObserveRetry(ctx, err)
		select {
		case <-wctx.Done():
			return n, false, leftOnNode(err)
		case <-t.h.clock.After(pause):
		}
	}
}

// drainOnce is one try of drainRetrying (wctx: bounded by its limit): find
// the node, then leave it to its owner, release it (its instance is down:
// nothing can be evicted gracefully) or drain it. end says the drain ends
// here: found nil, a lookup that succeeded and found no node; else done.
// An error, errNotDrained and errNotForced among them, is tried again.
func (t *terminateHook) drainOnce(ctx, wctx context.Context, inst *instance.Instance) (found *corev1.Node, end bool, err error) {
	found, err = t.findNode(wctx, *inst)
	switch {
	case err != nil:
		return nil, false, err
	case found == nil:
		return nil, true, nil
	case t.leftAlone(ctx, found, inst.Down()):
		return found, true, nil // nothing to do here: the hook is completed
	case inst.Down():
		err = (&abruptRelease{t.invocation}).release(wctx, found, *inst)
		if err == nil && t.out.Action == ActionNotForced && !t.h.cfg.DryRun {
			// the evidence read again does not show the machine down: not
			// released is not drained. EC2 is read again for the next try:
			// an instance running again is drained by eviction
			err = errNotForced
			if again, derr := instance.Describe(wctx, t.h.c.EC2, t.h.clock, inst.ID); derr == nil {
				*inst = again
			}
		}
		return found, err == nil, err
	}
	done, err := (&nodeDrain{t.invocation}).drainNode(wctx, found, node.CauseTerminate, time.Time{}, t.deadline)
	if err == nil && !done {
		err = errNotDrained
	}
	return found, err == nil, err
}

// leftOnNode is the error a drain not finished ends with: none when only
// pods remained (they are in the outcome's Remaining).
func leftOnNode(err error) error {
	if errors.Is(err, errNotDrained) {
		return nil
	}
	return err
}

// errNotDrained: a drain step ended with pods left on the node while the
// invocation had time left; errNotForced: the abrupt path's evidence did
// not show the machine down. Both are tried again, never taken as done.
var (
	errHookGone   = errors.New("lifecycle action no longer active")
	errNotDrained = errors.New("pods still on the node")
	errNotForced  = errors.New("release not forced: the evidence read again does not show the machine down")
)
