package handler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/discovery"
	"github.com/node-drainer/node-drainer/internal/drain"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/volume"
)

// terminate handles the ASG terminate hook: drain, release volumes, complete.
// From the moment the hook is known to be ours it is completed on every path.
func (r *run) terminate(ctx context.Context) error {
	act, ok, err := r.hookAction(ctx)
	if err != nil || !ok {
		return err // err: cannot tell whether its group is ours: nothing done, a retry reads it again
	}
	inst, ours, err := r.ours(ctx, act.InstanceID)
	// known: the hook is ours whatever EC2 says now: its ASG is configured
	// (listed, or carrying the tag), or an earlier invocation read the
	// instance as the cluster's (a continuation), or the sweep took it from a
	// group of the cluster's
	known := r.groupConfigured(act.ASG) || r.attempt > 1 || r.fromSweep
	switch {
	case err != nil && !known:
		// cannot tell whether it is ours: nothing done, a retry may read
		// EC2. The hook is ours by name: Lambda's retry, two minutes away
		// at worst, must find it alive
		if herr := lifecycle.Heartbeat(ctx, r.h.c.ASG, act); herr != nil {
			r.log.WarnContext(ctx, "heartbeat for the retry failed", "error", herr)
		}
		return err
	case err != nil:
		// drain without EC2's view (the node is found by providerID), so
		// the hook is still heartbeated and completed in time (a Lambda
		// retry comes a minute later, past the hook's timeout at worst);
		// the zero reading is never "down", so nothing is forced
		r.log.WarnContext(ctx, "EC2 unreadable; ASG is configured: draining gracefully", "error", err)
		inst = instance.Instance{ID: act.InstanceID}
		if r.tagged && !r.h.cfg.ListsASG(act.ASG) && r.attempt == 1 {
			// a group ours by its tag alone may hold another cluster's
			// instances (othersAction), which EC2's tags would tell: only a
			// node of it in this cluster says it is ours. Without one,
			// "no node" is no proof: heartbeated, left for a retry (the
			// event's, or the next sweep)
			lctx, cancel := context.WithTimeout(ctx, resumeLookupLimit)
			_, ferr := node.Find(lctx, r.h.c.Kube, "", act.InstanceID)
			cancel()
			if ferr != nil {
				if herr := lifecycle.Heartbeat(ctx, r.h.c.ASG, act); herr != nil {
					r.log.WarnContext(ctx, "heartbeat for the retry failed", "error", herr)
				}
				r.out.Action = ActionIgnored
				r.out.Detail = fmt.Sprintf("EC2 unreadable and no node of %s in this cluster (%v): in a group ours by its tag alone it may be another cluster's; left for a retry", act.InstanceID, ferr)
				return fmt.Errorf("%s: %w", r.out.Detail, err)
			}
		}
	case !ours && r.othersAction(ctx, inst, act.ASG):
		return nil
	case !ours && r.groupConfigured(act.ASG):
		// the hook is ours by configuration (ASG_NAMES, or the group's tag)
		// though the instance is not the cluster's: nothing to drain, but
		// nobody else will complete it, and the instance must not wait the
		// hook out
		r.out.Action = ActionCompleted
		r.out.Detail += "; its ASG is " + r.groupWhy() + ": lifecycle action completed, nothing drained"
		return r.complete(ctx, act, lifecycle.Continue, nil)
	case !ours:
		return nil
	}
	switch {
	case r.fromSweep:
		r.resumeStart(ctx, inst, time.Time{})
	case r.late():
		// a mark from before the event is an earlier action's (an
		// instance back from a warm pool), not this drain's start
		r.resumeStart(ctx, inst, r.ev.Time.Add(-markSkew))
	}
	deadline := r.started.Add(r.h.cfg.DrainTimeout)
	if r.h.cfg.DryRun {
		deadline = r.h.now().Add(dryRunLimit) // plan, then complete at once
	}
	claim, err := r.claim(ctx, lease.Name(act.InstanceID), act.Token, deadline)
	switch {
	case err == nil:
	case isDuplicate(err):
		return nil // another invocation holds (or finished) this instance: r.out says so
	case !r.h.now().Before(deadline.Add(-time.Second)):
		// the lease was asked for until DRAIN_TIMEOUT (an apiserver that
		// does not answer): nothing was changed in the cluster, and the
		// hook is completed with the failure result as any drain's at its
		// deadline (rule 3)
		return r.drainFailed(ctx, nil, act, nil, err)
	case r.canContinue(deadline):
		// nothing was changed: the next invocation asks for the lease again
		return r.handOver(ctx, nil, act, nil)
	default:
		return err // no lease, and a retry may get one: nothing was changed
	}
	// a lease another invocation took from us (ours lapsed) ends the drain:
	// two invocations never drain and complete one hook
	dctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	stopLease := claim.KeepAlive(dctx, func(err error) {
		r.log.WarnContext(ctx, "lease renewal failed", "error", err)
		if errors.Is(err, lease.ErrHeld) {
			lost(err)
		}
	})
	r.lease = claim
	// a hook that is no longer active (it timed out, or was completed
	// elsewhere) ends the drain too: its instance is leaving without it, and
	// the lease it holds would keep the sweep from releasing the node
	stop := r.keepAlive(dctx, act, lost) // from now on: lookups that retry are heartbeated too
	n, done, err := r.drainRetrying(dctx, inst, deadline)
	stop()
	stopLease()
	if cause := context.Cause(dctx); errors.Is(cause, lease.ErrHeld) {
		r.out.Action, r.out.Detail = ActionIgnored, "lease lost to another invocation, which goes on with the drain: "+cause.Error()
		return nil
	} else if errors.Is(cause, errHookGone) {
		r.out.Action, r.out.Detail = ActionIgnored, "drain stopped: "+cause.Error()
		r.releaseLease(ctx, claim, act.Token) // nothing left to complete: a late duplicate does nothing
		return nil
	}
	switch {
	case n == nil && err == nil:
		// a lookup succeeded and found no node: nothing to drain
		return r.finish(ctx, claim, act, lifecycle.Continue, nil)
	case done:
		return r.finish(ctx, claim, act, lifecycle.Continue, n)
	case r.canContinue(deadline):
		return r.handOver(ctx, claim, act, n)
	}
	// the drain's deadline, or the last invocation's budget, is reached
	return r.drainFailed(ctx, claim, act, n, err)
}

