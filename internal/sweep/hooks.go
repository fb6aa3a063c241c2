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
	// Ask: the plan cannot tell which action of ours holds the instance,
	// and Auto Scaling is asked before anything is done — a heartbeat of a
	// hook answers only for an action of that hook that holds the instance
	// — then Else, the next action of ours that may hold it (nil: none
	// left). Two cases: the instance waits in Warmed:Pending:Wait, which
	// Auto Scaling uses for both ways into a warm pool (a launch into it, a
	// scale-in with ReuseOnScaleIn), in a group with hooks for both
	// transitions (another tool's launch hook is common on warm pools); or
	// the transition has two hooks of ours (HOOK_NAMES: a rename in flight,
	// a hook kept from before the templates), and one put after the
	// instance began to wait holds no action of it. The first that holds
	// it is drained under, its other hooks of ours on the transition being
	// its siblings (kept alive and completed with it, rule 17).
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
// whose transition is one of ways, or a note saying why none is taken. When
// more than one action of ours may hold it (two ways, two hooks of ours on
// a transition) they are asked in turn (Hook.Ask), each way's hooks in
// ourHooks' order.
func planHook(cfg Config, g Group, gi astypes.Instance, ways []event.LifecycleTransition) (Hook, string) {
	id := aws.ToString(gi.InstanceId)
	var cands []Hook
	for _, t := range ways {
		for _, name := range ourHooks(cfg, g.Hooks, t) {
			h := Hook{Kind: event.KindTerminate, Action: event.LifecycleAction{AutoScalingGroupName: g.Name, HookName: name, InstanceID: id, Transition: t}}
			if t == event.TransitionLaunching {
				h.Kind = event.KindLaunch
			}
			if string(gi.LifecycleState) == stateWarmedPendingWait {
				h.Action.Destination = event.LocationWarmPool
			}
			cands = append(cands, h)
		}
	}
	switch {
	case len(cands) == 0:
		return Hook{}, fmt.Sprintf("%s waits in %s with no hook of ours (TERMINATE_HOOK_NAME, LAUNCH_HOOK_NAME, HOOK_NAMES): left to its owner", id, gi.LifecycleState)
	case len(ways) == 1 && len(cands) == 1:
		return cands[0], ""
	}
	for i := len(cands) - 2; i >= 0; i-- {
		cands[i].Else = &cands[i+1]
	}
	h := cands[0]
	h.Ask = true
	return h, ""
}

// ourHooks are the names of the hooks of ours among hooks for transition
// t: the templates' name for t (TERMINATE_HOOK_NAME, LAUNCH_HOOK_NAME)
// first when it is one of them, then the others by name. The order is the
// plan's, the same at every sweep.
func ourHooks(cfg Config, hooks []astypes.LifecycleHook, t event.LifecycleTransition) []string {
	var names []string
	for _, h := range hooks {
		name := aws.ToString(h.LifecycleHookName)
		if aws.ToString(h.LifecycleTransition) == string(t) && slices.Contains(cfg.HookNames, name) {
			names = append(names, name)
		}
	}
	primary := cfg.TerminateHook
	if t == event.TransitionLaunching {
		primary = cfg.LaunchHook
	}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == primary:
			return -1
		case b == primary:
			return 1
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(names)
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
