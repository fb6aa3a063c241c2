package discovery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// fakeAPI is Auto Scaling over a few groups: it applies tag:<key> filters,
// pages two groups at a time, and keeps the hooks put.
type fakeAPI struct {
	mu        sync.Mutex
	groups    []astypes.AutoScalingGroup
	hooks     map[string][]astypes.LifecycleHook // by group
	puts      []autoscaling.PutLifecycleHookInput
	deletes   []string // "<group>/<hook>"
	ignoreTag bool     // answers as if the filter were not applied
	listErr   error    // DescribeAutoScalingGroups fails
	putErr    map[string]error
	describes int
	// afterPut runs after each put has landed, outside the lock (another
	// writer's put landing just after it)
	afterPut func(in *autoscaling.PutLifecycleHookInput)
	// pools are the instances of each group's warm pool (by group), one
	// page of DescribeWarmPool each
	pools map[string][][]astypes.Instance
	// beats are the heartbeats recorded ("<group>/<hook>/<instance>"),
	// calls every put and heartbeat in turn
	beats, calls []string
}

func (f *fakeAPI) RecordLifecycleActionHeartbeat(_ context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, _ ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := aws.ToString(in.AutoScalingGroupName) + "/" + aws.ToString(in.LifecycleHookName) + "/" + aws.ToString(in.InstanceId)
	f.beats, f.calls = append(f.beats, b), append(f.calls, "heartbeat "+b)
	return &autoscaling.RecordLifecycleActionHeartbeatOutput{}, nil
}

func (f *fakeAPI) DescribeWarmPool(_ context.Context, in *autoscaling.DescribeWarmPoolInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeWarmPoolOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pages := f.pools[aws.ToString(in.AutoScalingGroupName)]
	page := 0
	if t := aws.ToString(in.NextToken); t != "" {
		page = int(t[0] - '0')
	}
	out := &autoscaling.DescribeWarmPoolOutput{}
	if page < len(pages) {
		out.Instances = pages[page]
	}
	if page+1 < len(pages) {
		out.NextToken = aws.String(string(rune('0' + page + 1)))
	}
	return out, nil
}

func group(name string, tags ...string) astypes.AutoScalingGroup {
	g := astypes.AutoScalingGroup{AutoScalingGroupName: aws.String(name)}
	for _, kv := range tags {
		k, v, _ := strings.Cut(kv, "=")
		g.Tags = append(g.Tags, astypes.TagDescription{Key: aws.String(k), Value: aws.String(v), ResourceId: aws.String(name)})
	}
	return g
}

func (f *fakeAPI) DescribeAutoScalingGroups(_ context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.describes++
	if f.listErr != nil {
		return nil, f.listErr
	}
	var match []astypes.AutoScalingGroup
	for _, g := range f.groups {
		if len(in.AutoScalingGroupNames) > 0 && !slices.Contains(in.AutoScalingGroupNames, aws.ToString(g.AutoScalingGroupName)) {
			continue
		}
		ok := true
		for _, flt := range in.Filters {
			key, isTag := strings.CutPrefix(aws.ToString(flt.Name), "tag:")
			if !isTag {
				return nil, fmt.Errorf("unexpected filter %s", aws.ToString(flt.Name))
			}
			if !f.ignoreTag && !slices.ContainsFunc(g.Tags, func(t astypes.TagDescription) bool {
				return aws.ToString(t.Key) == key && slices.Contains(flt.Values, aws.ToString(t.Value))
			}) {
				ok = false
			}
		}
		if ok {
			match = append(match, g)
		}
	}
	start := 0
	if in.NextToken != nil {
		if _, err := fmt.Sscan(*in.NextToken, &start); err != nil {
			return nil, fmt.Errorf("NextToken %q is not one this fake gave: %w", *in.NextToken, err)
		}
	}
	end := min(start+2, len(match))
	out := &autoscaling.DescribeAutoScalingGroupsOutput{AutoScalingGroups: match[start:end]}
	if end < len(match) {
		out.NextToken = aws.String(fmt.Sprint(end))
	}
	return out, nil
}

func (f *fakeAPI) DescribeLifecycleHooks(_ context.Context, in *autoscaling.DescribeLifecycleHooksInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []astypes.LifecycleHook
	for _, h := range f.hooks[aws.ToString(in.AutoScalingGroupName)] {
		if len(in.LifecycleHookNames) == 0 || slices.Contains(in.LifecycleHookNames, aws.ToString(h.LifecycleHookName)) {
			out = append(out, h)
		}
	}
	return &autoscaling.DescribeLifecycleHooksOutput{LifecycleHooks: out}, nil
}

