package sweep

import (
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/event"
)

// Hook is a lifecycle action left waiting, to be handled as if its event had
// come.
type Hook struct {
	Kind   event.Kind // KindTerminate or KindLaunch
	Action event.LifecycleAction
	// Taken: an invocation took the action before (the instance's Lease is
	// there, lapsed): the function owes it a completion before it times out.
	Taken bool
	// Ask: the instance waits in Warmed:Pending:Wait, which Auto Scaling
	// uses for both ways into a warm pool (a launch into it, a scale-in
	// with ReuseOnScaleIn), in a group with hooks for both transitions
	// (another tool's launch hook is common on warm pools): the state does
	// not say which action holds it. Auto Scaling is asked before anything
	// is done — a heartbeat of a hook answers only for an action of that
	// hook that holds the instance — and Else, the action of ours for the
	// other way in, next (nil: the other way's hooks are not ours, never
	// asked).
	Ask  bool
	Else *Hook
}

// planHooks plans the lifecycle actions found waiting on a hook of ours
// (busy: the instances taken, or held by an invocation).
func (r *Readings) planHooks(cfg Config, p *Plan, held, taken, busy map[string]bool) {
	for _, g := range r.Groups {
		for _, gi := range g.all() {
			id := aws.ToString(gi.InstanceId)
			var ways []event.LifecycleTransition
			switch string(gi.LifecycleState) {
			case stateTerminatingWait:
				ways = []event.LifecycleTransition{event.TransitionTerminating}
			case statePendingWait:
				ways = []event.LifecycleTransition{event.TransitionLaunching}
			case stateWarmedPendingWait:
				ways = warmTransitions(g.Hooks)
			default:
				continue
			}
			if held[id] {
				p.Held = append(p.Held, id)
				busy[id] = true
				continue
			}
			h, note := planHook(cfg, g, gi, ways)
			if note != "" {
				p.Notes = append(p.Notes, note)
				continue
			}
			busy[id] = true
			if cfg.Shard != nil {
				continue // shard 0's to take: here only left alone
			}
			h.Taken = taken[id]
			p.Hooks = append(p.Hooks, h)
		}
	}
}

// planHook is the action of ours that may hold gi, waiting in a state
// whose transition is one of ways (two: which one is asked, Hook.Ask), or
// a note saying why none is taken.
func planHook(cfg Config, g Group, gi astypes.Instance, ways []event.LifecycleTransition) (Hook, string) {
	id := aws.ToString(gi.InstanceId)
	var cands []Hook
	for _, t := range ways {
		hooks := ourHooks(cfg, g.Hooks, t)
		switch len(hooks) {
		case 0:
			continue
		case 1:
		default:
			return Hook{}, fmt.Sprintf("%s waits in %s on hooks %s, all of them ours: none is guessed; name one hook per transition in TERMINATE_HOOK_NAME, LAUNCH_HOOK_NAME and HOOK_NAMES", id, gi.LifecycleState, strings.Join(hooks, ", "))
		}
		h := Hook{Kind: event.KindTerminate, Action: event.LifecycleAction{AutoScalingGroupName: g.Name, HookName: hooks[0], InstanceID: id, Transition: t}}
		if t == event.TransitionLaunching {
			h.Kind = event.KindLaunch
		}
		if string(gi.LifecycleState) == stateWarmedPendingWait {
			h.Action.Destination = event.LocationWarmPool
		}
		cands = append(cands, h)
	}
	switch {
	case len(cands) == 0:
		return Hook{}, fmt.Sprintf("%s waits in %s with no hook of ours (TERMINATE_HOOK_NAME, LAUNCH_HOOK_NAME, HOOK_NAMES): left to its owner", id, gi.LifecycleState)
	case len(ways) == 1:
		return cands[0], ""
	}
	h := cands[0]
	h.Ask = true
	if len(cands) > 1 {
		h.Else = &cands[1]
	}
	return h, ""
}

// ourHooks are the names of the hooks of ours among hooks for transition t.
func ourHooks(cfg Config, hooks []astypes.LifecycleHook, t event.LifecycleTransition) []string {
	var names []string
	for _, h := range hooks {
		name := aws.ToString(h.LifecycleHookName)
		if aws.ToString(h.LifecycleTransition) == string(t) && slices.Contains(cfg.HookNames, name) {
			names = append(names, name)
		}
	}
	return names
}

// warmTransitions are the transitions of the actions that may hold an
// instance in Warmed:Pending:Wait, which Auto Scaling uses for both ways
// into a warm pool (a launch into it, and a scale-in with ReuseOnScaleIn):
// those the group's hooks, anyone's, are for, the terminating one first.
func warmTransitions(hooks []astypes.LifecycleHook) []event.LifecycleTransition {
	var ts []event.LifecycleTransition
	for _, t := range []event.LifecycleTransition{event.TransitionTerminating, event.TransitionLaunching} {
		if slices.ContainsFunc(hooks, func(h astypes.LifecycleHook) bool { return aws.ToString(h.LifecycleTransition) == string(t) }) {
			ts = append(ts, t)
		}
	}
	return ts
}
