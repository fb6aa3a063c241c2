package handler

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/hooks/hookstest"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
)

const groupTagKey = "node-drainer.io/enabled"

func taggedGroup(name, value string) astypes.AutoScalingGroup {
	return astypes.AutoScalingGroup{AutoScalingGroupName: aws.String(name),
		Tags: []astypes.TagDescription{{Key: aws.String(groupTagKey), Value: aws.String(value), ResourceId: aws.String(name)}}}
}

// tagMode: groups chosen by tag alone (no ASG_NAMES).
func tagMode(e *env) {
	e.cfg.ASGNames = nil
	e.cfg.ASGTagKey, e.cfg.ASGTagValue = groupTagKey, "true"
	e.cfg.CreateTerminateHook, e.cfg.HeartbeatTimeout = true, 300*time.Second
}

// A terminate hook of a group chosen by tag: the group's tags are read at
// the moment of acting; tagged, the node is drained and the hook completed;
// not tagged (or tagged with another value), nothing is done and the hook is
// left; unreadable (Auto Scaling throttling), the invocation fails with
// nothing done but a heartbeat, so that Lambda's retry, which reads again,
// finds the hook (ours by name) alive — as when EC2 is unreadable.
func TestTerminateOfTaggedGroup(t *testing.T) {
	for _, tc := range []struct {
		name      string
		groups    []astypes.AutoScalingGroup
		err       error
		action    Action
		results   []lifecycle.Result
		wantErr   bool
		heartbeat bool
	}{
		{"tagged: drained, completed", []astypes.AutoScalingGroup{taggedGroup(asgName, "true")}, nil, ActionDrained, []lifecycle.Result{lifecycle.Continue}, false, false},
		{"tag with another value: ignored", []astypes.AutoScalingGroup{taggedGroup(asgName, "false")}, nil, ActionIgnored, nil, false, false},
		{"untagged: ignored", []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String(asgName)}}, nil, ActionIgnored, nil, false, false},
		{"another group tagged: ignored", []astypes.AutoScalingGroup{taggedGroup("other", "true")}, nil, ActionIgnored, nil, false, false},
		{"tags unreadable: error, heartbeated for the retry, nothing else done", nil, errors.New("throttled"), "", nil, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(aNode()...)
			tagMode(e)
			e.ec2.readings[idA] = []reading{running}
			e.asg.groups, e.asg.describeErr = tc.groups, tc.err
			out, err := e.handle(t, terminateEvent(idA), 2*time.Second)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if e.asg.describes == 0 {
				t.Error("the group's tags were not read")
			}
			if got := e.asg.results(); !reflect.DeepEqual(got, tc.results) {
				t.Errorf("completions %v, want %v", got, tc.results)
			}
			if tc.action != "" && out.Action != tc.action {
				t.Errorf("action %s (%s), want %s", out.Action, out.Detail, tc.action)
			}
			if tc.results == nil {
				if w := e.writes(); len(w) > 0 {
					t.Errorf("a group not ours: the cluster was written: %v", w)
				}
				if e.asg.heartbeats > 0 != tc.heartbeat {
					t.Errorf("%d heartbeats, want heartbeated %v", e.asg.heartbeats, tc.heartbeat)
				}
			}
		})
	}
}

// A listed group needs no reading of its tags, tag mode or not; another
// tool's hook on a tagged group is not read for tags, not completed.
func TestListedGroupAndForeignHookInTagMode(t *testing.T) {
	e := newEnv(aNode()...)
	tagMode(e)
	e.cfg.ASGNames = []string{asgName}
	e.ec2.readings[idA] = []reading{running}
	if out, err := e.handle(t, terminateEvent(idA), 2*time.Second); err != nil || out.Action != ActionDrained {
		t.Fatalf("listed group: %s (%s), %v", out.Action, out.Detail, err)
	}
	if e.asg.describes != 0 {
		t.Errorf("a listed group's tags were read (%d calls)", e.asg.describes)
	}

	e = newEnv(aNode()...)
	tagMode(e)
	e.asg.groups = []astypes.AutoScalingGroup{taggedGroup(asgName, "true")}
	raw := strings.Replace(string(terminateEvent(idA)), "node-drainer-terminate", "nth-terminate", 1)
	out, err := e.handle(t, []byte(raw), 2*time.Second)
	if err != nil || out.Action != ActionIgnored || len(e.asg.results()) != 0 || e.asg.describes != 0 {
		t.Errorf("another tool's hook: %s, %v, completions %v, %d describes; want ignored, untouched", out.Action, err, e.asg.results(), e.asg.describes)
	}
}

