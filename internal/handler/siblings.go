package handler

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kretry "k8s.io/client-go/util/retry"

	"github.com/node-drainer/node-drainer/internal/lifecycle"
)

// completeSiblings completes, with the same result, the instance's actions
// under the other hooks of ours on the group's same transition. Two names
// of ours on one transition (HOOK_NAMES beside TERMINATE_HOOK_NAME: a
// rename in flight, or a hook of ours kept from before the templates) give
// two actions for one drain; the second event finds the instance's lease
// held and is a duplicate, so its hook would wait out its timeout (rule 3):
// the drain keeps it alive (keepAlive, rule 17) and completes it here. Only
// hooks named as ours are completed (rule 14), by instance (their tokens
// are in events this invocation has not seen); one no longer active is
// done.
func (k *hook) completeSiblings(ctx context.Context, result lifecycle.Result) {
	for _, sib := range k.siblingActions(ctx) {
		// a throttle is tried again: a sibling left would wait out its
		// timeout, or end the instance's actions with an ABANDON (rule 17;
		// the simulation's I3, seed 9552)
		var completed bool
		c := lifecycle.NewCompletion(k.h.c.ASG, sib, result)
		err := kretry.OnError(siblingCompleteBackoff, awsRetryable, func() (err error) {
			completed, err = c.Try(ctx)
			return err
		})
		switch {
		case err != nil:
			k.log.WarnContext(ctx, "could not complete the action of another hook of ours on this transition", "hook", sib.Hook, "error", err)
		case completed:
			k.step(StepHookCompleted, "%s too: %s (another hook of ours on this transition)", sib.Hook, result)
		}
	}
}

// siblingCompleteBackoff paces a sibling's completion tried again: 0.5, 1
// and 2 s apart.
var siblingCompleteBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 4}

// siblingActions are the instance's actions under the other hooks of ours
// on act's transition: as keepAlive read them, or else read now. With
// HOOK_NAMES empty there is none to look for: the templates' two names are
// on two transitions.
func (k *hook) siblingActions(ctx context.Context) []lifecycle.Action {
	if k.read || len(k.h.cfg.HookNames) == 0 {
		return k.siblings
	}
	hooks, err := lifecycle.Hooks(ctx, k.h.c.ASG, k.act.ASG)
	if err != nil {
		k.log.WarnContext(ctx, "could not read the group's hooks for other hooks of ours on this transition", "error", err)
		return nil
	}
	k.found(hooks)
	return k.siblings
}

// found takes act's siblings from a reading of the group's hooks.
func (k *hook) found(hooks []astypes.LifecycleHook) {
	k.read, k.siblings = true, nil
	if len(k.h.cfg.HookNames) == 0 {
		return
	}
	for _, name := range siblingHooks(hooks, k.act.Hook, k.h.cfg.OwnedHooks()) {
		k.siblings = append(k.siblings, lifecycle.Action{ASG: k.act.ASG, Hook: name, InstanceID: k.act.InstanceID})
	}
}

// beatFailed reports a failed heartbeat of a (act or a sibling). act no
// longer active ends the drain (gone; nil: nothing to end); a sibling's
// action no longer active (completed, timed out, or never begun: its hook
// put after the instance began to wait) is not an error: it is heartbeated
// no more (lifecycle.Beat drops it).
func (k *hook) beatFailed(ctx context.Context, log *slog.Logger, a lifecycle.Action, err error, gone func(error)) {
	switch {
	case a.Hook != k.act.Hook && lifecycle.IsNotActive(err):
		log.InfoContext(ctx, "the action of another hook of ours on this transition is no longer active: not heartbeated any more", "hook", a.Hook)
	case a.Hook != k.act.Hook:
		log.WarnContext(ctx, "heartbeat of another hook of ours on this transition failed", "hook", a.Hook, "error", err)
	default:
		log.WarnContext(ctx, "heartbeat failed", "error", err)
		if gone != nil && lifecycle.IsNotActive(err) {
			gone(fmt.Errorf("%w: %w", errHookGone, err))
		}
	}
}

// siblingHooks are the hooks of ours (owned) among hooks, but own, on own's
// transition.
func siblingHooks(hooks []astypes.LifecycleHook, own string, owned []string) []string {
	i := slices.IndexFunc(hooks, func(h astypes.LifecycleHook) bool { return aws.ToString(h.LifecycleHookName) == own })
	if i < 0 {
		return nil // own's transition unknown: none is taken for a sibling
	}
	transition := aws.ToString(hooks[i].LifecycleTransition)
	var out []string
	for _, h := range hooks {
		name := aws.ToString(h.LifecycleHookName)
		if name != own && aws.ToString(h.LifecycleTransition) == transition && slices.Contains(owned, name) {
			out = append(out, name)
		}
	}
	return out
}