// drainFailed completes the hook with the failure result: the drain's
// deadline (DRAIN_TIMEOUT) is reached, or the last continuation's budget.
func (r *run) drainFailed(ctx context.Context, claim *lease.Claim, act lifecycle.Action, n *corev1.Node, err error) error {
	r.fail(&Failure{Kind: ErrDrainFailed, Cause: err, Result: r.h.onFailure()})
	r.drainEnded()
	if err != nil {
		r.record(ctx, n, node.EventDrainFailed(err))
	} else {
		r.record(ctx, n, node.EventDrainBlocked(r.h.now().Sub(r.started), r.out.Remaining))
	}
	return r.finish(ctx, claim, act, r.h.onFailure(), n)
}

// handOver gives the drain to a continuation: the lease given up (or, if
// the apiserver does not answer, left for the continuation to take from
// this invocation), the hook heartbeated, the function invoked again. A
// hand-over that fails is never a reason to complete the hook early: the
// invocation fails, Lambda retries it (its heartbeat just sent keeps the
// hook), and the hook's own timeout is the last backstop (rule 16).
func (r *run) handOver(ctx context.Context, claim *lease.Claim, act lifecycle.Action, n *corev1.Node) error {
	rctx, cancel := r.reserved(ctx)
	defer cancel()
	lctx, lcancel := context.WithTimeout(rctx, leaseHandOverLimit)
	if err := claim.Release(lctx, ""); err != nil {
		r.log.WarnContext(ctx, "could not give the lease up: the continuation takes it from this invocation", "error", err)
	}
	lcancel()
	// the holders the continuation may take the lease from: this
	// invocation; and when it never knowingly got the lease, those before
	// it too: one may hold it still, or this one's claim took it and its
	// answer was lost
	holders := []string{r.holder(ctx)}
	if claim == nil {
		holders = append(slices.Clone(r.predecessors), holders...)
	}
	if err := r.continueLater(rctx, act, n, holders); err != nil {
		r.fail(&Failure{Kind: ErrHandOver, Cause: err})
		return err
	}
	return nil
}

// leaseHandOverLimit bounds giving the lease up at a hand-over: the
// continuation may take it from this invocation (Continuation.Holder), so
// an apiserver that does not answer costs this much, not the margin.
const leaseHandOverLimit = 2 * time.Second

// isDuplicate says that claim found the instance held, or its action done,
// by another invocation: nothing to do here.
func isDuplicate(err error) bool {
	return errors.Is(err, lease.ErrHeld) || errors.Is(err, lease.ErrDone)
}

// resumeStart takes, for a lifecycle action the sweep found waiting (its
// event lost, its age unknown) or an event come late (a retry), the start of
// its drain from the node's own record: the terminate mark an earlier
// invocation placed. DRAIN_TIMEOUT then counts from there and does not
// restart at every sweep or retry (rule 16). A node that cannot be read, or
// carries no such mark, or one from before notBefore, leaves the start now.
func (r *run) resumeStart(ctx context.Context, inst instance.Instance, notBefore time.Time) {
	lctx, cancel := context.WithTimeout(ctx, resumeLookupLimit)
	defer cancel()
	n, err := node.Find(lctx, r.h.c.Kube, inst.PrivateDNSName, inst.ID)
	if err != nil {
		return
	}
	marks, _ := node.Marks(n)
	if h, ok := marks.Causes[node.CauseTerminate]; ok && !h.Since.IsZero() && h.Since.Before(r.started) && !h.Since.Before(notBefore) {
		r.log.InfoContext(ctx, "drain resumed from the node's mark", "since", h.Since.UTC().Format(time.RFC3339))
		r.started = h.Since
	}
}