// The sweep puts the hooks CREATE_TERMINATE_HOOK and CREATE_LAUNCH_HOOK ask
// for on the tagged groups that lack them, once; an untagged group is never
// touched; a dry run puts nothing.
func TestSweepPutsHooksOnTaggedGroups(t *testing.T) {
	for _, dry := range []bool{false, true} {
		e := newEnv()
		tagMode(e)
		e.cfg.CreateLaunchHook, e.cfg.DryRun = true, dry
		e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("new-nodes", "true"), {AutoScalingGroupName: aws.String("untagged")}, taggedGroup("off", "no")}
		hp := &hookstest.AutoScaling{Groups: e.asg}
		h := New(e.cfg, Clients{Kube: e.kube, EC2: e.ec2, ASG: e.asg, AutoScaling: e.asg, Hooks: hp}, nil, WithClock(newMovingClock(func() time.Time { return e.now })))
		for i := range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			before := e.asg.describes
			out, err := h.Handle(ctx, sweepEvent())
			cancel()
			if err != nil {
				t.Fatalf("dry %v, sweep %d: %v", dry, i, err)
			}
			// the groups the hooks were put on are the ones the sweep reads
			if n := e.asg.describes - before; n != 1 {
				t.Errorf("dry %v, sweep %d: the tagged groups described %d times in one pass, want once", dry, i, n)
			}
			want := []string{"new-nodes/node-drainer-terminate", "new-nodes/node-drainer-launch"}
			if i > 0 && !dry {
				want = nil // in place since the first sweep
			}
			if out.Sweep == nil || !reflect.DeepEqual(out.Sweep.HooksPut, want) || out.Sweep.Tagged != 1 {
				t.Errorf("dry %v, sweep %d: summary %+v; want %v put on 1 tagged group", dry, i, out.Sweep, want)
			}
		}
		want := []string{"new-nodes/node-drainer-terminate/autoscaling:EC2_INSTANCE_TERMINATING", "new-nodes/node-drainer-launch/autoscaling:EC2_INSTANCE_LAUNCHING"}
		if dry {
			want = nil
		}
		if !slices.Equal(hp.Puts, want) {
			t.Errorf("dry %v: put %v, want %v", dry, hp.Puts, want)
		}
		for _, hk := range hp.Have["new-nodes"] {
			if aws.ToInt32(hk.HeartbeatTimeout) != 300 || aws.ToString(hk.DefaultResult) != "CONTINUE" {
				t.Errorf("hook %s put with %d s, %s; want 300 s, CONTINUE", aws.ToString(hk.LifecycleHookName), aws.ToInt32(hk.HeartbeatTimeout), aws.ToString(hk.DefaultResult))
			}
		}
	}
}