func (f *fakeAPI) PutLifecycleHook(_ context.Context, in *autoscaling.PutLifecycleHookInput, _ ...func(*autoscaling.Options)) (*autoscaling.PutLifecycleHookOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.putErr[aws.ToString(in.AutoScalingGroupName)]; err != nil {
		return nil, err
	}
	f.puts = append(f.puts, *in)
	f.calls = append(f.calls, "put "+aws.ToString(in.AutoScalingGroupName)+"/"+aws.ToString(in.LifecycleHookName))
	g := aws.ToString(in.AutoScalingGroupName)
	if f.hooks == nil {
		f.hooks = map[string][]astypes.LifecycleHook{}
	}
	f.hooks[g] = slices.DeleteFunc(f.hooks[g], func(h astypes.LifecycleHook) bool {
		return aws.ToString(h.LifecycleHookName) == aws.ToString(in.LifecycleHookName)
	})
	f.hooks[g] = append(f.hooks[g], astypes.LifecycleHook{AutoScalingGroupName: in.AutoScalingGroupName, LifecycleHookName: in.LifecycleHookName,
		LifecycleTransition: in.LifecycleTransition, HeartbeatTimeout: in.HeartbeatTimeout, DefaultResult: in.DefaultResult, NotificationMetadata: in.NotificationMetadata})
	if after := f.afterPut; after != nil {
		f.mu.Unlock()
		after(in)
		f.mu.Lock()
	}
	return &autoscaling.PutLifecycleHookOutput{}, nil
}

func (f *fakeAPI) DeleteLifecycleHook(_ context.Context, in *autoscaling.DeleteLifecycleHookInput, _ ...func(*autoscaling.Options)) (*autoscaling.DeleteLifecycleHookOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := aws.ToString(in.AutoScalingGroupName)
	f.deletes = append(f.deletes, g+"/"+aws.ToString(in.LifecycleHookName))
	f.hooks[g] = slices.DeleteFunc(f.hooks[g], func(h astypes.LifecycleHook) bool {
		return aws.ToString(h.LifecycleHookName) == aws.ToString(in.LifecycleHookName)
	})
	return &autoscaling.DeleteLifecycleHookOutput{}, nil
}

func (f *fakeAPI) putNames() []string {
	var out []string
	for _, p := range f.puts {
		out = append(out, aws.ToString(p.AutoScalingGroupName)+"/"+aws.ToString(p.LifecycleHookName))
	}
	return out
}

var (
	tag       = Tag{Key: "node-drainer.io/enabled", Value: "true"}
	terminate = Hook{Name: "node-drainer-terminate", Transition: Terminating, HeartbeatTimeout: 300, DefaultResult: "CONTINUE", Owner: "drainer-a"}
	launch    = Hook{Name: "node-drainer-launch", Transition: Launching, HeartbeatTimeout: 300, DefaultResult: "CONTINUE", Owner: "drainer-a"}
)

// five groups: three tagged (one more page than the first), one with the
// key but another value, one untagged
func groups() []astypes.AutoScalingGroup {
	return []astypes.AutoScalingGroup{
		group("a", "node-drainer.io/enabled=true"),
		group("off", "node-drainer.io/enabled=false"),
		group("b", "node-drainer.io/enabled=true", "team=x"),
		group("plain", "team=x"),
		group("c", "node-drainer.io/enabled=true"),
	}
}

func TestTaggedEveryPageAndOnlyTagged(t *testing.T) {
	f := &fakeAPI{groups: groups()}
	got, err := Tagged(context.Background(), f, tag)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range got {
		names = append(names, aws.ToString(g.AutoScalingGroupName))
	}
	if want := []string{"a", "b", "c"}; !reflect.DeepEqual(names, want) {
		t.Errorf("tagged %v, want %v", names, want)
	}
	if f.describes != 2 {
		t.Errorf("%d describe calls, want 2 (two pages)", f.describes)
	}
	// a filter the server did not apply changes nothing: each group is
	// checked for the tag again
	f = &fakeAPI{groups: groups(), ignoreTag: true}
	got, err = Tagged(context.Background(), f, tag)
	if err != nil || len(got) != 3 {
		t.Errorf("with the filter ignored: %d groups, %v; want the 3 tagged", len(got), err)
	}
}

