package handler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/node"
)

// maxParallelInstances bounds the instances of one scheduled change handled
// at once inside one invocation (when it cannot fan out).
const maxParallelInstances = 8

// scheduledChange handles an AWS Health scheduled change.
//
// Each affected instance is handled on its own budget. When the function
// can invoke itself (the same conditions as a continuation), an event
// listing several instances fans out: one asynchronous invocation per
// instance, carrying the original event narrowed to that instance. Each
// then has a whole Lambda run (15 minutes) for its drain, its own retries
// and DLQ entry on failure, its own log line and response, and one slow
// drain never eats another's time — as if Health had sent one event per
// instance. Otherwise (no Lambda client, CONTINUE_LONG_DRAINS off, dry
// run) the instances are handled in parallel goroutines, at most
// maxParallelInstances at once, in this invocation: each still has its own
// drain deadline, and none waits for another to finish.
func (r *advisory) scheduledChange(ctx context.Context) error {
	ids := r.ev.InstanceIDs
	switch {
	case len(ids) == 1:
		return r.scheduledInstance(ctx, ids[0])
	case r.canFanOut():
		return r.fanOut(ctx, ids)
	default:
		return r.eachInParallel(ctx, ids, (*advisory).scheduledInstance)
	}
}

// canFanOut says whether the function may invoke itself once per instance.
func (r *advisory) canFanOut() bool {
	return r.h.cfg.ContinueLongDrains && r.h.c.Lambda != nil && r.h.cfg.FunctionName != "" && !r.h.cfg.DryRun
}

// fanOut invokes the function asynchronously once per instance. Should an
// invocation fail, the error makes EventBridge retry the whole event: the
// instances already invoked are handled twice, which is safe (every step is
// idempotent).
func (r *advisory) fanOut(ctx context.Context, ids []string) error {
	var errs []error
	var sent []string
	for _, id := range ids {
		payload, err := event.NewContinuationFor(r.raw, r.started, 1, id)
		if err == nil {
			err = r.invokeSelf(ctx, payload)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("invoking %s for instance %s: %w", r.h.cfg.FunctionName, id, err))
			continue
		}
		sent = append(sent, id)
	}
	r.out.Instance = ""
	r.out.Action = ActionFannedOut
	r.out.Detail = "one invocation per instance: " + strings.Join(sent, ", ")
	if err := errors.Join(errs...); err != nil {
		r.fail(&Failure{Kind: ErrFanOut, Cause: err})
		return err
	}
	return nil
}

// eachInParallel handles every instance of ids in this invocation with
// handle (a Health event's, a Capacity Block's), in parallel (at most
// maxParallelInstances at once), each with a run of its own, ended as the sweep ends each
// instance's (end): its outcome events (Node Drained, …), its metrics
// line and its "handled" line, once what it began aside (recordSoon, the
// attachments read ahead) is done, before the handler returns (Lambda
// would freeze it, to resume in a later invocation). Their outcomes are
// in Outcome.Instances.
func (r *advisory) eachInParallel(ctx context.Context, ids []string, handle func(*advisory, context.Context, string) error) error {
	outs := make([]Outcome, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, maxParallelInstances)
	var wg sync.WaitGroup
	for i, id := range ids {
		ev := r.ev
		ev.InstanceIDs = []string{id}
		sub := &invocation{h: r.h, ev: ev, raw: r.raw, started: r.started, attempt: r.attempt, deadline: r.deadline,
			out: Outcome{Event: ev.Kind, Instance: id, DryRun: r.h.cfg.DryRun, Attempt: r.out.Attempt}, log: r.log,
			rep: newReport(r.h.now(), r.h.now)}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			sctx := cluster.WithRetryObserver(ctx, sub.rep.retried)
			errs[i] = sub.end(sctx, handle(&advisory{sub}, sctx, id))
			outs[i] = sub.out
		})
	}
	wg.Wait()
	r.out.Instance = ""
	r.out.Action = ActionPerInstance
	r.out.Detail = fmt.Sprintf("%d instances handled in parallel", len(ids))
	r.out.Instances = outs
	return errors.Join(errs...)
}