// Two deployments that choose groups by the same tag and hook names (the
// templates' defaults, two clusters in one account) receive each other's
// lifecycle events and sweep each other's groups: an action whose instance
// carries another cluster's tag is left to that cluster's deployment, in a
// group ours by its tag alone. One whose instance carries no cluster's tag,
// or in a group listed in ASG_NAMES, is still completed (nothing drained).
func TestAnotherDeploymentsAction(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tags    map[string]string
		listed  bool
		launch  bool
		results []lifecycle.Result
	}{
		{name: "another cluster's instance: left", tags: map[string]string{"kubernetes.io/cluster/staging": "owned"}},
		{name: "another EKS cluster's managed node: left", tags: map[string]string{"eks:cluster-name": "staging"}},
		{name: "its launch hook: left", tags: map[string]string{"kubernetes.io/cluster/staging": "owned"}, launch: true},
		{name: "no cluster's instance: completed", tags: map[string]string{"team": "a"}, results: []lifecycle.Result{lifecycle.Continue}},
		{name: "EKS tag of this cluster, no cluster tag: completed", tags: map[string]string{"eks:cluster-name": "prod"}, results: []lifecycle.Result{lifecycle.Continue}},
		{name: "the group listed in ASG_NAMES: completed", tags: map[string]string{"kubernetes.io/cluster/staging": "owned"}, listed: true,
			results: []lifecycle.Result{lifecycle.Continue}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(aNode()...)
			tagMode(e)
			if tc.listed {
				e.cfg.ASGNames = []string{asgName}
			}
			e.ec2.readings[idA] = []reading{{state: instance.StateRunning, tags: tc.tags}}
			e.asg.groups = []astypes.AutoScalingGroup{taggedGroup(asgName, "true")}
			out, err := e.handle(t, hookEvent(tc.launch, asgName, idA), 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.asg.results(); !reflect.DeepEqual(got, tc.results) {
				t.Errorf("completions %v, want %v (%s %s)", got, tc.results, out.Action, out.Detail)
			}
			if tc.results == nil && (out.Action != ActionIgnored || !strings.Contains(out.Detail, "another cluster's") || e.asg.heartbeats > 0 || len(e.writes()) > 0) {
				t.Errorf("outcome %s %q, %d heartbeats, writes %v: want it ignored, saying why, nothing done", out.Action, out.Detail, e.asg.heartbeats, e.writes())
			}
		})
	}
}

// A warm function answers a foreign instance's later events from memory:
// what it remembers still says whose the instance is, so the sweep's run of
// the same action (or the event's retry) leaves it too.
func TestAnotherDeploymentsActionFromMemory(t *testing.T) {
	e := newEnv(aNode()...)
	tagMode(e)
	e.ec2.readings[idA] = []reading{{state: instance.StateRunning, tags: map[string]string{"kubernetes.io/cluster/staging": "owned", "team": "a"}}}
	e.asg.groups = []astypes.AutoScalingGroup{taggedGroup(asgName, "true")}
	h := e.handler()
	for i := range 2 {
		out, err := e.handleWith(h, terminateEvent(idA), 2*time.Second)
		if err != nil || out.Action != ActionIgnored || len(e.asg.results()) > 0 {
			t.Fatalf("event %d: outcome %s %q, error %v, completions %v: want it left", i+1, out.Action, out.Detail, err, e.asg.results())
		}
	}
	if e.ec2.calls != 1 {
		t.Errorf("%d DescribeInstances: want the second event answered from memory", e.ec2.calls)
	}
}

// In a group ours by its tag alone, with EC2 unreadable, an instance whose
// node this cluster does not have may be another cluster's: its action is
// heartbeated and left for a retry, not completed as "no node". One whose
// node is here is ours, and drained.
func TestTaggedGroupEC2Unreadable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		node    bool
		results []lifecycle.Result
		wantErr bool
	}{
		{"no node here: left for a retry", false, nil, true},
		{"its node is here: drained", true, []lifecycle.Result{lifecycle.Continue}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.node {
				objs = aNode()
			}
			e := newEnv(objs...)
			tagMode(e)
			e.ec2.readings[idA] = []reading{throttled}
			e.asg.groups = []astypes.AutoScalingGroup{taggedGroup(asgName, "true")}
			out, err := e.handle(t, terminateEvent(idA), 2*time.Second)
			if (err != nil) != tc.wantErr || !reflect.DeepEqual(e.asg.results(), tc.results) {
				t.Fatalf("outcome %s %q, error %v, completions %v: want error %v, completions %v", out.Action, out.Detail, err, e.asg.results(), tc.wantErr, tc.results)
			}
			if !tc.node && e.asg.heartbeats == 0 {
				t.Error("the action left for a retry was not heartbeated")
			}
		})
	}
}

