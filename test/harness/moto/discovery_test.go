package moto_test

import (
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/discovery"
)

// The emulator answers what internal/discovery asks of Auto Scaling: a
// DescribeAutoScalingGroups filtered by tag:<key> (every page of it) returns
// the groups carrying the tag with that value and no other, and
// PutLifecycleHook creates the hook DescribeLifecycleHooks then reads, with
// its settings. discovery.Ensure run against it puts the hook on the tagged
// groups only, and a second run puts nothing.
func TestDiscoveryAgainstEmulator(t *testing.T) {
	ctx := reset(t)
	asc := autoscaling.NewFromConfig(srv.AWSConfig())
	tag := discovery.Tag{Key: "node-drainer.io/enabled", Value: "true"}
	tagged := []string{"disc-a", "disc-b", "disc-c"}
	for _, name := range append(slices.Clone(tagged), "disc-off", "disc-plain") {
		createGroup(ctx, t, name, "other-tool-hook")
		value := map[string]string{"disc-off": "false", "disc-plain": ""}[name]
		if name != "disc-plain" {
			if value == "" {
				value = "true"
			}
			if _, err := asc.CreateOrUpdateTags(ctx, &autoscaling.CreateOrUpdateTagsInput{Tags: []astypes.Tag{{
				ResourceId: aws.String(name), ResourceType: aws.String("auto-scaling-group"),
				Key: aws.String(tag.Key), Value: aws.String(value), PropagateAtLaunch: aws.Bool(false),
			}}}); err != nil {
				t.Fatalf("tagging %s: %v", name, err)
			}
		}
	}

	// a page of one group: the paginator must follow NextToken
	var pages, seen int
	p := autoscaling.NewDescribeAutoScalingGroupsPaginator(asc, &autoscaling.DescribeAutoScalingGroupsInput{
		MaxRecords: aws.Int32(1), Filters: []astypes.Filter{{Name: aws.String("tag:" + tag.Key), Values: []string{tag.Value}}},
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("DescribeAutoScalingGroups filtered by tag: %v", err)
		}
		pages++
		for _, g := range out.AutoScalingGroups {
			seen++
			if !slices.Contains(tagged, aws.ToString(g.AutoScalingGroupName)) || !tag.On(g) {
				t.Errorf("the tag filter returned %s (tags %+v)", aws.ToString(g.AutoScalingGroupName), g.Tags)
			}
		}
	}
	if seen != 3 || pages < 3 {
		t.Errorf("filtered describe: %d groups in %d pages, want 3 groups, one a page", seen, pages)
	}

	hook := discovery.Hook{Name: "node-drainer-terminate", Transition: discovery.Terminating, HeartbeatTimeout: 300, DefaultResult: "CONTINUE", Owner: "drainer-a"}
	res, err := discovery.Ensure(ctx, asc, tag, []discovery.Hook{hook}, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Groups != 3 || len(res.Put) != 3 || len(res.Failed) != 0 {
		t.Errorf("first ensure: %+v; want the hook put on the 3 tagged groups", res)
	}
	for _, name := range []string{"disc-a", "disc-b", "disc-c", "disc-off", "disc-plain"} {
		out, err := asc.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, h := range out.LifecycleHooks {
			names = append(names, aws.ToString(h.LifecycleHookName))
			if aws.ToString(h.LifecycleHookName) == hook.Name && (aws.ToInt32(h.HeartbeatTimeout) != 300 ||
				aws.ToString(h.DefaultResult) != "CONTINUE" || aws.ToString(h.LifecycleTransition) != discovery.Terminating) {
				t.Errorf("%s: hook %+v, want 300 s, CONTINUE, terminating", name, h)
			}
		}
		want := []string{"other-tool-hook"}
		if slices.Contains(tagged, name) {
			want = append(want, hook.Name)
		}
		slices.Sort(names)
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("%s: hooks %v, want %v", name, names, want)
		}
	}
	res, err = discovery.Ensure(ctx, asc, tag, []discovery.Hook{hook}, false)
	if err != nil || len(res.Put) != 0 || res.Groups != 3 {
		t.Errorf("second ensure: %+v, %v; want nothing put", res, err)
	}
	// a deployment's hook carries its mark, which the emulator keeps: it
	// is that deployment's alone. A second deployment with the same hook
	// names leaves it as it is and says so, and its removal takes nothing;
	// the first one's removal deletes it
	second := hook
	second.Owner = "drainer-b"
	if res, err := discovery.Ensure(ctx, asc, tag, []discovery.Hook{second}, false); err != nil || len(res.Put) != 0 || len(res.NotOurs) != 3 {
		t.Fatalf("ensure for drainer-b: %+v, %v; want nothing put, the 3 hooks said drainer-a's", res, err)
	}
	out, err := asc.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String("disc-a"), LifecycleHookNames: []string{hook.Name}})
	if err != nil || len(out.LifecycleHooks) != 1 || aws.ToString(out.LifecycleHooks[0].NotificationMetadata) != discovery.Mark("drainer-a") {
		t.Fatalf("disc-a's hook: %+v, %v; want it marked drainer-a's alone", out, err)
	}
	removed, failed := discovery.Remove(ctx, asc, []string{"disc-a"}, []string{hook.Name}, "drainer-b", false)
	if len(removed) != 0 || len(failed) != 0 {
		t.Errorf("drainer-b's removal: %v, %v; want nothing removed (drainer-a's hook)", removed, failed)
	}
	removed, failed = discovery.Remove(ctx, asc, []string{"disc-a"}, []string{hook.Name}, "drainer-a", false)
	if !slices.Equal(removed, []string{"disc-a/node-drainer-terminate"}) || len(failed) != 0 {
		t.Errorf("drainer-a's removal: %v, %v; want the hook deleted", removed, failed)
	}
	if _, err := discovery.Ensure(ctx, asc, tag, []discovery.Hook{hook}, false); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"disc-a": true, "disc-off": false, "disc-plain": false, "disc-gone": false} {
		if got, err := discovery.Carries(ctx, asc, name, tag); err != nil || got != want {
			t.Errorf("Carries(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
}