// scheduledInstance handles one instance of a scheduled change, by its
// status and start time:
//   - closed: the change is over or cancelled; the hold node-drainer placed
//     for it is lifted, and only that one (marks held for other causes,
//     or placed by others, stay);
//   - upcoming or open, before startTime − SCHEDULED_CHANGE_LEAD_TIME: at
//     most a cordon (when SCHEDULED_CHANGE_ACTION is cordon or drain), held
//     until the change's end plus ADVISORY_MARK_TTL; with drain, the
//     response says when the drain is due, and a later Health event (Health
//     announces the change again as it opens) or a sweep carries it;
//   - from startTime − lead time on: cordon or drain, as configured.
func (r *advisory) scheduledInstance(ctx context.Context, id string) error {
	sc := r.ev.Scheduled
	action := r.h.cfg.ScheduledChangeAction
	r.out.Instance = id
	r.log = r.log.With("instance", id)
	if sc.Status != event.HealthClosed && action == config.ActionIgnore && !r.h.cfg.GroupTags {
		r.out.Action, r.out.Detail = ActionIgnored, "configured to ignore "+string(r.ev.Kind)
		return nil
	}
	inst, n, _, err := r.instanceNode(ctx, id)
	if err != nil || n == nil {
		return err
	}
	now, timeout := r.h.now(), r.h.cfg.DrainTimeout
	if sc.Status != event.HealthClosed && r.h.cfg.GroupTags {
		if action, timeout = (policy{r.invocation}).advised(ctx, inst, action, timeout); action == config.ActionIgnore {
			r.out.Action, r.out.Detail = ActionIgnored, "configured to ignore "+string(r.ev.Kind)+" (the group's policy, or SCHEDULED_CHANGE_ACTION)"
			return nil
		}
	}
	if sc.Status == event.HealthClosed {
		return r.scheduledClosed(ctx, n, sc, now)
	}
	if r.leftAlone(ctx, n, inst.Down()) {
		return nil
	}
	if inst.Down() {
		return (&abruptRelease{r.invocation}).release(ctx, n, inst)
	}

	expires := scheduledExpiry(sc, r.h.cfg.AdvisoryMarkTTL)
	due := sc.StartTime.Add(-r.h.cfg.ScheduledChangeLeadTime)
	if action == config.ActionCordon || now.Before(due) {
		made, err := node.ApplyTo(ctx, r.h.c.Kube, n, node.Mark{Cause: node.CauseScheduled, Cordon: true, Expires: expires}, now, r.h.cfg.DryRun)
		if err != nil {
			return err
		}
		r.out.Action = ActionCordoned
		r.out.Detail = fmt.Sprintf("scheduled change %s starts %s; cordoned until %s", sc.EventTypeCode, sc.StartTime.Format(time.RFC3339), expires.Format(time.RFC3339))
		if action == config.ActionDrain {
			r.out.Detail += fmt.Sprintf("; drain due at %s (start less SCHEDULED_CHANGE_LEAD_TIME %s)", due.Format(time.RFC3339), r.h.cfg.ScheduledChangeLeadTime)
		}
		if made.Cordoned {
			r.record(ctx, n, node.EventCordonedFor(r.out.Detail))
		}
		return nil
	}
	return r.drainAdvised(ctx, n, id, node.CauseScheduled, expires, r.started.Add(timeout))
}

// scheduledClosed lifts the hold node-drainer placed on n for a scheduled
// change now closed (over or cancelled), whatever the configuration says
// now: it may have changed since.
func (r *advisory) scheduledClosed(ctx context.Context, n *corev1.Node, sc *event.ScheduledChange, now time.Time) error {
	if !node.Holds(n, node.CauseScheduled) {
		r.out.Action, r.out.Detail = ActionIgnored, "scheduled change "+string(sc.Status)+": node-drainer holds nothing on the node for it"
		return nil
	}
	undone, err := node.Release(ctx, r.h.c.Kube, n.Name, node.CauseScheduled, now, r.h.cfg.DryRun)
	if err != nil {
		return err
	}
	r.out.Action = ActionUnmarked
	r.out.Detail = fmt.Sprintf("scheduled change %s closed: lifted its hold (removed: cordon=%v, drain taint=%v, load-balancer exclusion=%v; marks other causes or others hold stay)",
		sc.EventTypeCode, undone.Cordoned, undone.Draining, undone.Labeled)
	r.record(ctx, n, node.EventRecovered("", r.out.Detail))
	return nil
}

// scheduledExpiry is when a scheduled change's hold lapses if the instance
// still runs: ttl after the change's end (its start when Health announced
// no end). A change rescheduled later is announced again, and held again.
func scheduledExpiry(sc *event.ScheduledChange, ttl time.Duration) time.Time {
	end := sc.StartTime
	if sc.EndTime.After(end) {
		end = sc.EndTime
	}
	return end.Add(ttl)
}