func TestEnsurePutsMissingHooksOnTaggedGroupsOnly(t *testing.T) {
	f := &fakeAPI{groups: groups(), hooks: map[string][]astypes.LifecycleHook{
		// b has our terminate hook already, right; and another tool's
		"b": {
			{LifecycleHookName: aws.String("node-drainer-terminate"), LifecycleTransition: aws.String(Terminating), HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE"),
				NotificationMetadata: aws.String(Mark("drainer-a"))},
			{LifecycleHookName: aws.String("nth"), LifecycleTransition: aws.String(Terminating), HeartbeatTimeout: aws.Int32(60), DefaultResult: aws.String("ABANDON")},
		},
		// c has it with another heartbeat: corrected
		"c": {{LifecycleHookName: aws.String("node-drainer-terminate"), LifecycleTransition: aws.String(Terminating), HeartbeatTimeout: aws.Int32(60), DefaultResult: aws.String("CONTINUE"),
			NotificationMetadata: aws.String(Mark("drainer-a"))}},
	}}
	res, err := Ensure(context.Background(), f, tag, []Hook{terminate, launch}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a/node-drainer-terminate", "a/node-drainer-launch", "b/node-drainer-launch", "c/node-drainer-terminate", "c/node-drainer-launch"}
	if !reflect.DeepEqual(f.putNames(), want) || !reflect.DeepEqual(res.Put, want) || res.Groups != 3 || len(res.Failed) != 0 {
		t.Errorf("put %v, result %+v; want %v on 3 groups", f.putNames(), res, want)
	}
	for _, p := range f.puts {
		if aws.ToInt32(p.HeartbeatTimeout) != 300 || aws.ToString(p.DefaultResult) != "CONTINUE" {
			t.Errorf("hook put with %d s, %s: want 300 s, CONTINUE", aws.ToInt32(p.HeartbeatTimeout), aws.ToString(p.DefaultResult))
		}
		if g := aws.ToString(p.AutoScalingGroupName); g == "off" || g == "plain" {
			t.Errorf("untagged group %s touched", g)
		}
	}
	if nth := f.hooks["b"][1]; aws.ToString(nth.LifecycleHookName) != "nth" || aws.ToInt32(nth.HeartbeatTimeout) != 60 {
		t.Errorf("another tool's hook changed: %+v", nth)
	}

	// again: everything in place, nothing written
	f.puts = nil
	res, err = Ensure(context.Background(), f, tag, []Hook{terminate, launch}, false)
	if err != nil || len(f.puts) != 0 || len(res.Put) != 0 {
		t.Errorf("second ensure put %v (%+v, %v): want nothing", f.putNames(), res, err)
	}
}

func TestEnsureDryRunWritesNothing(t *testing.T) {
	f := &fakeAPI{groups: groups()}
	res, err := Ensure(context.Background(), f, tag, []Hook{terminate}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.puts) != 0 || len(res.Put) != 3 {
		t.Errorf("dry run: put %v, reported %v; want nothing put, 3 reported", f.putNames(), res.Put)
	}
}

func TestEnsureFailures(t *testing.T) {
	// the listing fails: nothing done, the error returned
	f := &fakeAPI{groups: groups(), listErr: errors.New("throttled")}
	if _, err := Ensure(context.Background(), f, tag, []Hook{terminate}, false); err == nil || len(f.puts) != 0 {
		t.Errorf("listing failed: err %v, puts %v; want an error and nothing put", err, f.putNames())
	}
	// one group refuses (IAM's tag condition, say): the others still get theirs
	f = &fakeAPI{groups: groups(), putErr: map[string]error{"b": errors.New("AccessDenied")}}
	res, err := Ensure(context.Background(), f, tag, []Hook{terminate}, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a/node-drainer-terminate", "c/node-drainer-terminate"}; !reflect.DeepEqual(res.Put, want) ||
		len(res.Failed) != 1 || !strings.HasPrefix(res.Failed[0], "b: ") {
		t.Errorf("result %+v: want a and c put, b failed", res)
	}
	// no tag, or no hooks wanted: not a call
	f = &fakeAPI{groups: groups()}
	if res, err := Ensure(context.Background(), f, Tag{}, []Hook{terminate}, false); err != nil || f.describes != 0 || res.Groups != 0 {
		t.Errorf("no tag: %+v, %v, %d calls", res, err, f.describes)
	}
	if res, err := Ensure(context.Background(), f, tag, nil, false); err != nil || f.describes != 0 || res.Groups != 0 {
		t.Errorf("no hooks: %+v, %v, %d calls", res, err, f.describes)
	}
}

func TestCarries(t *testing.T) {
	f := &fakeAPI{groups: groups()}
	for name, want := range map[string]bool{"a": true, "off": false, "plain": false, "gone": false} {
		got, err := Carries(context.Background(), f, name, tag)
		if err != nil || got != want {
			t.Errorf("Carries(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	f.listErr = errors.New("throttled")
	if _, err := Carries(context.Background(), f, "a", tag); err == nil {
		t.Error("a failed reading: want an error, not an answer")
	}
}

// Listed groups get the hooks they lack; a name that is no group fails the
// whole request before anything is put.
func TestEnsureNamed(t *testing.T) {
	f := &fakeAPI{groups: groups()}
	if _, err := EnsureNamed(context.Background(), f, []string{"a", "nope", "plain"}, []Hook{terminate}, everywhere, false); err == nil || !strings.Contains(err.Error(), "nope") || len(f.puts) != 0 {
		t.Fatalf("a missing group: err %v, puts %v; want an error naming it and nothing put", err, f.putNames())
	}
	res, err := EnsureNamed(context.Background(), f, []string{"plain", "off"}, []Hook{terminate, launch}, everywhere, false)
	want := []string{"plain/node-drainer-terminate", "plain/node-drainer-launch", "off/node-drainer-terminate", "off/node-drainer-launch"}
	if err != nil || !slices.Equal(res.Put, want) || res.Groups != 2 {
		t.Fatalf("EnsureNamed = %+v, %v; want %v put on 2 groups (listed groups need no tag)", res, err, want)
	}
	if res, _ := EnsureNamed(context.Background(), f, []string{"plain", "off"}, []Hook{terminate, launch}, everywhere, false); len(res.Put) != 0 {
		t.Errorf("second EnsureNamed put %v again", res.Put)
	}
}

// Remove deletes only the hooks it is given the names of.
func TestRemoveOnlyOurs(t *testing.T) {
	f := &fakeAPI{groups: groups(), hooks: map[string][]astypes.LifecycleHook{
		"a": {{LifecycleHookName: aws.String("node-drainer-terminate"), NotificationMetadata: aws.String(Mark("drainer-a"))}, {LifecycleHookName: aws.String("nth-terminate"), NotificationMetadata: aws.String(Mark("drainer-a"))}},
		"b": {{LifecycleHookName: aws.String("nth-terminate"), NotificationMetadata: aws.String(Mark("drainer-a"))}},
	}}
	for _, dry := range []bool{true, false} {
		removed, failed := Remove(context.Background(), f, []string{"a", "b", "gone"}, []string{"node-drainer-terminate", "node-drainer-launch"}, "drainer-a", dry)
		if !slices.Equal(removed, []string{"a/node-drainer-terminate"}) || len(failed) != 0 {
			t.Errorf("dry %v: Remove = %v, %v; want a/node-drainer-terminate only", dry, removed, failed)
		}
		if dry && len(f.deletes) != 0 {
			t.Errorf("a dry run deleted %v", f.deletes)
		}
	}
	if !slices.Equal(f.deletes, []string{"a/node-drainer-terminate"}) || len(f.hooks["a"]) != 1 || len(f.hooks["b"]) != 1 {
		t.Errorf("deleted %v, left %v: want another tool's hooks kept", f.deletes, f.hooks)
	}
}

// A group carrying the tag that names another cluster in its own tags, and
// not this one, is that cluster's: not selected (two deployments sharing
// the tag). One naming this cluster, or none, is; without a cluster to
// compare with, every group carrying the tag is.
func TestTagElsewhere(t *testing.T) {
	tag := Tag{Key: "node-drainer.io/enabled", Value: "true", ClusterTagKey: "kubernetes.io/cluster/prod", ClusterName: "prod"}
	group := func(kv ...string) astypes.AutoScalingGroup {
		g := astypes.AutoScalingGroup{AutoScalingGroupName: aws.String("g")}
		kv = append([]string{tag.Key, tag.Value}, kv...)
		for i := 0; i < len(kv); i += 2 {
			g.Tags = append(g.Tags, astypes.TagDescription{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
		}
		return g
	}
	for _, tc := range []struct {
		name      string
		tag       Tag
		g         astypes.AutoScalingGroup
		elsewhere string
	}{
		{"names no cluster", tag, group(), ""},
		{"names this cluster", tag, group("kubernetes.io/cluster/prod", "owned"), ""},
		{"names another cluster", tag, group("kubernetes.io/cluster/staging", "owned"), "kubernetes.io/cluster/staging"},
		{"another EKS cluster's managed node group", tag, group("eks:cluster-name", "staging"), "eks:cluster-name=staging"},
		{"this EKS cluster's, another's tag too", tag, group("eks:cluster-name", "prod", "kubernetes.io/cluster/staging", "owned"), ""},
		{"custom cluster tag key, the cluster's by its name", Tag{Key: tag.Key, Value: tag.Value, ClusterTagKey: "team", ClusterName: "prod"},
			group("kubernetes.io/cluster/prod", "owned"), ""},
		{"no cluster to compare with", Tag{Key: tag.Key, Value: tag.Value}, group("kubernetes.io/cluster/staging", "owned"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tag.Elsewhere(tc.g); got != tc.elsewhere {
				t.Errorf("elsewhere %q, want %q", got, tc.elsewhere)
			}
			if on := tc.tag.On(tc.g); on != (tc.elsewhere == "") {
				t.Errorf("selected %v, want %v", on, tc.elsewhere == "")
			}
		})
	}
}

// Waiting reads the named groups now, every page, and names of each the
// instances waiting in a lifecycle action, of either transition; an
// instance in service, a group not named and a group that does not exist
// have none; a failed read is an error, with nothing said waiting.
func TestWaiting(t *testing.T) {
	in := func(g astypes.AutoScalingGroup, id string, state astypes.LifecycleState) astypes.AutoScalingGroup {
		g.Instances = append(g.Instances, astypes.Instance{InstanceId: aws.String(id), LifecycleState: state})
		return g
	}
	api := &fakeAPI{groups: []astypes.AutoScalingGroup{
		in(in(group("a"), "i-1", astypes.LifecycleStateTerminatingWait), "i-2", astypes.LifecycleStateInService),
		in(group("b"), "i-3", astypes.LifecycleStateInService),
		in(group("c"), "i-4", astypes.LifecycleStatePendingWait),
		in(group("not-asked"), "i-5", astypes.LifecycleStateTerminatingWait),
	}}
	got, err := Waiting(context.Background(), api, []string{"a", "b", "c", "gone"})
	want := map[string][]string{"a": {"i-1 in Terminating:Wait"}, "c": {"i-4 in Pending:Wait"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Waiting = %v, %v; want %v", got, err, want)
	}
	api.listErr = errors.New("Throttling: rate exceeded")
	if got, err := Waiting(context.Background(), api, []string{"a"}); err == nil || got != nil {
		t.Errorf("a failed read: %v, %v; want an error and nothing", got, err)
	}
}

// Waiting lists the instances waiting in a group's warm pool too, every
// page of DescribeWarmPool (DescribeAutoScalingGroups does not list
// them), and reads no pool of a group without one.
func TestWaitingReadsTheWarmPool(t *testing.T) {
	inst := func(id string, st astypes.LifecycleState) astypes.Instance {
		return astypes.Instance{InstanceId: aws.String(id), LifecycleState: st}
	}
	warm := astypes.AutoScalingGroup{AutoScalingGroupName: aws.String("warm"), WarmPoolConfiguration: &astypes.WarmPoolConfiguration{},
		Instances: []astypes.Instance{inst("i-1", astypes.LifecycleStateTerminatingWait), inst("i-2", astypes.LifecycleStateInService)}}
	cold := astypes.AutoScalingGroup{AutoScalingGroupName: aws.String("cold")}
	f := &fakeAPI{groups: []astypes.AutoScalingGroup{warm, cold}, pools: map[string][][]astypes.Instance{
		"warm": {{inst("i-3", astypes.LifecycleStateWarmedPendingWait), inst("i-4", astypes.LifecycleStateWarmedRunning)}, {inst("i-5", astypes.LifecycleStateWarmedTerminatingWait)}},
		"cold": {{inst("i-6", astypes.LifecycleStateWarmedPendingWait)}}, // not read: the group has no pool
	}}
	got, err := Waiting(context.Background(), f, []string{"warm", "cold"})
	want := map[string][]string{"warm": {"i-1 in Terminating:Wait", "i-3 in Warmed:Pending:Wait", "i-5 in Warmed:Terminating:Wait"}}
	if err != nil || !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Waiting: %v, %v; want %v", got, err, want)
	}
}