// late says that this first attempt came well after its event: Lambda's
// retry of an invocation that failed (a minute or more later), or a
// delivery held up. The drain may have begun already, and its start is read
// from the node's mark (resumeStart), so that DRAIN_TIMEOUT does not restart
// at each retry; an event on time costs no read.
func (r *run) late() bool {
	return r.attempt == 1 && !r.ev.Time.IsZero() && r.started.Sub(r.ev.Time) > lateAfter
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
func (r *run) drainRetrying(ctx context.Context, inst instance.Instance, deadline time.Time) (*corev1.Node, bool, error) {
	limit := r.budget(ctx)
	if deadline.Before(limit) {
		limit = deadline
	}
	wctx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	b := cluster.Backoff()
	var n *corev1.Node
	for attempt := 1; ; attempt++ {
		found, err := r.findNode(wctx, inst)
		if found != nil {
			n = found
		}
		switch {
		case err == nil && found == nil:
			return nil, false, nil
		case err == nil && r.leftAlone(ctx, found, inst.Down()):
			return found, true, nil // nothing to do here: the hook is completed
		case err == nil && inst.Down():
			// the instance is already gone: nothing can be evicted gracefully
			if err = r.release(wctx, found, inst); err == nil && r.out.Action == ActionNotForced && !r.h.cfg.DryRun {
				// the evidence read again does not show the machine down:
				// not released is not drained. EC2 is read again for the
				// next try: an instance running again is drained by eviction
				err = errNotForced
				if again, derr := instance.Describe(wctx, r.h.c.EC2, r.h.clock, inst.ID); derr == nil {
					inst = again
				}
			}
			if err == nil {
				return found, true, nil
			}
		case err == nil:
			var done bool
			if done, err = r.drainNode(wctx, found, node.CauseTerminate, time.Time{}, deadline); err == nil {
				if done {
					return found, true, nil
				}
				err = errNotDrained
			}
		}
		pause := cluster.Pause(&b, err)
		if limit.Sub(r.h.now()) < pause || ctx.Err() != nil {
			if errors.Is(err, errNotDrained) {
				err = nil // what remains is in r.out.Remaining
			}
			return n, false, err
		}
		r.log.WarnContext(ctx, "drain step failed; retrying", "cause", cluster.Cause(err), "error", err, "attempt", attempt, "pause", pause.String())
		cluster.ObserveRetry(ctx, err)
		select {
		case <-wctx.Done():
			if errors.Is(err, errNotDrained) {
				err = nil
			}
			return n, false, err
		case <-r.h.clock.After(pause):
		}
	}
}

// errNotDrained: a drain step ended with pods left on the node while the
// invocation had time left; errNotForced: the abrupt path's evidence did
// not show the machine down. Both are tried again, never taken as done.
var (
	errHookGone   = errors.New("lifecycle action no longer active")
	errNotDrained = errors.New("pods still on the node")
	errNotForced  = errors.New("release not forced: the evidence read again does not show the machine down")
)

// claim takes the lease of that name so that one invocation acts on the
// instance, working on key (the hook's token, the advisory event's id). It
// fails with lease.ErrHeld or lease.ErrDone when another invocation holds
// it or finished key (r.out says so: see isDuplicate). Without leases at
// all (the namespace missing, or not granted) it goes on, and says so in
// the log: duplicates are then only idempotent. An apiserver that does not
// answer in time is no such case: the error is returned, and nothing is
// done without the lease (rule 16).
func (r *run) claim(ctx context.Context, name, key string, deadline time.Time) (*lease.Claim, error) {
	if r.h.cfg.DryRun {
		return nil, nil
	}
	// an apiserver that does not answer is waited for no longer than the
	// drain itself would be
	limit := r.budget(ctx)
	if deadline.Before(limit) {
		limit = deadline
	}
	ctx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	var cl *lease.Claim
	err := cluster.Retry(ctx, func() (err error) {
		cl, err = lease.AcquireFrom(ctx, r.h.c.Kube, r.h.cfg.LeaseNamespace, name, r.holder(ctx), r.predecessors, key, r.h.clock)
		return err
	})
	switch {
	case err == nil:
		return cl, nil
	case isDuplicate(err):
		r.out.Action, r.out.Detail = ActionIgnored, "duplicate: "+err.Error()
		return nil, err
	case errors.Is(err, lease.ErrUnavailable):
		r.log.WarnContext(ctx, "acting without a lease: duplicates of this event are not excluded", "error", err)
		return nil, nil
	default:
		r.fail(&Failure{Kind: ErrNoLease, Cause: err})
		return nil, fmt.Errorf("taking lease %s: %w", name, err)
	}
}

// holder names this invocation in leases: the Lambda request id.
func (r *run) holder(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		return lc.AwsRequestID
	}
	return fmt.Sprintf("pid-%d-%d", os.Getpid(), r.started.UnixNano())
}

// finish completes the lifecycle action and marks it done in the lease, so
// a late duplicate of the event does nothing.
func (r *run) finish(ctx context.Context, claim *lease.Claim, act lifecycle.Action, result lifecycle.Result, n *corev1.Node) error {
	err := r.complete(ctx, act, result, n)
	done := act.Token
	if err != nil {
		done = "" // not completed: Lambda's retry of this event must find the lease free
	}
	r.releaseLease(ctx, claim, done)
	return err
}

// releaseLease gives claim up, recording doneKey as done when it is not
// empty, even when ctx has ended (bounded on its own).
func (r *run) releaseLease(ctx context.Context, claim *lease.Claim, doneKey string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := claim.Release(rctx, doneKey); err != nil {
		r.log.WarnContext(ctx, "could not release the lease", "error", err)
	}
}

// hookAction is the event's lifecycle action, and whether it is ours to
// complete (see ourHook); the log names it from here on. An error: whether
// it is ours could not be read (its group's tags); nothing was done.
func (r *run) hookAction(ctx context.Context) (lifecycle.Action, bool, error) {
	act := actionOf(*r.ev.Lifecycle)
	r.log = r.log.With("asg", act.ASG, "hook", act.Hook, "instance", act.InstanceID)
	ok, err := r.ourHook(ctx, act)
	return act, ok, err
}

// actionOf is the lifecycle action an event (or the sweep) names.
func actionOf(la event.LifecycleAction) lifecycle.Action {
	return lifecycle.Action{ASG: la.AutoScalingGroupName, Hook: la.HookName, Token: la.Token, InstanceID: la.InstanceID}
}

