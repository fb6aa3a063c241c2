package faults

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/test/harness"
)

// uninstallScenarios: a removal of the deployment's hooks on the real
// harness, whose Auto Scaling completes the actions pending under a hook
// it deletes (motoext), as AWS does.
func uninstallScenarios() []scenario {
	return []scenario{
		{"uninstall-waits-for-drain-in-flight", uninstallWaitsForDrain},
		{"uninstall-leaves-hooks-not-ours", uninstallLeavesHooksNotOurs},
	}
}

// uninstallWaitsForDrain (H1 of issue 54, rule 17): a scale-in's drain is
// held by a PDB that allows no disruption, deleted 40 s in; meanwhile the
// deployment is uninstalled (terraform destroy's invocation, delete, on
// the group it lists). The hook is ours (its mark names the function).
// Deleting it completes the action under it with CONTINUE: the instance
// would go on to terminate with the pod on its node. The uninstall must
// wait (its bound, 150 s less DEADLINE_MARGIN less a minute: 85 s) until
// the drain has completed the action, then delete the hook and say no
// drain cut. Held: the action completed by the function with CONTINUE
// after the node drained, not ended by the deletion; the hook gone; the
// uninstall's answer says it removed it and cut nothing.
func uninstallWaitsForDrain(x *X) {
	x.scene(sceneOpts{nodes: 2})
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	_, err := asc.PutLifecycleHook(x.ctx, &autoscaling.PutLifecycleHookInput{ // the hook as the deployment put it: marked its own
		AutoScalingGroupName: aws.String(x.asg), LifecycleHookName: aws.String(harness.TerminateHook),
		LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300),
		DefaultResult: aws.String("CONTINUE"), NotificationMetadata: aws.String(`{"node-drainer":["node-drainer"]}`),
	})
	x.must(err)
	x.web("held", 1, -1, 1) // minAvailable 1 of 1: no disruption allowed
	rt := x.function(150*time.Second, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=5s")
	un := x.function(150*time.Second, "DEADLINE_MARGIN=5s")
	x.observe(nil)
	payload := x.terminating("token-" + x.name)
	x.began = time.Now()
	lifted := x.deletePDBAfter("held", 40*time.Second)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, err := x.invoke(rt, payload)
		x.expect(err == nil, "the drain's invocation failed: %v", err)
	}()
	for !x.logged(`"drain plan"`) && x.ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	out, err := x.invoke(un, x.destroyPayload(false))
	removedAt := time.Now()
	x.expect(err == nil && strings.Contains(out.Detail, "removed "+x.asg+"/"+harness.TerminateHook), "the uninstall: %+v, %v; want the hook removed", out, err)
	x.expect(!strings.Contains(out.Detail, "cut "), "the uninstall said %q: a drain cut", out.Detail)
	<-drained
	<-lifted
	x.setDrained()
	x.expect(x.drained == "yes", "the node was not drained")
	drainedAt := x.obs.drainedTime()
	if drainedAt.IsZero() || removedAt.Before(drainedAt) {
		x.violate("the uninstall ended at %s, the node drained at %s: the hook was deleted under the drain", fmtSince(removedAt, x.began), fmtSince(drainedAt, x.began))
	}
	hooks, err := asc.DescribeLifecycleHooks(x.ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(x.asg), LifecycleHookNames: []string{harness.TerminateHook}})
	x.must(err)
	x.expect(len(hooks.LifecycleHooks) == 0, "the hook is still there after the uninstall")
	x.siblingsEnded(drainedAt, harness.TerminateHook)
}

// destroyPayload is terraform destroy's invocation of the hooks resource
// (delete) for the scene's group, listed; launch: the launch hook too.
func (x *X) destroyPayload(launch bool) []byte {
	b, err := json.Marshal(map[string]any{"NodeDrainer": "lifecycle-hooks", "AsgNames": []string{x.asg},
		"TerminateHookName": harness.TerminateHook, "CreateTerminateHook": "true", "LaunchHookName": harness.LaunchHook, "CreateLaunchHook": fmt.Sprint(launch),
		"HeartbeatTimeout": "300", "tf": map[string]any{"action": "delete"}})
	x.must(err)
	return b
}

