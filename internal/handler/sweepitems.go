package handler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/internal/sweep"
)

// sweepPathFloor is the least time a sweep item needs to start, whatever
// DEADLINE_MARGIN says: an apiserver write and an AWS call, each with a retry.
const sweepPathFloor = 2 * time.Second

// sweepPathMinimum is the least time the invocation's budget must still
// hold for the sweep to start an item — an instance's path above all, a
// hook's most of all. Before its budget ends, a hook's path must claim the
// instance's lease, heartbeat the hook (its age is unknown), find and mark
// the node and start evicting: calls of the same kind as the completion or
// the hand-over that DEADLINE_MARGIN is kept for, and then some progress. So
// it needs at least that margin again (and never less than sweepPathFloor).
// Started later, it would claim with a context already ended, act without
// a lease, and hand over or complete having done nothing: such an item is
// left to the next sweep, minutes away, where it starts with a full budget.
func (r *sweeper) sweepPathMinimum() time.Duration {
	return max(sweepPathFloor, r.h.cfg.DeadlineMargin)
}

// runSweep carries the plan out: the instances' paths in parallel (at most
// maxParallelInstances at once), each on an invocation of its own, as if its
// event had come now. An item whose turn comes when the budget holds less
// than sweepPathMinimum is not started: it is left for the next sweep, and
// a note says so.
func (r *sweeper) runSweep(ctx context.Context, plan sweep.Plan, sum *SweepSummary) {
	it := &sweepItems{sweeper: r, ctx: ctx, sum: sum, minimum: r.sweepPathMinimum()}
	it.g.SetLimit(maxParallelInstances)
	now := r.h.now() // the time of the dead and unmarked nodes' events: before any item waits for a slot
	it.hooks(plan.Hooks)
	for _, id := range plan.Dead {
		it.do(nil, id, it.path(&sum.Dead, id, r.sub(event.KindStateChange, id, now), func(sub *invocation) error { return (&stateChange{sub}).abrupt(ctx, id) }))
	}
	for _, id := range plan.Unmark {
		it.do(nil, id, it.path(&sum.Unmarked, id, r.sub(event.KindStateChange, id, now), func(sub *invocation) error { return (&stateChange{sub}).recover(ctx, id) }))
	}
	it.orphans(plan.Orphans)
	it.zombies(plan.Zombies)
	it.staleLeases(plan.Leases)
	_ = it.g.Wait() // nil: every failure is in sum.Failed
	sum.Leases = len(it.leases)
}

// sweepItems are the items of one sweep's plan being carried out side by
// side, and what they came to (the summary, under mu).
type sweepItems struct {
	*sweeper
	ctx     context.Context
	sum     *SweepSummary
	minimum time.Duration  // sweepPathMinimum
	g       errgroup.Group // its functions return nil: failures are noted
	mu      sync.Mutex
	leases  []string // the stale leases deleted
}

// note lists item in list, or among the failures with err.
func (it *sweepItems) note(list *[]string, item string, err error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	switch {
	case err != nil:
		it.sum.Failed = append(it.sum.Failed, item+": "+err.Error())
	case list != nil:
		*list = append(*list, item)
	}
}

// remark adds a note to the summary.
func (it *sweepItems) remark(format string, args ...any) {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.sum.Notes = append(it.sum.Notes, fmt.Sprintf(format, args...))
}

// doOr runs fn for item once a slot is free (Go waits for one): the budget
// is looked at when the item would start, not when it was queued. An item
// left so is kept for the next sweep by keep, when it has one (it says how,
// "" when it did nothing).
func (it *sweepItems) doOr(list *[]string, item string, fn func() error, keep func() string) {
	it.g.Go(func() error {
		if left := it.budget(it.ctx).Sub(it.h.now()); left < it.minimum {
			how := ""
			if keep != nil {
				how = keep()
			}
			it.remark("%s: left for the next sweep: budget spent (%s left, an item needs %s)%s", item, max(left, 0).Round(time.Millisecond), it.minimum, how)
			return nil
		}
		it.note(list, item, fn())
		return nil
	})
}