// ourHook says whether the lifecycle action is ours to complete: its ASG is
// allowed by ASG_NAMES or carries ASG_TAG_KEY=ASG_TAG_VALUE, and its hook is
// one of ours by name (the templates' TERMINATE_HOOK_NAME and
// LAUNCH_HOOK_NAME, or HOOK_NAMES; the EventBridge rule filters the names
// too; the code does not rely on it). Another's hook is left alone: its
// owner completes it (rule 14). The tag is read now, at the moment of acting
// (rule 11: the event, or the sweep's reading, may be old) — except on a
// continuation, whose first invocation found the group ours: a drain begun
// is finished and its hook completed, whatever became of the tag since.
func (r *run) ourHook(ctx context.Context, act lifecycle.Action) (bool, error) {
	cfg := r.h.cfg
	switch {
	case !cfg.AllowsASG(act.ASG) && !cfg.SelectsByTag():
		r.out.Action, r.out.Detail = ActionIgnored, "ASG "+act.ASG+" is not in ASG_NAMES"
	case !cfg.OwnsHook(act.Hook):
		r.out.Action, r.out.Detail = ActionIgnored, "hook "+act.Hook+" is not node-drainer's (TERMINATE_HOOK_NAME, LAUNCH_HOOK_NAME, HOOK_NAMES: "+strings.Join(cfg.OwnedHooks(), ", ")+")"
	case cfg.AllowsASG(act.ASG):
		return true, nil
	case r.attempt > 1:
		r.tagged = true
		return true, nil
	case r.h.c.AutoScaling == nil:
		r.out.Action, r.out.Detail = ActionIgnored, "ASG "+act.ASG+" is not in ASG_NAMES, and there is no Auto Scaling client to read its tags"
	default:
		tag := discovery.Tag{Key: cfg.ASGTagKey, Value: cfg.ASGTagValue}
		// the SDK's retryer retries throttling and 5xx; a failure after it
		// is returned: the event's retry, a minute later, reads again
		carries, err := discovery.Carries(ctx, r.h.c.AutoScaling, act.ASG, tag)
		if err != nil {
			return false, err
		}
		if carries {
			r.tagged = true
			return true, nil
		}
		r.out.Action, r.out.Detail = ActionIgnored, "ASG "+act.ASG+" is not in ASG_NAMES and does not carry the tag "+tag.String()
	}
	return false, nil
}

// groupConfigured says whether the ASG is ours by configuration: listed in
// ASG_NAMES, or found carrying the tag (ourHook).
func (r *run) groupConfigured(asg string) bool {
	return r.h.cfg.ListsASG(asg) || r.tagged
}

// othersAction says (and records in the outcome) that a lifecycle action of
// a group that is ours by its tag alone belongs to another deployment of
// node-drainer: its instance carries another cluster's tag
// (kubernetes.io/cluster/<name> other than CLUSTER_TAG_KEY, or EKS's
// eks:cluster-name naming another cluster). Two deployments that select
// groups by the same tag and hook names (the templates' defaults, for two
// clusters in one account and region) receive each other's lifecycle events
// and sweep each other's groups; completing the other's action, "nothing to
// drain here", would end its drain midway. It is left to its owner (rule 14).
// A group listed in ASG_NAMES is ours by name: its actions are completed
// whatever its instances carry.
func (r *run) othersAction(ctx context.Context, inst instance.Instance, asg string) bool {
	if !r.tagged || r.h.cfg.ListsASG(asg) {
		return false
	}
	other := r.otherCluster(inst)
	if other == "" {
		return false
	}
	r.out.Action = ActionIgnored
	r.out.Detail = fmt.Sprintf("instance %s carries %s: another cluster's, in group %s which carries %s=%s here too; its lifecycle action is left to that cluster's node-drainer (give each deployment its own ASG_TAG_VALUE or hook names)",
		inst.ID, other, asg, r.h.cfg.ASGTagKey, r.h.cfg.ASGTagValue)
	r.log.WarnContext(ctx, "lifecycle action left to another deployment", "detail", r.out.Detail)
	return true
}

// otherCluster names the tag by which an instance is another cluster's
// ("" when none says so).
func (r *run) otherCluster(inst instance.Instance) string {
	for _, k := range slices.Sorted(maps.Keys(inst.Tags)) {
		v := inst.Tags[k]
		switch {
		case strings.HasPrefix(k, clusterTagPrefix) && k != r.h.cfg.ClusterTagKey:
			return k
		case k == eksClusterNameTag && r.h.cfg.ClusterName != "" && v != r.h.cfg.ClusterName:
			return k + "=" + v
		}
	}
	return ""
}

// The tags that name an instance's cluster: Kubernetes' (EKS, kops,
// kubeadm with the AWS cloud provider), and EKS managed node groups'.
const (
	clusterTagPrefix  = "kubernetes.io/cluster/"
	eksClusterNameTag = "eks:cluster-name"
)

// groupWhy says how the lifecycle action's group is ours, for the outcome.
func (r *run) groupWhy() string {
	if r.tagged {
		return "tagged " + r.h.cfg.ASGTagKey + "=" + r.h.cfg.ASGTagValue
	}
	return "in ASG_NAMES"
}