// uninstallLeavesHooksNotOurs (S3 of issue 54, rule 18): the group's hooks
// of our names were made by hand, the terminate hook with JSON metadata of
// its own, the launch hook with a plain string, and another tool's hook
// sits beside them; a scale-in waits under the terminate hook. The
// deployment is uninstalled (terraform destroy's invocation, both hooks'
// names). None of the three is the deployment's (no mark names it): each
// must keep its settings and its NotificationMetadata byte for byte, and
// the action waiting under the terminate hook must not be ended. Held:
// the hooks as they were, the action still pending, the instance still in
// Terminating:Wait, the answer removing nothing.
func uninstallLeavesHooksNotOurs(x *X) {
	x.scene(sceneOpts{nodes: 1})
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	for _, h := range []struct{ name, transition, meta string }{
		{harness.TerminateHook, "autoscaling:EC2_INSTANCE_TERMINATING", `{"team":"ops","Node-Drainer":["node-drainer"],"note":"made by hand"}`},
		{harness.LaunchHook, "autoscaling:EC2_INSTANCE_LAUNCHING", "made by hand: node-drainer"},
		{"other-tool-terminate", "autoscaling:EC2_INSTANCE_TERMINATING", `{"other-tool":{"queue":"q"}}`},
	} {
		_, err := asc.PutLifecycleHook(x.ctx, &autoscaling.PutLifecycleHookInput{AutoScalingGroupName: aws.String(x.asg), LifecycleHookName: aws.String(h.name),
			LifecycleTransition: aws.String(h.transition), HeartbeatTimeout: aws.Int32(600), DefaultResult: aws.String("ABANDON"), NotificationMetadata: aws.String(h.meta)})
		x.must(err)
	}
	read := func() []astypes.LifecycleHook {
		out, err := asc.DescribeLifecycleHooks(x.ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(x.asg)})
		x.must(err)
		slices.SortFunc(out.LifecycleHooks, func(a, b astypes.LifecycleHook) int {
			return strings.Compare(aws.ToString(a.LifecycleHookName), aws.ToString(b.LifecycleHookName))
		})
		return out.LifecycleHooks
	}
	before := read()
	x.terminating("token-" + x.name) // a scale-in waiting under the hand-made terminate hook
	un := x.function(60 * time.Second)
	out, err := x.invoke(un, x.destroyPayload(true))
	x.expect(err == nil && !strings.Contains(out.Detail, "removed "), "the uninstall: %+v, %v; want nothing removed", out, err)
	after := read()
	for _, b := range before {
		k := slices.IndexFunc(after, func(a astypes.LifecycleHook) bool {
			return aws.ToString(a.LifecycleHookName) == aws.ToString(b.LifecycleHookName)
		})
		if k < 0 {
			x.violate("the hook %s (metadata %q), not the deployment's, was deleted by its uninstall", aws.ToString(b.LifecycleHookName), aws.ToString(b.NotificationMetadata))
			continue
		}
		if a := after[k]; aws.ToString(a.NotificationMetadata) != aws.ToString(b.NotificationMetadata) ||
			aws.ToInt32(a.HeartbeatTimeout) != aws.ToInt32(b.HeartbeatTimeout) || aws.ToString(a.DefaultResult) != aws.ToString(b.DefaultResult) {
			x.violate("the hook %s was %d %s %q, is %d %s %q after the uninstall", aws.ToString(b.LifecycleHookName),
				aws.ToInt32(b.HeartbeatTimeout), aws.ToString(b.DefaultResult), aws.ToString(b.NotificationMetadata),
				aws.ToInt32(a.HeartbeatTimeout), aws.ToString(a.DefaultResult), aws.ToString(a.NotificationMetadata))
		}
	}
	ended, err := env.AWS.EndedActions(x.ctx)
	x.must(err)
	for _, e := range ended {
		if e.InstanceID == x.target.ID {
			x.violate("the action of %s under %s ended by %s (%s): the uninstall ended a scale-in under a hook not its own", e.InstanceID, e.Hook, e.Cause, e.Result)
		}
	}
}
