package handler

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
)

// The capacity reservations' notices (EC2 user guide: "Monitor interruptible
// Capacity Reservations", "Monitor Capacity Blocks using EventBridge").
const (
	// capacityInterruptionNotice: an interruptible Capacity Reservation's
	// warning comes two minutes before EC2 takes the instance, as a spot
	// warning does; its drain is bounded by SPOT_DRAIN_TIMEOUT and its pods'
	// grace by SPOT_GRACE_PERIOD_CAP.
	capacityInterruptionNotice = 2 * time.Minute
	// capacityBlockNotice: a Capacity Block's expiration warning comes 40
	// minutes before the block ends, and its instances begin to terminate
	// 10 minutes after the warning; capacityBlockTerminationLead before the
	// end, then.
	capacityBlockNotice          = 10 * time.Minute
	capacityBlockTerminationLead = 30 * time.Minute
	// capacityBlockMargin is kept between a block's drain deadline and its
	// first terminations: the drain's deadline also bounds the wait for the
	// evicted pods' volumes, and the first instance may go at once. A
	// minute is a tenth of the notice, as SPOT_DRAIN_TIMEOUT's default keeps
	// a sixth of the spot one (20 s); the grace cap then lets every tier of
	// pods run the whole 9-minute window between them.
	capacityBlockMargin = time.Minute
)

// capacityInterruption handles an interruptible Capacity Reservation's
// interruption warning as a spot warning: the node drained within the
// notice (drainDeadline), the pods' grace capped at SPOT_GRACE_PERIOD_CAP.
func (r *advisory) capacityInterruption(ctx context.Context) error {
	timeout := r.h.cfg.SpotDrainTimeout
	err := r.advisory(ctx, r.ev.InstanceIDs[0], config.ActionDrain, timeout)
	if r.out.Action == ActionDrained || r.out.Action == ActionUnfinished {
		notice := "drained until " + r.drainDeadline(timeout).UTC().Format(time.RFC3339)
		if at := r.ev.Capacity.TerminationTime; !at.IsZero() {
			notice = "EC2 takes the instance at " + at.UTC().Format(time.RFC3339) + "; " + notice
		}
		r.out.Detail = joinDetail(r.out.Detail, notice)
	}
	return err
}

// capacityBlockTerminations is when the instances of the block of ev (a
// KindCapacityBlockExpiry) begin to terminate: capacityBlockNotice after the
// warning (or after start, when this drain began, if that is sooner: a
// clock ahead of ours), or capacityBlockTerminationLead before the block's
// end, when the warning gave it and that comes sooner.
func capacityBlockTerminations(ev event.Event, start time.Time) time.Time {
	at := warned(ev, start).Add(capacityBlockNotice)
	if end := ev.CapacityBlock.EndDate; !end.IsZero() && end.Add(-capacityBlockTerminationLead).Before(at) {
		at = end.Add(-capacityBlockTerminationLead)
	}
	return at
}

// capacityBlock handles a Capacity Block's expiration warning, which names
// the block's Capacity Reservation and none of its instances. Its instances
// of this cluster are read from EC2 (DescribeInstances, filtered by the
// reservation and the cluster's tag: safety rule 4, only this cluster's
// instances), and each is drained as on a spot warning, by the time the
// block's instances begin to terminate (drainDeadline). One instance is
// drained in this invocation; several fan out, one invocation each, as a
// scheduled change's do, or are drained in parallel here when the function
// cannot invoke itself (scheduledChange says why). A continuation narrowed
// to one of them drains that one.
func (r *advisory) capacityBlock(ctx context.Context) error {
	if len(r.ev.InstanceIDs) == 1 {
		return r.capacityBlockInstance(ctx, r.ev.InstanceIDs[0])
	}
	cr := r.ev.CapacityBlock.ReservationID
	found, err := instance.InReservation(ctx, r.h.c.EC2, r.h.clock, cr, r.h.cfg.ClusterTagKey)
	if err != nil {
		r.step(StepLookup, "instances of %s unreadable", cr)
		return fmt.Errorf("reading the instances of capacity reservation %s: %w", cr, err)
	}
	var ids []string
	for id, inst := range found {
		if inst.HasTag(r.h.cfg.ClusterTagKey) { // the filter's promise, read again
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	r.step(StepLookup, "%d instances of this cluster in %s: %v", len(ids), cr, ids)
	switch {
	case len(ids) == 0:
		r.out.Action = ActionIgnored
		r.out.Detail = fmt.Sprintf("capacity reservation %s has no running or pending instance with the tag %s: nothing to drain", cr, r.h.cfg.ClusterTagKey)
		return nil
	case len(ids) == 1:
		return r.capacityBlockInstance(ctx, ids[0])
	case r.canFanOut():
		return r.fanOut(ctx, ids)
	}
	err = r.eachInParallel(ctx, ids, (*advisory).capacityBlockInstance)
	r.out.Detail = fmt.Sprintf("%d instances of capacity reservation %s handled in parallel; %s", len(ids), cr, r.capacityBlockNotice())
	return err
}

// capacityBlockInstance drains one instance of the Capacity Block, once EC2
// says again that it is this cluster's (rule 4) and runs in the block: a
// continuation may name any instance, and only the block's are its to
// drain.
func (r *advisory) capacityBlockInstance(ctx context.Context, id string) error {
	cr := r.ev.CapacityBlock.ReservationID
	r.out.Instance = id
	r.log = r.log.With("instance", id)
	inst, ours, err := r.ours(ctx, id)
	if err != nil || !ours {
		return err
	}
	if inst.Found && inst.CapacityReservationID != cr {
		r.out.Action = ActionIgnored
		r.out.Detail = fmt.Sprintf("instance %s runs in capacity reservation %q, not %s: not this warning's to drain", id, inst.CapacityReservationID, cr)
		return nil
	}
	n, err := r.findNode(ctx, inst)
	if err != nil {
		return err
	}
	err = r.onNode(ctx, inst, n, config.ActionDrain, 0)
	if r.out.Action == ActionDrained || r.out.Action == ActionUnfinished {
		r.out.Detail = joinDetail(r.out.Detail, r.capacityBlockNotice())
	}
	return err
}

// capacityBlockNotice says when the block's instances go, and until when
// they are drained.
func (r *advisory) capacityBlockNotice() string {
	at := capacityBlockTerminations(r.ev, r.started)
	return fmt.Sprintf("capacity block %s: instances begin to terminate at %s; drained until %s",
		r.ev.CapacityBlock.ReservationID, at.UTC().Format(time.RFC3339), at.Add(-capacityBlockMargin).UTC().Format(time.RFC3339))
}

// joinDetail is the outcome's detail a and b, either of which may be empty.
func joinDetail(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