// advisory handles spot warnings, rebalance recommendations and scheduled
// changes: cordon or drain the node, as configured; no hook to complete.
func (r *run) advisory(ctx context.Context, id string, action config.Action, timeout time.Duration) error {
	r.log = r.log.With("instance", id)
	if action == config.ActionIgnore {
		r.out.Action, r.out.Detail = ActionIgnored, "configured to ignore "+string(r.ev.Kind)
		return nil
	}
	inst, n, ours, err := r.instanceNode(ctx, id)
	if err != nil || !ours {
		return err
	}
	if n == nil {
		if inst.Down() {
			// a warning about an instance already gone, its node with it: a
			// success, not an error to retry and send to the DLQ
			r.out.Detail = inst.String() + ": instance already gone and has no node; nothing to do"
		}
		return nil
	}
	if r.leftAlone(ctx, n, inst.Down()) {
		return nil
	}
	if inst.Down() {
		return r.release(ctx, n, inst)
	}
	if action == config.ActionCordon {
		mark := node.Mark{Cause: causeOf(r.ev.Kind), Cordon: true, Expires: r.advisoryExpiry()}
		made, err := node.ApplyTo(ctx, r.h.c.Kube, n, mark, r.h.now(), r.h.cfg.DryRun)
		if err != nil {
			return err
		}
		r.out.Action = ActionCordoned
		if made.Cordoned {
			r.record(ctx, n, node.EventCordonedOn(r.ev.DetailType))
		}
		return nil
	}
	start := r.started
	if r.ev.Kind == event.KindSpotInterruption && !r.ev.Time.IsZero() && r.ev.Time.Before(start) {
		start = r.ev.Time // the 2-minute notice runs from the warning, not from our start
	}
	return r.drainAdvised(ctx, n, id, causeOf(r.ev.Kind), r.advisoryExpiry(), start.Add(timeout))
}

// drainAdvised drains a node on an advisory event (no hook to complete),
// holding the instance's lease for the event's kind meanwhile: a duplicate
// of the event finds it held (or done) and does nothing, and the drains of
// a storm of warnings take their turns on the PDBs they share, as the
// hooks' drains do. A drain not finished is recorded on the node.
func (r *run) drainAdvised(ctx context.Context, n *corev1.Node, id string, cause node.Cause, expires, deadline time.Time) error {
	claim, err := r.claim(ctx, lease.AdvisoryName(string(r.ev.Kind), id), r.ev.ID, deadline)
	if err != nil {
		if isDuplicate(err) {
			return nil // another invocation drains it for this event, or did: r.out says so
		}
		return err
	}
	stopLease := claim.KeepAlive(ctx, func(err error) { r.log.WarnContext(ctx, "lease renewal failed", "error", err) })
	r.lease = claim
	done, err := r.drainNode(ctx, n, cause, expires, deadline)
	stopLease()
	r.lease = nil
	key := ""
	if err == nil && done {
		key = r.ev.ID // a late copy of this event finds it done
	}
	r.releaseLease(ctx, claim, key)
	if err != nil || done {
		return err
	}
	r.record(ctx, n, node.EventDrainBlocked(0, r.out.Remaining))
	return nil
}

// instanceNode reads the instance (ours: this cluster's) and finds its node
// (nil: none, and r.out says so).
func (r *run) instanceNode(ctx context.Context, id string) (instance.Instance, *corev1.Node, bool, error) {
	inst, ours, err := r.ours(ctx, id)
	if err != nil || !ours {
		return inst, nil, false, err
	}
	n, err := r.findNode(ctx, inst)
	return inst, n, err == nil, err
}

// causeOf is the cause an advisory event holds a node for.
func causeOf(k event.Kind) node.Cause {
	switch k {
	case event.KindSpotInterruption:
		return node.CauseSpot
	case event.KindScheduledChange:
		return node.CauseScheduled
	default:
		return node.CauseRebalance
	}
}

// advisoryExpiry is when an advisory cause (spot warning, rebalance,
// scheduled change) lapses if the instance is still running: its marks are
// then lifted by the next event or sweep that reads the node.
func (r *run) advisoryExpiry() time.Time {
	from := r.ev.Time
	if from.IsZero() || from.After(r.h.now()) {
		from = r.h.now()
	}
	return from.Add(r.h.cfg.AdvisoryMarkTTL)
}