// Two deployments choose groups by one tag and use different hook names:
// each puts its hooks only on the tagged groups that are its cluster's, or
// name no cluster, never on a group that names another cluster in its own
// tags (kubernetes.io/cluster/<other>, or eks:cluster-name naming
// another): there its hook would have no owner, and every scale-in and
// launch would wait its whole heartbeat timeout (rule 3).
func TestTwoDeploymentsOneTagOtherHookNames(t *testing.T) {
	withTags := func(g astypes.AutoScalingGroup, kv ...string) astypes.AutoScalingGroup {
		for i := 0; i < len(kv); i += 2 {
			g.Tags = append(g.Tags, astypes.TagDescription{Key: aws.String(kv[i]), Value: aws.String(kv[i+1]), ResourceId: g.AutoScalingGroupName})
		}
		return g
	}
	e := newEnv()
	tagMode(e)
	e.asg.groups = []astypes.AutoScalingGroup{
		withTags(taggedGroup("prod-nodes", "true"), clusterTag, "owned"),
		withTags(taggedGroup("staging-nodes", "true"), "kubernetes.io/cluster/staging", "owned"),
		withTags(taggedGroup("staging-managed", "true"), "eks:cluster-name", "staging"),
		taggedGroup("untold", "true"), // names no cluster: both put theirs
	}
	hp := &hookstest.AutoScaling{Groups: e.asg}
	staging := e.cfg
	staging.ClusterName, staging.ClusterTagKey = "staging", "kubernetes.io/cluster/staging"
	staging.TerminateHookName, staging.LaunchHookName = "staging-terminate", "staging-launch"
	for _, cfg := range []config.Config{e.cfg, staging} {
		h := New(cfg, Clients{Kube: e.kube, EC2: e.ec2, ASG: e.asg, AutoScaling: e.asg, Hooks: hp}, nil, WithClock(newMovingClock(func() time.Time { return e.now })))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, err := h.Handle(ctx, sweepEvent())
		cancel()
		if err != nil {
			t.Fatalf("%s's sweep: %v (%+v)", cfg.ClusterName, err, out.Sweep)
		}
	}
	want := []string{
		"prod-nodes/node-drainer-terminate/autoscaling:EC2_INSTANCE_TERMINATING",
		"untold/node-drainer-terminate/autoscaling:EC2_INSTANCE_TERMINATING",
		"staging-nodes/staging-terminate/autoscaling:EC2_INSTANCE_TERMINATING",
		"staging-managed/staging-terminate/autoscaling:EC2_INSTANCE_TERMINATING",
		"untold/staging-terminate/autoscaling:EC2_INSTANCE_TERMINATING",
	}
	if !slices.Equal(hp.Puts, want) {
		t.Errorf("hooks put %v, want %v", hp.Puts, want)
	}
	// a hook of ours left on the other's group (put by an older release):
	// its action is the other deployment's group's, not ours to complete
	e.ec2.readings[idA], e.ec2.calls = []reading{{state: instance.StateRunning, tags: map[string]string{"kubernetes.io/cluster/staging": "owned"}}}, 0
	out, err := e.handle(t, hookEvent(false, "staging-nodes", idA), 2*time.Second)
	if err != nil || out.Action != ActionIgnored || !strings.Contains(out.Detail, "names another cluster (kubernetes.io/cluster/staging)") ||
		len(e.asg.results()) > 0 || e.asg.heartbeats > 0 || e.ec2.calls > 0 {
		t.Errorf("event on the other's group: %s %q, error %v, completions %v, %d heartbeats, %d EC2 calls: want it ignored by the group's tags alone",
			out.Action, out.Detail, err, e.asg.results(), e.asg.heartbeats, e.ec2.calls)
	}
}
