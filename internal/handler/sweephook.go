package handler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/sweep"
)

// keepForNextSweep heartbeats a waiting hook of ours that this sweep leaves
// for the next (its budget spent) when an invocation took it before (its
// Lease is there): that invocation may have failed to hand it over (an
// Invoke refused, then Lambda's retries), and the function owes the hook a
// completion before it times out (rule 3); the heartbeat gives the next
// sweep, 5 minutes away, a hook of a longer timeout than that to find. Each
// action of ours that may hold the instance is heartbeated (h's, then
// h.Else's: a sibling's too, rule 17); one that does not hold it answers
// "No active Lifecycle Action found", which is not a failure. A hook nobody
// took (its event lost) is not heartbeated: that would take it on with no
// invocation to carry it. The calls are bounded by the invocation's
// reserve, not by the spent budget. It says what it did, for the sweep's
// note; a dry run heartbeats nothing.
func (r *sweeper) keepForNextSweep(ctx context.Context, h sweep.Hook) string {
	if r.h.cfg.DryRun {
		return ""
	}
	rctx, cancel := r.reserved(ctx)
	defer cancel()
	hctx, hcancel := context.WithTimeout(rctx, keepHeartbeatLimit)
	defer hcancel()
	var failed []string
	held := 0
	for c := &h; c != nil; c = c.Else {
		act := actionOf(c.Action)
		switch err := lifecycle.Heartbeat(hctx, r.h.c.ASG, act); {
		case err == nil:
			held++
		case !lifecycle.IsNotActive(err):
			r.log.WarnContext(ctx, "could not heartbeat a hook left for the next sweep", "asg", act.ASG, "hook", act.Hook, "instance", act.InstanceID, "error", err)
			failed = append(failed, act.Hook+": "+err.Error())
		}
	}
	switch {
	case len(failed) > 0:
		return "; its heartbeat failed: " + strings.Join(failed, "; ")
	case held == 0:
		return "; its heartbeat found no action of ours holding it"
	}
	return "; heartbeated, so it outlives the wait"
}

// keepHeartbeatLimit bounds keepForNextSweep's heartbeat.
const keepHeartbeatLimit = 2 * time.Second

// sub is a run of its own for one instance of the sweep, as if an event of
// kind had come at now.
func (r *sweeper) sub(kind event.Kind, id string, now time.Time) *invocation {
	ev := event.Event{Kind: kind, ID: r.ev.ID, Source: r.ev.Source, DetailType: r.ev.DetailType, Time: now,
		InstanceIDs: []string{id}}
	return &invocation{h: r.h, ev: ev, raw: r.raw, started: r.started, attempt: 1, deadline: r.deadline,
		out: Outcome{Event: kind, Instance: id, DryRun: r.h.cfg.DryRun}, log: r.log.With("sweep", true),
		rep: newReport(r.h.now(), r.h.now)}
}

// swept is the run of a lifecycle action the sweep found waiting: its event
// made anew (no token), so a continuation of its drain carries it.
func (r *sweeper) swept(h sweep.Hook) (*invocation, error) {
	raw, err := event.NewSwept(h.Kind, h.Action, r.ev.Region, r.h.now())
	if err != nil {
		return nil, err
	}
	ev, err := event.Parse(raw)
	if err != nil {
		return nil, err
	}
	// its age unknown: heartbeated at once, and its drain's start read
	// from the node's drain mark (see resumeStart)
	return &invocation{h: r.h, ev: ev, raw: raw, started: r.h.now(), attempt: 1, deadline: r.deadline, fromSweep: true,
		out: Outcome{Event: ev.Kind, Instance: h.Action.InstanceID, DryRun: r.h.cfg.DryRun},
		log: r.h.log.With("sweep", true, "event", ev), rep: newReport(r.h.now(), r.h.now)}, nil
}

// ask finds which action of ours, if any, holds an instance waiting in
// Warmed:Pending:Wait (sweep.Hook.Ask): the group has hooks for both ways
// into its warm pool, and the state does not tell a scale-in from a launch.
// A heartbeat of a hook answers only for an action of that hook that holds
// the instance ("No active Lifecycle Action found" otherwise), so each
// action of ours is asked in turn, h first, then h.Else; ok false: none
// holds it (another tool's hook does), and nothing was done. The heartbeat
// is the one the path sends at once anyway (rule 16); a dry run asks too,
// and then completes what it found at once, as any dry run does. Any other
// answer is an error: the next sweep asks again.
func (r *sweeper) ask(ctx context.Context, h sweep.Hook) (held sweep.Hook, ok bool, err error) {
	for c := &h; c != nil; c = c.Else {
		hctx, cancel := context.WithTimeout(ctx, askLimit)
		err := lifecycle.Heartbeat(hctx, r.h.c.ASG, actionOf(c.Action))
		cancel()
		switch {
		case err == nil:
			return *c, true, nil
		case !lifecycle.IsNotActive(err):
			return h, false, fmt.Errorf("asking Auto Scaling which action holds the instance in the warm pool: %w", err)
		}
	}
	return h, false, nil
}

// askLimit bounds each heartbeat of ask.
const askLimit = 5 * time.Second
