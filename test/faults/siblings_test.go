package faults

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// siblingScenarios: the hooks of ours beside the templates' (HOOK_NAMES)
// on the real harness, whose Auto Scaling ends an action at its hook's
// timeout with the hook's default result (motoext).
func siblingScenarios() []scenario {
	return []scenario{
		{"sibling-hook-abandon-mid-drain", siblingHookAbandonMidDrain},
	}
}

// siblingHookAbandonMidDrain (C2, rule 17): the group has our terminate
// hook (300 s, CONTINUE) and legacy-terminate (30 s, ABANDON: a hook of
// ours from before the templates), named by HOOK_NAMES. A scale-in starts
// an action under each; the drain is held by a PDB that allows no
// disruption, deleted at 45 s, past the sibling's timeout. The sibling's
// own event comes while the drain holds the instance, and is a duplicate.
// Every action of ours on the transition must be heartbeated until the
// drain completes it: left alone, the sibling times out at 30 s with
// ABANDON, which ends the drain's action too, and the instance goes on to
// terminate with the pod still on its node. Held: the instance leaves
// Terminating:Wait only once the node is drained, and both actions are
// completed by the function with CONTINUE, once each.
func siblingHookAbandonMidDrain(x *X) {
	const sibling, timeout = "legacy-terminate", 30 * time.Second
	x.scene(sceneOpts{nodes: 2})
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	_, err := asc.PutLifecycleHook(x.ctx, &autoscaling.PutLifecycleHookInput{
		AutoScalingGroupName: aws.String(x.asg), LifecycleHookName: aws.String(sibling),
		LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"),
		HeartbeatTimeout:    aws.Int32(int32(timeout / time.Second)), DefaultResult: aws.String("ABANDON"),
	})
	x.must(err)
	x.web("held", 1, -1, 1) // minAvailable 1 of 1: no disruption allowed
	hookNames := "HOOK_NAMES=" + sibling
	rt := x.function(150*time.Second, hookNames, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=5s")
	dup := x.function(30*time.Second, hookNames)
	x.observe(nil)
	payload := x.terminating("token-" + x.name)
	sibToken := "token-" + sibling + "-" + x.name
	x.must(env.AWS.RegisterLifecycleAction(x.ctx, moto.LifecycleAction{ASG: x.asg, Hook: sibling, InstanceID: x.target.ID, Token: sibToken}))
	x.began = time.Now()
	left := x.waitingUntil() // when the instance left Terminating:Wait
	lifted := x.deletePDBAfter("held", timeout+15*time.Second)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, err := x.invoke(rt, payload)
		x.expect(err == nil, "invocation failed: %v", err)
	}()
	for !x.logged(`"drain plan"`) && x.ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	sibEvent, err := harness.EventFile("asg-terminate.json", map[string]string{"AutoScalingGroupName": x.asg,
		"LifecycleHookName": sibling, "EC2InstanceId": x.target.ID, "LifecycleActionToken": sibToken})
	x.must(err)
	_, err = x.invoke(dup, sibEvent) // the drain holds the instance: a duplicate
	x.expect(err == nil, "the sibling's invocation failed: %v", err)
	<-drained
	<-lifted
	x.setDrained()
	x.expect(x.drained == "yes", "the node was not drained")
	drainedAt, leftAt := x.obs.drainedTime(), time.Time{}
	select {
	case leftAt = <-left:
	case <-time.After(10 * time.Second): // still waiting: the check below says so
	}
	if leftAt.IsZero() || drainedAt.IsZero() || leftAt.Before(drainedAt) {
		x.violate("the instance left Terminating:Wait at %s, the node drained at %s: it went on to terminate with the pod on it",
			fmtSince(leftAt, x.began), fmtSince(drainedAt, x.began))
	}
	x.siblingsEnded(drainedAt, harness.TerminateHook, sibling)
}

// siblingsEnded checks that each hook's action of the target was completed
// by the function, once, with CONTINUE, after the node drained at
// drainedAt; not ended by a timeout or another action's ABANDON.
func (x *X) siblingsEnded(drainedAt time.Time, hooks ...string) {
	ended, err := env.AWS.EndedActions(x.ctx)
	x.must(err)
	calls := x.lifecycleCalls("CompleteLifecycleAction")
	for _, hook := range hooks {
		var e *moto.EndedAction
		for i := range ended {
			if ended[i].InstanceID == x.target.ID && ended[i].Hook == hook {
				e = &ended[i]
			}
		}
		switch {
		case e == nil:
			x.expect(false, "the action of %s never ended", hook)
		case e.Cause != moto.EndCompleted:
			x.violate("the action of %s ended at %s by %s with %s, not completed by the function (drained at %s)", hook,
				fmtSince(e.Time, x.began), e.Cause, e.Result, fmtSince(drainedAt, x.began))
		default:
			x.expect(e.Result == "CONTINUE", "the action of %s completed with %s, want CONTINUE", hook, e.Result)
			if e.Time.Before(drainedAt) {
				x.violate("the action of %s completed at %s, before the node drained at %s", hook, fmtSince(e.Time, x.began), fmtSince(drainedAt, x.began))
			}
		}
		n := 0
		for _, c := range calls {
			if c.Params["LifecycleHookName"] == hook && c.OK() {
				n++
			}
		}
		x.expect(n <= 1, "%d CompleteLifecycleAction calls for the action of %s", n, hook)
	}
}

// waitingUntil watches the target's lifecycle state in its group and says
// (once, on the channel) when it first left Terminating:Wait: zero if it
// had not within the scene's time.
func (x *X) waitingUntil() <-chan time.Time {
	out := make(chan time.Time, 1)
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	go func() {
		for x.ctx.Err() == nil {
			g, err := asc.DescribeAutoScalingGroups(x.ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{x.asg}})
			if err == nil && len(g.AutoScalingGroups) == 1 {
				for _, i := range g.AutoScalingGroups[0].Instances {
					if aws.ToString(i.InstanceId) == x.target.ID && i.LifecycleState != astypes.LifecycleStateTerminatingWait {
						x.t.Logf("%s is %s at %.1fs", x.target.ID, i.LifecycleState, time.Since(x.began).Seconds())
						out <- time.Now()
						return
					}
				}
			}
			select {
			case <-x.ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
		out <- time.Time{}
	}()
	return out
}