// drainNode marks the node for cause (until expires, if not zero), evicts its
// pods until deadline (or this invocation's budget) and waits for their
// volumes to be detached. It reports whether the node is fully drained; what
// remains is in r.out.Remaining.
func (r *run) drainNode(ctx context.Context, n *corev1.Node, cause node.Cause, expires, deadline time.Time) (bool, error) {
	if r.h.cfg.DryRun {
		return r.planDrain(ctx, n)
	}
	mark := node.Mark{Cause: cause, Expires: expires, Cordon: true, ExcludeLB: true, Draining: true}
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
	r.step(StepMarked, "cordon, taint %s, load-balancer exclusion (changed now: %v)", node.TaintDraining, made.Any())
	if made.Any() {
		r.record(ctx, n, node.EventDrainStarted(r.ev.DetailType))
	}
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
	if dead && windowEnd.Before(deadline) {
		deadline = windowEnd
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	r.step(StepEvicting, "until %s", deadline.UTC().Format(time.RFC3339))
	drainer := r.drainer(cause, dead, n.Name)
	res, err := drainer.Drain(dctx, n.Name)
	listed := r.h.now() // the drain's last act: its list of the node's pods (rule 15)
	r.step(StepEvicted, "%d evicted, %d remaining", len(res.Evicted), len(res.Remaining))
	for _, p := range res.Evicted {
		r.out.Evicted = append(r.out.Evicted, p.String())
	}
	r.out.Remaining = nil // this attempt's: an earlier one's is stale
	for _, p := range res.Remaining {
		r.out.Remaining = append(r.out.Remaining, p.String()+": "+p.Reason)
	}
	if err != nil {
		return false, fmt.Errorf("draining node %s: %w", n.Name, err)
	}
	r.out.Action = ActionDrained
	if dead && cause == node.CauseTerminate && !r.h.now().Before(windowEnd) && r.stillDead(ctx, n.Name) {
		r.out.Detail = strings.TrimSpace(r.out.Detail + " node NotReady (kubelet dead): pods evicted, not waited for past DEAD_NODE_EVICTION_WINDOW; volumes are released when EC2 reports the instance down")
		r.record(ctx, n, node.EventDrainCompletedDeadKubelet(len(res.Evicted), r.out.Remaining))
		return true, nil
	}
	if !res.Done() {
		return false, nil
	}
	if len(res.Evicted) > 0 {
		r.recordSoon(ctx, n, node.EventDrainCompleted(r.out.Evicted))
	}
	if dead {
		return true, nil // no kubelet unmounts them: the abrupt path releases the volumes
	}
	err = r.waitVolumes(ctx, n, res.Claims, deadline)
	if err == nil && r.h.now().Sub(listed) >= listFresh {
		// done means read again (rule 15) at the moment of completing: the
		// volumes took a while, and a pod bound meanwhile (straight to the
		// node) is drained too, by the next try
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
func (r *run) stillDead(ctx context.Context, name string) bool {
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
func (r *run) kubeletDead(ctx context.Context, name string) bool {
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

// waitVolumes waits (bounded) until the VolumeAttachments of the drained
// pods' volumes are deleted, and those of any other volume on the node but
// the ones of pods that stay (DaemonSets, mirror pods): a continuation does
// not know the pods an earlier attempt evicted. Then the next node attaches
// the volumes at once.
func (r *run) waitVolumes(ctx context.Context, n *corev1.Node, claims []string, deadline time.Time) error {
	vas, err := r.attachmentsOn(ctx, n.Name)
	if err != nil || len(vas) == 0 && len(claims) == 0 {
		return err // no volume on the node, none used by the pods: nothing to wait for
	}
	pvs, err := volume.PersistentVolumes(ctx, r.h.c.Kube, claims)
	if err != nil {
		return err
	}
	keep, err := r.claimsStaying(ctx, n.Name)
	if err != nil {
		return err
	}
	for _, va := range vas {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil && !keep[*pv] && !slices.Contains(pvs, *pv) {
			pvs = append(pvs, *pv)
		}
	}
	if len(pvs) == 0 {
		return nil
	}
	if limit := r.h.now().Add(r.h.cfg.VolumeDetachTimeout); limit.Before(deadline) {
		deadline = limit
	}
	if budget := r.budget(ctx); budget.Before(deadline) {
		deadline = budget
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	begin := r.h.now()
	left, err := volume.WaitDetached(wctx, r.h.c.Kube, n.Name, pvs)
	if err != nil {
		what := "not detached in time"
		if !errors.Is(err, volume.ErrTimeout) {
			what = "not watched to the end (" + err.Error() + ")"
		}
		r.step(StepVolumes, "%s: %s", what, strings.Join(left, ", "))
		r.record(ctx, n, node.EventVolumesNotDetached(what, left))
		return nil // the pods are gone; the attacher finishes on its own
	}
	r.step(StepVolumes, "detached (waited %s): %s", r.h.now().Sub(begin).Round(time.Millisecond), strings.Join(pvs, ", "))
	r.recordSoon(ctx, n, node.EventVolumesDetached(r.h.now().Sub(begin), pvs))
	return nil
}

// attachmentsRead is a read of a node's VolumeAttachments begun ahead.
type attachmentsRead struct {
	done chan struct{}
	vas  []storagev1.VolumeAttachment
	err  error
}

// readAttachmentsSoon begins reading the node's VolumeAttachments in the
// background: the drain calls it as it lists the node's pods again, its
// pods gone (drain.Options.AfterGone), so the two reads overlap. The last
// one begun is the one waitVolumes takes.
func (r *run) readAttachmentsSoon(ctx context.Context, nodeName string) {
	a := &attachmentsRead{done: make(chan struct{})}
	r.attachments = a
	r.recording.Go(func() {
		defer close(a.done)
		a.vas, a.err = volume.Attachments(ctx, r.h.c.Kube, nodeName, nil)
	})
}

// attachmentsOn is the node's VolumeAttachments: the read begun as its pods
// went, or, without one (or when it failed: its context was the drain's,
// which may have ended), one made now.
func (r *run) attachmentsOn(ctx context.Context, nodeName string) ([]storagev1.VolumeAttachment, error) {
	if a := r.attachments; a != nil {
		r.attachments = nil
		select {
		case <-a.done:
			if a.err == nil {
				return a.vas, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return volume.Attachments(ctx, r.h.c.Kube, nodeName, nil)
}

// claimsStaying returns the PVs used by pods that stay on the node.
func (r *run) claimsStaying(ctx context.Context, nodeName string) (map[string]bool, error) {
	pods, err := drain.PodsOn(ctx, r.h.c.Kube, nodeName)
	if err != nil {
		return nil, err
	}
	var claims []string
	for _, p := range pods {
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				claims = append(claims, p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName)
			}
		}
	}
	pvs, err := volume.PersistentVolumes(ctx, r.h.c.Kube, claims)
	keep := map[string]bool{}
	for _, pv := range pvs {
		keep[pv] = true
	}
	return keep, err
}

// keepAlive heartbeats the hook while the drain runs, at half the hook's
// heartbeat timeout (read in the background: nothing waits for it).
func (r *run) keepAlive(ctx context.Context, act lifecycle.Action, gone func(error)) (stop func()) {
	if r.h.cfg.DryRun {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan func(), 1)
	go func() {
		interval := lifecycle.HeartbeatInterval(ctx, r.h.c.ASG, act, time.Minute)
		onErr := func(err error) {
			r.log.WarnContext(ctx, "heartbeat failed", "error", err)
			if gone != nil && lifecycle.IsNotActive(err) {
				gone(fmt.Errorf("%w: %w", errHookGone, err))
			}
		}
		// an event that arrives late (EventBridge retries) or a continuation
		// (queued for an unknown time) may find the hook past half its
		// timeout: the first heartbeat cannot wait a whole interval
		// (a hook the sweep found waiting has an unknown age: at once too)
		if age := r.h.now().Sub(r.ev.Time); r.attempt > 1 || r.fromSweep || r.ev.Time.IsZero() || age >= interval {
			r.log.InfoContext(ctx, "heartbeat at once", "hookAge", age.Round(time.Second).String(), "interval", interval.String(), "attempt", r.attempt)
			if err := lifecycle.Heartbeat(ctx, r.h.c.ASG, act); err != nil && ctx.Err() == nil {
				onErr(err)
			}
		}
		stopped <- lifecycle.KeepAlive(ctx, r.h.c.ASG, r.h.clock, act, interval, onErr)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			(<-stopped)()
		})
	}
}

// canContinue says whether a drain cut short by this invocation's deadline
// may go on in a fresh invocation.
func (r *run) canContinue(deadline time.Time) bool {
	// the next invocation is continuation number r.attempt: past
	// MAX_CONTINUATIONS it would be refused, so this one completes the hook
	return r.h.cfg.ContinueLongDrains && r.h.c.Lambda != nil && r.h.cfg.FunctionName != "" &&
		!r.h.cfg.DryRun && r.attempt <= r.h.cfg.MaxContinuations && r.h.now().Before(deadline.Add(-time.Second))
}

// continueLater heartbeats the hook and invokes the function again,
// asynchronously, with the original event, the drain's start, the next
// attempt number and the holder it may take the lease from. Should the
// continuation be lost, the hook's heartbeat timeout and default result
// are the backstop.
func (r *run) continueLater(ctx context.Context, act lifecycle.Action, n *corev1.Node, holders []string) error {
	if err := lifecycle.Heartbeat(ctx, r.h.c.ASG, act); err != nil {
		if lifecycle.IsNotActive(err) {
			r.out.Action, r.out.Detail = ActionCompleted, "lifecycle action no longer active"
			return nil
		}
		// the continuation heartbeats at once: a heartbeat lost here is not
		// a reason to stop
		r.log.WarnContext(ctx, "heartbeat before the hand-over failed; handing over all the same", "error", err)
	}
	payload, err := event.Continuation{Event: r.raw, StartedAt: r.started, Attempt: r.attempt + 1,
		Holder: holders[len(holders)-1], Holders: holders}.Payload()
	if err != nil {
		return err
	}
	if err := r.invokeSelf(ctx, payload); err != nil {
		return fmt.Errorf("invoking %s to continue: %w", r.h.cfg.FunctionName, err)
	}
	r.out.Action = ActionContinued
	r.out.Detail = fmt.Sprintf("drain continues in attempt %d", r.attempt+1)
	r.step(StepContinued, "attempt %d invoked", r.attempt+1)
	r.record(ctx, n, node.EventContinued(r.h.now().Sub(r.started), r.attempt+1, r.out.Remaining))
	return nil
}

// complete completes the lifecycle action with result (dry run: says so).
func (r *run) complete(ctx context.Context, act lifecycle.Action, result lifecycle.Result, n *corev1.Node) error {
	if r.out.Action == "" {
		r.out.Action = ActionCompleted
	}
	if r.h.cfg.DryRun && result != lifecycle.Continue {
		// never worse than no function: the instance goes on as it would
		r.out.Detail = strings.TrimSpace(r.out.Detail + " (dry run: would complete with " + string(result) + ", completed with CONTINUE)")
		result = lifecycle.Continue
	}
	r.out.LifecycleResult = string(result)
	// a context of its own: the margin kept from the deadline is for this
	// call (the SDK retries throttling with backoff), up to the deadline itself
	end := r.h.now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Add(-500*time.Millisecond).After(end) {
		end = d.Add(-500 * time.Millisecond)
	}
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
	defer cancel()
	completed, err := lifecycle.Complete(cctx, r.h.c.ASG, act, result)
	// the SDK's retries given up (a throttling storm) leave the rest of the
	// margin: tried again within it, not left to Lambda's retry a minute
	// later, past a short heartbeat timeout
	for b := cluster.Backoff(); err != nil && awsRetryable(err); {
		pause := cluster.Pause(&b, err)
		if end.Sub(r.h.now()) < pause+time.Second {
			break
		}
		r.log.WarnContext(ctx, "completing the lifecycle action failed; trying again", "error", err, "pause", pause.String())
		select {
		case <-cctx.Done():
		case <-r.h.clock.After(pause):
		}
		if cctx.Err() != nil {
			break
		}
		completed, err = lifecycle.Complete(cctx, r.h.c.ASG, act, result)
	}
	if err != nil {
		return err
	}
	if !completed {
		r.out.Detail = strings.TrimSpace(r.out.Detail + " (lifecycle action was no longer active)")
		r.step(StepHookCompleted, "no longer active (completed by someone else, or timed out)")
	} else {
		r.hookCompleted(string(result))
	}
	if n != nil && completed { // a completion by someone else is not ours to record
		// cctx has its own deadline, not the invocation's: record directly
		if err := r.recorder().Record(cctx, n, node.EventLifecycleCompleted(act.ASG, act.Hook, string(result), result != lifecycle.Continue)); err != nil {
			r.log.WarnContext(ctx, "could not record event", "error", err)
		}
	}
	return nil
}

// awsRetryable: an AWS error the SDK's own retryer would retry (throttling,
// 5xx, a connection lost).
func awsRetryable(err error) bool {
	return retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary
}

// launch completes the launch hook once the instance's node has joined and is
// Ready, or with the failure result at the deadline.
func (r *run) launch(ctx context.Context) error {
	act, ok, err := r.hookAction(ctx)
	if err != nil || !ok {
		return err
	}
	inst, ours, err := r.ours(ctx, act.InstanceID)
	if err != nil {
		return err
	}
	if !ours {
		if !r.groupConfigured(act.ASG) || r.othersAction(ctx, inst, act.ASG) {
			return nil
		}
		// as on the terminate path: the hook is ours by configuration
		// (ASG_NAMES, or the group's tag) though the instance is not the
		// cluster's; nobody else completes it, and the instance must not
		// wait it out
		r.out.Action = ActionCompleted
		r.out.Detail += "; its ASG is " + r.groupWhy() + ": lifecycle action completed, no node waited for"
		return r.complete(ctx, act, lifecycle.Continue, nil)
	}
	if r.ev.Lifecycle.Destination == event.LocationWarmPool {
		// launched into a warm pool, where Auto Scaling stops it (or keeps
		// it running out of service) as soon as the action completes: its
		// node is not to join now, but when the group takes it out of the
		// pool (this hook again, Destination AutoScalingGroup). Waiting for
		// it would fail the launch, and the failure result would terminate
		// every instance meant for the pool.
		r.out.Action = ActionCompleted
		r.out.Detail = "instance launches into the warm pool: its node joins when it leaves the pool; lifecycle action completed at once"
		return r.complete(ctx, act, lifecycle.Continue, nil)
	}
	stop := r.keepAlive(ctx, act, nil) // node registration can outlast a short heartbeat timeout
	limit := r.budget(ctx)
	if r.h.cfg.DryRun && r.h.now().Add(dryRunLimit).Before(limit) {
		limit = r.h.now().Add(dryRunLimit) // a dry run completes the hook at once
	}
	wctx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	joined, err := node.WaitReady(wctx, r.h.c.Kube, inst.PrivateDNSName, inst.ID)
	stop()
	if err != nil {
		r.fail(&Failure{Kind: ErrNotReady, Cause: err})
		return r.complete(ctx, act, r.h.onFailure(), joined)
	}
	r.out.Node = joined.Name
	r.out.Action = ActionNodeJoined
	// the hook first (rule 3): the lift after it, in a bounded time, is a
	// convenience the `running` event's path and the sweep also provide
	err = r.complete(ctx, act, lifecycle.Continue, joined)
	if left := r.budget(ctx).Sub(r.h.now()); left > 0 {
		lctx, cancel := context.WithTimeout(ctx, min(left, liftLimit))
		r.liftOnLaunch(lctx, joined, inst)
		cancel()
	}
	return err
}

// liftLimit bounds liftOnLaunch, after the launch hook is completed.
const liftLimit = 10 * time.Second

// liftOnLaunch lifts, from a node that joined Ready for a launch, what an
// earlier trip of its instance into a warm pool left: the out-of-service hold
// of its stop there (EC2 said running when this invocation read it, and the
// kubelet is Ready), and the terminate hold of the drain that sent it there,
// once that action is over (terminateOver). A node that joins cordoned takes
// no pods. It runs once the hook is completed; a failure is logged and left
// to the `running` event's path and the sweep.
func (r *run) liftOnLaunch(ctx context.Context, n *corev1.Node, inst instance.Instance) {
	marks, _ := node.Marks(n)
	over, why := r.terminateOver(ctx, inst, marks)
	oos, stopped := marks.Causes[node.CauseOutOfService]
	// a hold placed after the launch began is a stop since: it stays
	stopped = stopped && inst.State == instance.StateRunning && node.Ready(n) && !r.ev.Time.Before(oos.Since.Add(-time.Second))
	if !over && !stopped {
		if why != "" {
			r.out.Detail += "; " + why
		}
		return
	}
	holds := map[node.Cause]time.Time{}
	if stopped {
		holds[node.CauseOutOfService] = oos.Since
	}
	if over {
		holds[node.CauseTerminate] = marks.Causes[node.CauseTerminate].Since
	}
	undone, err := node.ReleaseHolds(ctx, r.h.c.Kube, n.Name, holds, r.h.now(), r.h.cfg.DryRun)
	if err != nil {
		r.log.WarnContext(ctx, "holds not lifted", "error", err)
		r.out.Detail += "; holds not lifted: " + err.Error()
		return
	}
	var said []string
	if stopped {
		said = append(said, "out-of-service hold lifted: EC2 says the instance runs and its node is Ready")
	}
	if over {
		said = append(said, "terminate hold lifted: "+why)
	} else if why != "" {
		said = append(said, why)
	}
	r.out.Detail += fmt.Sprintf("; %s (removed: cordon=%v drain taint=%v out-of-service taint=%v load-balancer exclusion=%v)",
		strings.Join(said, "; "), undone.Cordoned, undone.Draining, undone.OutOfService, undone.Labeled)
	r.record(ctx, n, node.EventRecovered(inst.String(), strings.Join(said, "; ")))
}

// invokeSelf invokes the function asynchronously with payload: a drain's
// continuation, one instance of a scheduled event, or a shard of a sweep
// pass.
func (r *run) invokeSelf(ctx context.Context, payload []byte) error {
	_, err := r.h.c.Lambda.Invoke(ctx, &lambda.InvokeInput{
		FunctionName:   aws.String(r.h.cfg.FunctionName),
		InvocationType: types.InvocationTypeEvent,
		Payload:        payload,
	})
	return err
}
