package faults

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"github.com/node-drainer/node-drainer/test/harness"
)

// uninstallScenarios: a removal of the deployment's hooks on the real
// harness, whose Auto Scaling completes the actions pending under a hook
// it deletes (motoext), as AWS does.
func uninstallScenarios() []scenario {
	return []scenario{
		{"uninstall-waits-for-drain-in-flight", uninstallWaitsForDrain},
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
	destroy, err := json.Marshal(map[string]any{"NodeDrainer": "lifecycle-hooks", "AsgNames": []string{x.asg},
		"TerminateHookName": harness.TerminateHook, "CreateTerminateHook": "true", "LaunchHookName": harness.LaunchHook, "CreateLaunchHook": "false",
		"HeartbeatTimeout": "300", "tf": map[string]any{"action": "delete"}})
	x.must(err)
	out, err := x.invoke(un, destroy)
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
