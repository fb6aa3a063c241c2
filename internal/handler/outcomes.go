package handler

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/drain"
	"github.com/node-drainer/node-drainer/internal/outcome"
	"github.com/node-drainer/node-drainer/internal/version"
)

// WithOutcomes makes the Handler put one event per outcome worth a
// person's attention through p (OUTCOME_EVENT_BUS); nil puts none.
func WithOutcomes(p *outcome.Publisher) Option {
	return func(h *Handler) { h.outcomes = p }
}

// outcomeEvents are the events an invocation's outcome gives: a drain
// that ended (drained or failed), a drain past OUTCOME_BLOCKED_AFTER in
// this invocation (once per drain: the invocation in which it passed), a
// forced release, a completed lifecycle action. A pure function of what the
// run recorded, so that every case is a table test.
func outcomeEvents(r *invocation, rep reportSnapshot) []outcome.Event {
	out := r.out
	d := outcome.Detail{
		Cluster:            r.h.cfg.ClusterName,
		Function:           r.h.cfg.FunctionName,
		Instance:           out.Instance,
		Node:               out.Node,
		Event:              string(out.Event),
		Result:             string(out.Action),
		Attempt:            max(out.Attempt, 1),
		DryRun:             r.h.cfg.DryRun,
		BlockedSeconds:     rep.pdbBlocked.Seconds(),
		Evicted:            out.Evicted,
		Remaining:          held(out.Remaining),
		PodsDeleted:        out.PodsDeleted,
		AttachmentsDeleted: out.AttachmentsDeleted,
		Evidence:           out.Evidence,
		Version:            version.Get(),
		Time:               rep.now,
	}
	if lc := r.ev.Lifecycle; lc != nil {
		d.AutoScalingGroup, d.LifecycleHook = lc.AutoScalingGroupName, lc.HookName
	}
	if rep.drainEnded {
		d.DrainSeconds = rep.drainLength.Seconds()
	}
	for _, s := range rep.steps {
		d.Timeline = append(d.Timeline, outcome.Step{AtMS: s.AtMS, Step: s.Step, Detail: s.Detail})
	}
	var events []outcome.Event
	with := func(t outcome.DetailType, f func(*outcome.Detail)) {
		e := d
		f(&e)
		events = append(events, outcome.Event{Type: t, Detail: e})
	}
	switch {
	case out.Action == ActionDrained && rep.drainEnded:
		with(outcome.NodeDrained, func(e *outcome.Detail) { e.Remaining = nil })
	case out.Action == ActionFailed && errors.Is(out.err, ErrDrainFailed), out.Action == ActionEndedElsewhere:
		with(outcome.NodeDrainFailed, func(e *outcome.Detail) { e.Reason = out.Detail })
	case drainLeft(out, rep) && (passedBlockedAfter(r.h.cfg.OutcomeBlockedAfter, r.started, rep) || heldByPolicy(out.Remaining)):
		with(outcome.NodeDrainBlocked, func(e *outcome.Detail) {
			e.Result = "blocked"
			e.DrainSeconds = rep.now.Sub(r.started).Seconds()
			e.BlockedSeconds = max(e.BlockedSeconds, blockedAtLeast(r, rep))
			e.Reason = blockedReason(out, rep, rep.now.Sub(r.started))
			e.Timeline = nil
		})
	}
	if out.Action == ActionReleased && len(out.PodsDeleted)+len(out.AttachmentsDeleted) > 0 {
		with(outcome.NodeReleased, func(e *outcome.Detail) { e.Reason = out.Detail })
	}
	if rep.hookResult != "" && d.AutoScalingGroup != "" {
		with(outcome.LifecycleActionCompleted, func(e *outcome.Detail) {
			e.LifecycleResult, e.Reason, e.Timeline = rep.hookResult, rep.hookReason, nil
		})
	}
	return events
}

// drainLeft says that the run leaves its drain unfinished and going on:
// handed over to a continuation, or not (the hand-over failed, the
// apiserver failed, an advisory drain ended with pods left), but not a
// drain whose hook was found completed elsewhere. The pods left may be
// unknown (nothing was listed).
func drainLeft(out Outcome, rep reportSnapshot) bool {
	return out.Action == ActionContinued || rep.drainLeft && out.Action != ActionCompleted && out.Action != ActionIgnored
}

// blockedReason is why a drain is told blocked: how long it has run, the
// last failure when more than pods were left, and the invocation's own
// failure (a hand-over that failed).
func blockedReason(out Outcome, rep reportSnapshot, ran time.Duration) string {
	reason := "drain not finished after " + ran.Round(time.Second).String()
	if rep.leftWhy != "" {
		reason += ": " + rep.leftWhy
	}
	if out.Action == ActionFailed && out.Detail != "" {
		reason += "; " + out.Detail
	}
	return reason
}

// passedBlockedAfter: the drain passed OUTCOME_BLOCKED_AFTER during this
// invocation (it started before the mark, it is past it now), so that a
// drain continued over several invocations tells of it once.
func passedBlockedAfter(after time.Duration, started time.Time, rep reportSnapshot) bool {
	if after <= 0 {
		return false
	}
	mark := started.Add(after)
	return rep.begun.Before(mark) && !rep.now.Before(mark)
}

