package install

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
)

// checkTagDiscovery is tag_discovery on one path, after its deploy: two
// node groups created now, after the deployment, one carrying the tag the
// deployed function chooses groups by (its ASG_TAG_KEY=ASG_TAG_VALUE), one
// not. The function's sweep (the scheduled event, invoked as the schedule
// would) puts the terminate hook on the tagged group, with the settings the
// templates give the hooks they create, and none on the other; the deployed
// terminate rule matches the tagged group's event of our hook; then a node
// of the tagged group is drained and its lifecycle action completed, which
// the emulator accepts only for a hook the group has (drainWith). Nothing
// is redeployed. The groups are deleted at the end.
func checkTagDiscovery(t *testing.T, ctx context.Context, prefix string, fn deployedFunction) {
	key, value := fn.Env["ASG_TAG_KEY"], fn.Env["ASG_TAG_VALUE"]
	if key == "" {
		t.Fatal("the deployed function chooses no node groups by tag (ASG_TAG_KEY is empty): the templates' default is node-drainer.io/enabled=true")
	}
	tagged, untagged := prefix+"-tagged", prefix+"-untagged"
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	deleteGroupsAtEnd(t, ctx, tagged, untagged)
	scene := newDrainSceneTagged(t, ctx, tagged, 2, map[string]string{key: value})
	if _, err := env.CreateASG(ctx, harness.ASGSpec{Name: untagged, Size: 1, Tags: map[string]string{key: "not-" + value}}); err != nil {
		t.Fatal(err)
	}
	hooks := func(g string) []astypes.LifecycleHook {
		out, err := asc.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(g)})
		if err != nil {
			t.Fatal(err)
		}
		return out.LifecycleHooks
	}
	for _, g := range []string{tagged, untagged} {
		if h := hooks(g); len(h) != 0 {
			t.Fatalf("%s has hooks before the sweep: %+v", g, h)
		}
	}

	sweepDeployed(t, ctx, fn)
	want := fn.TerminateHook
	var found bool
	for _, h := range hooks(tagged) {
		if aws.ToString(h.LifecycleHookName) != want {
			continue
		}
		found = true
		if aws.ToString(h.LifecycleTransition) != "autoscaling:EC2_INSTANCE_TERMINATING" || aws.ToString(h.DefaultResult) != "CONTINUE" ||
			fmt.Sprint(aws.ToInt32(h.HeartbeatTimeout)) != fn.Env["HEARTBEAT_TIMEOUT"] {
			t.Errorf("hook %s on %s: %s, %s, %d s; want terminating, CONTINUE, HEARTBEAT_TIMEOUT %s s", want, tagged,
				aws.ToString(h.LifecycleTransition), aws.ToString(h.DefaultResult), aws.ToInt32(h.HeartbeatTimeout), fn.Env["HEARTBEAT_TIMEOUT"])
		}
	}
	if !found {
		t.Fatalf("the sweep put no hook %s on the tagged group %s (hooks %+v)", want, tagged, hooks(tagged))
	}
	if h := hooks(untagged); len(h) != 0 {
		t.Errorf("the group %s without the tag got hooks: %+v", untagged, h)
	}

	// the deployed terminate rule forwards the tagged group's lifecycle
	// events (it matches our hook's name, not the groups), and not another
	// hook's: the event drainWith sends is one EventBridge would deliver
	eb := eventbridge.NewFromConfig(env.AWS.AWSConfig())
	rule, err := eb.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(fn.Name + "-terminate-hook")})
	if err != nil {
		t.Fatal(err)
	}
	for hook, want := range map[string]bool{fn.TerminateHook: true, "other-tool-hook": false} {
		ev, err := harness.EventFile("asg-terminate.json", map[string]string{
			"AutoScalingGroupName": tagged, "LifecycleHookName": hook, "EC2InstanceId": scene.Instances[0].ID, "LifecycleActionToken": "t"})
		if err != nil {
			t.Fatal(err)
		}
		m, err := eb.TestEventPattern(ctx, &eventbridge.TestEventPatternInput{Event: aws.String(string(ev)), EventPattern: rule.EventPattern})
		if err != nil {
			t.Fatalf("TestEventPattern: %v", err)
		}
		if m.Result != want {
			t.Errorf("rule %s (%s) matches the terminate event of %s's hook %s: %v, want %v", aws.ToString(rule.Name), aws.ToString(rule.EventPattern), tagged, hook, m.Result, want)
		}
	}

	drainWith(t, ctx, scene, fn)

	if h := hooks(untagged); len(h) != 0 {
		t.Errorf("the group %s without the tag got hooks: %+v", untagged, h)
	}
}

// sweepDeployed runs the deployed function's sweep once (the scheduled
// event, invoked as the schedule would). The sweep also reconciles the rest
// of the harness's cluster: a failure there is logged, and the callers
// check the hooks.
func sweepDeployed(t *testing.T, ctx context.Context, fn deployedFunction) {
	t.Helper()
	rt := startDeployed(t, ctx, fn)
	payload, err := harness.EventFile("sweep.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Logf("the sweep reported: %v", err)
	} else if out.Sweep != nil {
		t.Logf("the sweep: %s; hooks put %v", out.Detail, out.Sweep.HooksPut)
	}
}

// deleteGroupsAtEnd deletes the groups, with their instances, when t ends,
// and the nodes of those instances, as the cloud node controller deletes a
// node whose instance terminated (the harness has none: a kubelet of kwok
// goes on heartbeating, and a sweep would wait for a terminated instance's
// live kubelet to stop before it releases the node).
func deleteGroupsAtEnd(t *testing.T, ctx context.Context, groups ...string) {
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		ids := map[string]bool{}
		out, err := asc.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: groups})
		if err != nil {
			t.Logf("describing %v: %v", groups, err)
			return
		}
		var present []string // a group deleted already is not deleted again
		for _, g := range out.AutoScalingGroups {
			present = append(present, aws.ToString(g.AutoScalingGroupName))
			for _, i := range g.Instances {
				ids[aws.ToString(i.InstanceId)] = true
			}
		}
		for _, g := range present {
			if _, err := asc.DeleteAutoScalingGroup(ctx, &autoscaling.DeleteAutoScalingGroupInput{
				AutoScalingGroupName: aws.String(g), ForceDelete: aws.Bool(true)}); err != nil {
				t.Logf("deleting %s: %v", g, err)
			}
		}
		if len(ids) == 0 {
			return
		}
		nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("listing the nodes of %v: %v", groups, err)
			return
		}
		for _, n := range nodes.Items {
			if ids[node.ProviderInstanceID(n.Spec.ProviderID)] {
				if err := env.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
					t.Logf("deleting the node %s of a deleted group's instance: %v", n.Name, err)
				}
			}
		}
	})
}

// putHook puts a terminate hook named name on group, as another tool (or
// the function) would.
func putHook(t *testing.T, ctx context.Context, group, name string) {
	t.Helper()
	if _, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{AutoScalingGroupName: aws.String(group), LifecycleHookName: aws.String(name),
		LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE")}); err != nil {
		t.Fatal(err)
	}
}

// hookNames are the names of a group's lifecycle hooks, sorted.
func hookNames(t *testing.T, ctx context.Context, group string) []string {
	t.Helper()
	out, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(group)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range out.LifecycleHooks {
		names = append(names, aws.ToString(h.LifecycleHookName))
	}
	slices.Sort(names)
	return names
}
