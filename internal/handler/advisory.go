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
// complete: a spot interruption warning, a rebalance recommendation, an AWS
// Health scheduled change (scheduled.go). The node is cordoned or drained,
// as configured, or released when its instance is already down.
type advisory struct{ *invocation }

// advisory handles spot warnings, rebalance recommendations and scheduled
// changes: cordon or drain the node, as configured; no hook to complete.
func (r *advisory) advisory(ctx context.Context, id string, action config.Action, timeout time.Duration) error {
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
	case event.KindScheduledChange:
		return node.CauseScheduled
	default:
		return node.CauseRebalance
	}
}

// advisoryExpiry is when an advisory cause (spot warning, rebalance,
// scheduled change) lapses if the instance is still running: its marks are
// then lifted by the next event or sweep that reads the node.
func (r *advisory) advisoryExpiry() time.Time {
	from := r.ev.Time
	if from.IsZero() || from.After(r.h.now()) {
		from = r.h.now()
	}
	return from.Add(r.h.cfg.AdvisoryMarkTTL)
}