// held splits the outcome's remaining pods ("ns/name: why") into the pod
// and what holds it.
func held(remaining []string) []outcome.Held {
	var hs []outcome.Held
	for _, s := range remaining {
		pod, why, _ := strings.Cut(s, ": ")
		hs = append(hs, outcome.Held{Pod: pod, HeldBy: why})
	}
	return hs
}

// putOutcomes puts the run's outcome events, after every step of the
// drain (none waits on it), bounded by the Publisher and by ctx; an event
// not put (the bus failed, or refused it, or the invocation had less time
// left than the put's bound: outcome.Lost) is logged and counted in the
// invocation's metrics by why, never an error of the invocation.
func putOutcomes(ctx context.Context, r *invocation) {
	if r.h.outcomes == nil || r.rep == nil {
		return
	}
	events := outcomeEvents(r, r.rep.snapshot())
	if len(events) == 0 {
		return
	}
	putEvents(ctx, r, events)
}

// putEvents puts r's events, logging and counting in its report those not
// put (added to what the run's other puts counted).
func putEvents(ctx context.Context, r *invocation, events []outcome.Event) {
	lost, err := r.h.outcomes.Put(ctx, events...)
	if err != nil {
		types := make([]string, len(events))
		for i, e := range events {
			types[i] = string(e.Type)
		}
		r.log.WarnContext(ctx, "could not put outcome events", "bus", r.h.outcomes.Bus(), "failed", lost.Total(), "lost", lost, "events", types, "error", err)
	}
	r.rep.mu.Lock()
	defer r.rep.mu.Unlock()
	r.rep.outcomesPut += len(events) - lost.Total()
	if len(lost) > 0 && r.rep.outcomesLost == nil {
		r.rep.outcomesLost = outcome.Lost{}
	}
	for why, n := range lost {
		r.rep.outcomesLost[why] += n
	}
}

// startTeller is what tells of the drain's start at its first eviction
// (drain.Options.OnEvicted): Node Drain Started, once, put aside while
// the drain goes on (recording: the run's end waits for it), bounded by
// the Publisher and by the invocation's deadline (reserved), not by ctx:
// the drain's, which may end first. Nil when outcome events are off, or when this
// invocation did not mark the node: the drain began before it (a
// continuation, a retry, a later event of the same change), and its start
// was told then; but a continuation of a drain that has evicted nothing yet
// tells it (startUntold).
func startTeller(ctx context.Context, r *invocation, n *corev1.Node) func(drain.Pod) {
	if r.h.outcomes == nil || r.rep == nil || !r.marked && !r.startUntold {
		return nil
	}
	var once sync.Once
	return func(first drain.Pod) {
		once.Do(func() {
			r.told.Store(true)
			// put aside: the drain, the completion and the hand-over never
			// wait on it (rule 16); built now: the drain's goroutine reads
			// the run, not the put's
			ev := startedEvent(r, n.Name, first, r.h.now())
			r.recording.Go(func() {
				// not cut short when the drain ends first (its context
				// ends with it): bounded by the invocation's deadline
				pctx, cancel := r.reserved(ctx)
				defer cancel()
				putEvents(pctx, r, []outcome.Event{ev})
			})
		})
	}
}

// startedEvent is Node Drain Started: the drain of node, its first
// eviction (of first) accepted at at.
func startedEvent(r *invocation, node string, first drain.Pod, at time.Time) outcome.Event {
	d := outcome.Detail{
		Cluster:  r.h.cfg.ClusterName,
		Function: r.h.cfg.FunctionName,
		Instance: r.out.Instance,
		Node:     node,
		Event:    string(r.ev.Kind),
		Result:   "started",
		Reason:   "first eviction accepted: " + first.Namespace + "/" + first.Name,
		Attempt:  max(r.attempt, 1),
		DryRun:   r.h.cfg.DryRun,
		Version:  version.Get(),
		Time:     at,
	}
	if lc := r.ev.Lifecycle; lc != nil {
		d.AutoScalingGroup, d.LifecycleHook = lc.AutoScalingGroupName, lc.HookName
	}
	return outcome.Event{Type: outcome.NodeDrainStarted, Detail: d}
}

// reportSnapshot is what a report holds at one moment, read under its lock.
type reportSnapshot struct {
	begun, now             time.Time
	steps                  []Step
	pdbBlocked             time.Duration
	hookResult, hookReason string
	drainEnded             bool
	drainLength            time.Duration
	drainLeft              bool
	leftWhy                string
}

func (rep *report) snapshot() reportSnapshot {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	return reportSnapshot{begun: rep.begun, now: rep.now(), steps: append([]Step(nil), rep.steps...), pdbBlocked: rep.pdbBlocked,
		hookResult: rep.hookResult, hookReason: rep.hookReason, drainEnded: rep.drainEnded, drainLength: rep.drainLength,
		drainLeft: rep.drainLeft, leftWhy: rep.leftWhy}
}
