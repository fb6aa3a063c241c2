package handler

import (
	"context"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/lifecycle"
)

// completeSiblings completes, with the same result, the instance's actions
// under the other hooks of ours on the group's same transition. Two names
// of ours on one transition (HOOK_NAMES beside TERMINATE_HOOK_NAME: a
// rename in flight, or a hook of ours kept from before the templates) give
// two actions for one drain; the second event finds the instance's lease
// held and is a duplicate, so its hook would wait out its timeout (rule 3).
// Only hooks named as ours are completed (rule 14), by instance (their
// tokens are in events this invocation has not seen); one no longer active
// is done. With HOOK_NAMES empty there is none to look for: the templates'
// two names are on two transitions.
func (k *hook) completeSiblings(ctx context.Context, result lifecycle.Result) {
	if len(k.h.cfg.HookNames) == 0 {
		return
	}
	out, err := k.h.c.ASG.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(k.act.ASG)})
	if err != nil {
		k.log.WarnContext(ctx, "could not read the group's hooks for other hooks of ours on this transition", "error", err)
		return
	}
	for _, name := range siblingHooks(out.LifecycleHooks, k.act.Hook, k.h.cfg.OwnedHooks()) {
		sib := lifecycle.Action{ASG: k.act.ASG, Hook: name, InstanceID: k.act.InstanceID}
		completed, err := lifecycle.Complete(ctx, k.h.c.ASG, sib, result)
		switch {
		case err != nil:
			k.log.WarnContext(ctx, "could not complete the action of another hook of ours on this transition", "hook", name, "error", err)
		case completed:
			k.step(StepHookCompleted, "%s too: %s (another hook of ours on this transition)", name, result)
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
