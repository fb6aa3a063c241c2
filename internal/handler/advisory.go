package handler

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/internal/node"
)

// advisory is the path of the events that advise and bring no hook to
// complete: a spot interruption warning, a capacity reservation's warning
// (capacity.go), a rebalance recommendation, an AWS Health scheduled change
// (scheduled.go). The node is cordoned or drained, as configured, or
// released when its instance is already down.
type advisory struct{ *invocation }

// advisory handles spot and capacity reservation interruption warnings,
// rebalance recommendations and scheduled changes: cordon or drain the
// node, as configured (a rebalance: or as its group's tags say,
// GROUP_POLICY_TAGS); no hook to complete.
func (r *advisory) advisory(ctx context.Context, id string, action config.Action, timeout time.Duration) error {
	r.log = r.log.With("instance", id)
	byGroup := r.ev.Kind == event.KindRebalance && r.h.cfg.GroupTags
	if action == config.ActionIgnore && !byGroup {
		r.out.Action, r.out.Detail = ActionIgnored, "configured to ignore "+string(r.ev.Kind)
		return nil
	}
	inst, ours, err := r.ours(ctx, id)
	if err != nil || !ours {
		return err
	}
	if byGroup {
		if action, timeout = (policy{r.invocation}).advised(ctx, inst, action, timeout); action == config.ActionIgnore {
			r.out.Action, r.out.Detail = ActionIgnored, "configured to ignore "+string(r.ev.Kind)+" (the group's policy, or REBALANCE_ACTION)"
			return nil
		}
	}
	n, err := r.findNode(ctx, inst)
	if err != nil {
		return err
	}
	return r.onNode(ctx, inst, n, action, timeout)
}

// onNode cordons or drains n, the node of inst (an instance of this
// cluster), as action says, the drain within timeout (drainDeadline); or
// releases n when EC2 reports inst already down. n nil: inst has no node,
// and r.out says so.
func (r *advisory) onNode(ctx context.Context, inst instance.Instance, n *corev1.Node, action config.Action, timeout time.Duration) error {
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
		return (&abruptRelease{r.invocation}).release(ctx, n, inst)
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
	return r.drainAdvised(ctx, n, inst.ID, causeOf(r.ev.Kind), r.advisoryExpiry(), r.drainDeadline(timeout))
}

// drainDeadline is when an advisory drain must be over. A warning's notice
// runs from the warning, not from our start: a spot warning's drain ends
// timeout after it, and so does an interruptible Capacity Reservation's,
// or, when its warning gave EC2's termination time, as long before it as
// timeout leaves of the 2-minute notice; a Capacity Block's ends
// capacityBlockMargin before its instances begin to terminate. The others
// end timeout after this drain began.
func (r *advisory) drainDeadline(timeout time.Duration) time.Time {
	start := r.started
	switch r.ev.Kind {
	case event.KindCapacityBlockExpiry:
		return capacityBlockTerminations(r.ev, start).Add(-capacityBlockMargin)
	case event.KindCapacityInterruption:
		if at := r.ev.Capacity.TerminationTime; !at.IsZero() {
			return at.Add(timeout - capacityInterruptionNotice)
		}
		return warned(r.ev, start).Add(timeout)
	case event.KindSpotInterruption:
		return warned(r.ev, start).Add(timeout)
	}
	return start.Add(timeout)
}

// warned is when a warning's notice began: when it was emitted, or start
// (when this drain began), if that is sooner (a clock ahead of ours).
func warned(ev event.Event, start time.Time) time.Time {
	if !ev.Time.IsZero() && ev.Time.Before(start) {
		return ev.Time
	}
	return start
}

// graceCap is the longest grace period a drain for cause gives an evicted
// pod, and each drain tier's share of the time left (0: the pod's own, no
// share): a warning's drain must fit its notice.
func graceCap(cfg config.Config, cause node.Cause) time.Duration {
	switch cause {
	case node.CauseSpot, node.CauseCapacityInterruption:
		return cfg.SpotGracePeriodCap // the 2-minute notice
	case node.CauseCapacityBlock:
		return capacityBlockNotice - capacityBlockMargin
	}
	return 0
}

// drainAdvised drains a node on an advisory event (no hook to complete),
// holding the instance's lease for the event's kind meanwhile: a duplicate
// of the event finds it held (or done) and does nothing, and the drains of
// a storm of warnings take their turns on the PDBs they share, as the
// hooks' drains do. A drain not finished is recorded on the node.
func (r *advisory) drainAdvised(ctx context.Context, n *corev1.Node, id string, cause node.Cause, expires, deadline time.Time) error {
	claim, err := r.claim(ctx, lease.AdvisoryName(string(r.ev.Kind), id), r.ev.ID, deadline)
	if err != nil {
		if isDuplicate(err) {
			return nil // another invocation drains it for this event, or did: r.out says so
		}
		return err
	}
	stopLease := claim.KeepAlive(ctx, func(err error) { r.log.WarnContext(ctx, "lease renewal failed", "error", err) })
	r.claimed = claim
	done, err := (&nodeDrain{r.invocation}).drainNode(ctx, n, cause, expires, deadline)
	stopLease()
	r.claimed = nil
	key := ""
	if err == nil && done {
		key = r.ev.ID // a late copy of this event finds it done
	}
	r.giveUpLease(ctx, claim, key)
	if err != nil || !done {
		r.drainNotDone(err) // no continuation: a later event or the sweep carries it
	}
	if err != nil || done {
		return err
	}
	// not "drained": no hook waits, so nothing else would say pods remain
	r.out.Action = ActionUnfinished
	r.record(ctx, n, node.EventDrainBlocked(0, r.out.Remaining))
	return nil
}

// instanceNode reads the instance (ours: this cluster's) and finds its node
// (nil: none, and r.out says so).
func (r *invocation) instanceNode(ctx context.Context, id string) (instance.Instance, *corev1.Node, bool, error) {
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
	case event.KindCapacityInterruption:
		return node.CauseCapacityInterruption
	case event.KindCapacityBlockExpiry:
		return node.CauseCapacityBlock
	case event.KindScheduledChange:
		return node.CauseScheduled
	default:
		return node.CauseRebalance
	}
}

// advisoryExpiry is when an advisory cause (spot or capacity reservation
// warning, rebalance, scheduled change) lapses if the instance is still
// running: its marks are then lifted by the next event or sweep that reads
// the node.
func (r *advisory) advisoryExpiry() time.Time {
	from := r.ev.Time
	if from.IsZero() || from.After(r.h.now()) {
		from = r.h.now()
	}
	return from.Add(r.h.cfg.AdvisoryMarkTTL)
}