// do is doOr for an item nothing keeps.
func (it *sweepItems) do(list *[]string, item string, fn func() error) { it.doOr(list, item, fn, nil) }

// path is an instance's own path on sub: it acted (the item is listed) or
// it found nothing to do once it read again (the note says why).
func (it *sweepItems) path(list *[]string, id string, sub *invocation, fn func(*invocation) error) func() error {
	return func() error {
		err := sub.end(it.ctx, fn(sub))
		switch sub.out.Action {
		case ActionIgnored, ActionLeftAlone, ActionNotForced, ActionNoNode:
			it.remark("%s: %s: %s", id, sub.out.Action, sub.out.Detail)
			return err
		case ActionFailed:
			if err == nil && sub.out.LifecycleResult != "" {
				// its hook completed with the failure result at its
				// deadline: handled, as the path decides; a retry of the
				// sweep would change nothing
				it.remark("%s: hook completed with %s: %s", id, sub.out.LifecycleResult, sub.out.Detail)
				break
			}
			if err == nil {
				err = sub.out.Err() // a *Failure: a failed invocation says why
			}
		}
		if err == nil {
			it.note(list, id, nil)
		}
		return err
	}
}

// hooks takes the lifecycle actions found waiting, each on the path its
// event would have taken; one an invocation took before is heartbeated
// when it is left for the next sweep (keepForNextSweep).
func (it *sweepItems) hooks(hooks []sweep.Hook) {
	for _, h := range hooks {
		var keep func() string
		if h.Taken {
			keep = func() string { return it.keepForNextSweep(it.ctx, h) }
		}
		it.doOr(nil, h.Action.InstanceID, func() error { return it.take(h) }, keep)
	}
}

// take runs a lifecycle action found waiting on its path, once Auto
// Scaling has said which action holds the instance when the plan could not
// tell (sweep.Hook.Ask).
func (it *sweepItems) take(h sweep.Hook) error {
	id := h.Action.InstanceID
	if h.Ask {
		held, ok, err := it.ask(it.ctx, h)
		if err != nil {
			return err
		}
		if !ok {
			it.remark("%s: %s: no action of our hooks holds it (another tool's does): left to its owner", id, ActionLeftAlone)
			return nil
		}
		h = held
	}
	sub, err := it.swept(h)
	if err != nil {
		return err
	}
	return it.path(&it.sum.Hooks, id, sub, func(sub *invocation) error { return sub.dispatch(it.ctx) })()
}

// orphans deletes the attachments to nodes the cluster no longer has.
func (it *sweepItems) orphans(orphans []sweep.Orphan) {
	for _, o := range orphans {
		it.do(nil, o.Attachment.Name, func() error {
			kept, err := it.deleteOrphan(it.ctx, o)
			switch {
			case err != nil:
				return err
			case kept != "":
				it.remark("attachment %s to missing node %s kept: %s", o.Attachment.Name, o.Attachment.Spec.NodeName, kept)
			default:
				it.note(&it.sum.Orphans, o.Attachment.Name, nil)
			}
			return nil
		})
	}
}

// zombies reports the zombie nodes, and has those the plan says replaced.
func (it *sweepItems) zombies(zombies []sweep.Zombie) {
	for _, z := range zombies {
		it.do(&it.sum.Zombies, z.Node, func() error {
			replaced, err := it.zombie(it.ctx, z)
			if replaced {
				it.note(&it.sum.Replaced, z.InstanceID, nil)
			}
			return err
		})
	}
}

// staleLeases deletes the leases no invocation holds any more.
func (it *sweepItems) staleLeases(leases []coordinationv1.Lease) {
	for _, l := range leases {
		it.do(&it.leases, l.Name, func() error {
			if it.h.cfg.DryRun {
				return nil
			}
			return lease.Delete(it.ctx, it.h.c.Kube, &l) // gone already, or taken again since the reading: nil
		})
	}
}
