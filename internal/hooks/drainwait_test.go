package hooks

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/hooks/hookstest"
)

// cutWatch is Auto Scaling's hooks (hookstest) that records each deletion
// made while an instance of the group waited in a lifecycle action: the
// deletion completed the action, and a drain in flight was cut.
type cutWatch struct {
	*hookstest.AutoScaling
	asg  *fakeASG
	mu   sync.Mutex
	cuts []string // "<group>/<hook>"
}

func (c *cutWatch) DeleteLifecycleHook(ctx context.Context, in *autoscaling.DeleteLifecycleHookInput, opts ...func(*autoscaling.Options)) (*autoscaling.DeleteLifecycleHookOutput, error) {
	g := aws.ToString(in.AutoScalingGroupName)
	c.asg.mu.Lock()
	for _, x := range c.asg.groups {
		if aws.ToString(x.AutoScalingGroupName) == g && slices.ContainsFunc(slices.Concat(x.Instances, c.asg.pools[g]), func(i astypes.Instance) bool { return strings.HasSuffix(string(i.LifecycleState), ":Wait") }) {
			c.mu.Lock()
			c.cuts = append(c.cuts, g+"/"+aws.ToString(in.LifecycleHookName))
			c.mu.Unlock()
		}
	}
	c.asg.mu.Unlock()
	return c.AutoScaling.DeleteLifecycleHook(ctx, in, opts...)
}

func (c *cutWatch) cut() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.cuts)
}

// drainEndsAfter ends, after d (the bubble's time), the lifecycle action of
// every instance of group: its drain completed it, and the instance left.
func drainEndsAfter(t *testing.T, e *env, group string, d time.Duration) {
	ctx := t.Context() // done as the test ends: no goroutine left in the bubble
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		e.asg.mu.Lock()
		defer e.asg.mu.Unlock()
		groups := slices.Clone(e.asg.groups) // a new slice: the describes answered hold the old one
		for i, g := range groups {
			if aws.ToString(g.AutoScalingGroupName) == group {
				groups[i].Instances = nil
			}
		}
		e.asg.groups = groups
		delete(e.asg.pools, group)
	}()
}

// lambdaCtx is an invocation's context, its deadline Lambda's timeout away.
func lambdaCtx(t *testing.T, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// An uninstall waits, bounded, for the drain in flight under a hook it
// removes, and removes the hook once the drain has ended: nothing is cut,
// nothing said cut (rule 17). The drain ends 90 s in, well within the
// bound.
func TestUninstallWaitsForTheDrainInFlight(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv()
		e.asg.groups = []astypes.AutoScalingGroup{waitingIn(taggedGroup("draining", "true"), idA, astypes.LifecycleStateTerminatingWait), taggedGroup("idle", "true")}
		hp := &cutWatch{asg: e.asg, AutoScaling: &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{
			"draining": {markedBy("node-drainer-terminate", "node-drainer")}, "idle": {markedBy("node-drainer-terminate", "node-drainer")},
		}}}
		h := New(e.cfg, Clients{Hooks: hp}, nil)
		drainEndsAfter(t, e, "draining", 90*time.Second)
		start := time.Now()
		out, err := h.Serve(lambdaCtx(t, 900*time.Second), terraformPayload(t, "delete", hookProps()))
		took := time.Since(start)
		if err != nil || len(hp.Deletes) != 2 {
			t.Fatalf("delete: %+v, %v, deleted %v; want both hooks removed", out, err, hp.Deletes)
		}
		if cut := hp.cut(); len(cut) != 0 || strings.Contains(out.Detail, "cut ") {
			t.Errorf("the uninstall deleted %v while an instance waited under it, and said %q; want it to wait for the drain (90 s, within its bound %s)", cut, out.Detail, drainWait)
		}
		if took < 90*time.Second || took > drainWait {
			t.Errorf("the uninstall took %s; want it to end once the drain had (90 s), within its bound %s", took, drainWait)
		}
	})
}

// A drain that does not end within the bound is cut once the bound has
// passed, and said; the bound is the invocation's remaining time less
// DEADLINE_MARGIN and what the removal and the answer need, when that is
// shorter than drainWait.
func TestUninstallCutsTheDrainThatOutlastsTheBound(t *testing.T) {
	for _, tc := range []struct {
		name          string
		timeout, want time.Duration
	}{
		{"lambda's 900 s", 900 * time.Second, drainWait},
		{"150 s left", 150 * time.Second, 150*time.Second - 50*time.Millisecond - drainWaitReserve},
		{"no time to wait", 30 * time.Second, 0},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv()
			e.asg.groups = []astypes.AutoScalingGroup{waitingIn(taggedGroup("held", "true"), idA, astypes.LifecycleStateTerminatingWait)}
			hp := &cutWatch{asg: e.asg, AutoScaling: &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"held": {markedBy("node-drainer-terminate", "node-drainer")}}}}
			h := New(e.cfg, Clients{Hooks: hp}, nil)
			start := time.Now()
			out, err := h.Serve(lambdaCtx(t, tc.timeout), terraformPayload(t, "delete", hookProps()))
			took := time.Since(start)
			if err != nil || !slices.Equal(hp.cut(), []string{"held/node-drainer-terminate"}) {
				t.Fatalf("delete: %+v, %v, cut %v; want the hook removed past the bound", out, err, hp.cut())
			}
			if !strings.Contains(out.Detail, "cut held/node-drainer-terminate: "+idA+" in Terminating:Wait waited under it") {
				t.Errorf("delete said %q; want the drain it cut named", out.Detail)
			}
			if took != tc.want {
				t.Errorf("the uninstall waited %s; want %s", took, tc.want)
			}
		}))
	}
}

// A launch waiting under a launch hook is waited for as a drain is (its
// deletion would ABANDON it); a launching instance does not hold the
// removal of a terminate hook, nor a terminating one that of a launch hook.
func TestUninstallWaitsOnlyForTheHooksTransition(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv()
		launching := waitingIn(taggedGroup("launching", "true"), idA, astypes.LifecycleStatePendingWait)
		e.asg.groups = []astypes.AutoScalingGroup{launching}
		hp := &cutWatch{asg: e.asg, AutoScaling: &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"launching": {markedBy("node-drainer-terminate", "node-drainer")}}}}
		h := New(e.cfg, Clients{Hooks: hp}, nil)
		start := time.Now()
		out, err := h.Serve(lambdaCtx(t, 900*time.Second), terraformPayload(t, "delete", hookProps()))
		if err != nil || time.Since(start) != 0 || strings.Contains(out.Detail, "cut ") {
			t.Errorf("a terminate hook's removal with a launch waiting: %+v, %v, took %s; want no wait and no cut said", out, err, time.Since(start))
		}
		withLaunch := hookProps()
		withLaunch["CreateLaunchHook"] = "true"
		launch := markedBy("node-drainer-launch", "node-drainer")
		launch.LifecycleTransition = aws.String("autoscaling:EC2_INSTANCE_LAUNCHING")
		hp.Have["launching"] = []astypes.LifecycleHook{launch}
		hp.cuts = nil
		drainEndsAfter(t, e, "launching", 40*time.Second)
		start = time.Now()
		out, err = h.Serve(lambdaCtx(t, 900*time.Second), terraformPayload(t, "delete", withLaunch))
		if err != nil || len(hp.cut()) != 0 || time.Since(start) < 40*time.Second {
			t.Errorf("a launch hook's removal with a launch waiting: %+v, %v, cut %v after %s; want the launch waited for", out, err, hp.cut(), time.Since(start))
		}
	})
}

// S6: an update renaming the hook puts the new name first, and removes the
// old one only once the instance waiting under it has left (bounded as an
// uninstall's wait): a scale-in begun under the old name is not completed
// by the deletion.
func TestRenameWaitsForTheInstanceUnderTheOldName(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv()
		e.asg.groups = []astypes.AutoScalingGroup{waitingIn(taggedGroup("draining", "true"), idA, astypes.LifecycleStateTerminatingWait)}
		hp := &cutWatch{asg: e.asg, AutoScaling: &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"draining": {markedBy("old-terminate", "node-drainer")}}}}
		h := New(e.cfg, Clients{Hooks: hp}, nil)
		old := hookProps()
		old["TerminateHookName"] = "old-terminate"
		drainEndsAfter(t, e, "draining", 60*time.Second)
		start := time.Now()
		out, err := h.Serve(lambdaCtx(t, 900*time.Second), terraformUpdate(t, old, hookProps()))
		if err != nil || !slices.Equal(hp.HookNames("draining"), []string{"node-drainer-terminate"}) {
			t.Fatalf("rename: %+v, %v, left %v; want the new name alone", out, err, hp.HookNames("draining"))
		}
		if cut := hp.cut(); len(cut) != 0 || time.Since(start) < 60*time.Second {
			t.Errorf("the rename deleted %v while an instance waited under it (after %s); want the old name kept until it left (60 s)", cut, time.Since(start))
		}
		if i := slices.Index(hp.Calls, "put draining/node-drainer-terminate"); i < 0 || i > slices.Index(hp.Calls, "delete draining/old-terminate") {
			t.Errorf("calls %v; want the new name put before the old one goes", hp.Calls)
		}
	})
}

// An update's release step (a group leaving the deployment) is the
// uninstall of that group's hooks: it waits for the drain in flight there.
func TestReleaseStepWaitsForTheDrainInFlight(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv()
		e.asg.groups = []astypes.AutoScalingGroup{waitingIn(taggedGroup("leaving", "true"), idA, astypes.LifecycleStateTerminatingWait)}
		hp := &cutWatch{asg: e.asg, AutoScaling: &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"leaving": {markedBy("node-drainer-terminate", "node-drainer")}}}}
		h := New(e.cfg, Clients{Hooks: hp}, nil)
		release := func(tagValue string) map[string]any {
			p := hookProps()
			p["Release"], p["AsgTagValue"] = "true", tagValue
			return p
		}
		drainEndsAfter(t, e, "leaving", 45*time.Second)
		// the tag's value changes: the group carrying the old one leaves
		out, err := h.Serve(lambdaCtx(t, 900*time.Second), terraformUpdate(t, release("true"), release("blue")))
		if err != nil || !slices.Equal(hp.Deletes, []string{"leaving/node-drainer-terminate"}) {
			t.Fatalf("release: %+v, %v, deleted %v; want the leaving group's hook removed", out, err, hp.Deletes)
		}
		if cut := hp.cut(); len(cut) != 0 {
			t.Errorf("the release step deleted %v while an instance waited under it; want it to wait for the drain (45 s)", cut)
		}
	})
}

// The bound fits the custom resource's own deadline too: CloudFormation's
// ServiceTimeout, from the request's start, less what the removal and the
// answer need.
func TestDrainWaitBoundFitsTheServiceTimeout(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		ctx := lambdaCtx(t, 900*time.Second)
		start := time.Now()
		time.Sleep(10 * time.Second) // what the request did before its wait
		for _, tc := range []struct {
			serviceTimeout string
			want           time.Duration
		}{
			{"", drainWait},
			{"300", drainWait},
			{"120", 120*time.Second - 10*time.Second - drainWaitReserve},
			{"60", 0},
			{"five minutes", drainWait}, // unreadable: none, and the request is not refused for it
		} {
			props := hookProps()
			if tc.serviceTimeout != "" {
				props["ServiceTimeout"] = tc.serviceTimeout
			}
			p, err := decodeHookProperties(props)
			if err != nil {
				t.Fatalf("ServiceTimeout %q: %v", tc.serviceTimeout, err)
			}
			if got := drainWaitBound(ctx, 20*time.Second, start, p); got != tc.want {
				t.Errorf("ServiceTimeout %q: bound %s; want %s", tc.serviceTimeout, got, tc.want)
			}
		}
	})
}

// S1: terraform renames the function by replacing it, and its hooks
// invocation with it: the old invocation's delete (on the old function),
// then the new one's create (on the new). The delete waits for the drain
// in flight under the old deployment's hook, and the create puts the new
// deployment's hooks on the tagged groups at once (no sweep needed), so a
// tagged group is unhooked only between the two.
func TestTerraformFunctionRenameHooksTaggedGroupsAtOnce(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv()
		e.asg.groups = []astypes.AutoScalingGroup{waitingIn(taggedGroup("draining", "true"), idA, astypes.LifecycleStateTerminatingWait), taggedGroup("idle", "true")}
		hp := &cutWatch{asg: e.asg, AutoScaling: &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{
			"draining": {markedBy("node-drainer-terminate", "node-drainer-old")}, "idle": {markedBy("node-drainer-terminate", "node-drainer-old")},
		}}}
		oldCfg, newCfg := e.cfg, e.cfg
		oldCfg.FunctionName = "node-drainer-old"
		drainEndsAfter(t, e, "draining", 50*time.Second)
		if out, err := New(oldCfg, Clients{Hooks: hp}, nil).Serve(lambdaCtx(t, 900*time.Second), terraformPayload(t, "delete", hookProps())); err != nil || len(hp.cut()) != 0 {
			t.Fatalf("the old function's delete: %+v, %v, cut %v; want the drain waited for", out, err, hp.cut())
		}
		if out, err := New(newCfg, Clients{Hooks: hp}, nil).Serve(lambdaCtx(t, 900*time.Second), terraformPayload(t, "create", hookProps())); err != nil {
			t.Fatalf("the new function's create: %+v, %v", out, err)
		}
		for _, g := range []string{"draining", "idle"} {
			if hs := hp.Have[g]; len(hs) != 1 || aws.ToString(hs[0].NotificationMetadata) != `{"node-drainer":["node-drainer"]}` {
				t.Errorf("%s after the rename: %+v; want the new deployment's hook, put by its create", g, hs)
			}
		}
	})
}

// withWarmPool is g with a warm pool (ReuseOnScaleIn) where instance id
// waits in state (e.pools): DescribeAutoScalingGroups does not list it,
// DescribeWarmPool does.
func withWarmPool(e *env, g astypes.AutoScalingGroup, id string, state astypes.LifecycleState) astypes.AutoScalingGroup {
	g.WarmPoolConfiguration = &astypes.WarmPoolConfiguration{PoolState: astypes.WarmPoolStateRunning,
		InstanceReusePolicy: &astypes.InstanceReusePolicy{ReuseOnScaleIn: aws.Bool(true)}}
	if e.asg.pools == nil {
		e.asg.pools = map[string][]astypes.Instance{}
	}
	name := aws.ToString(g.AutoScalingGroupName)
	e.asg.pools[name] = append(e.asg.pools[name], astypes.Instance{InstanceId: aws.String(id), LifecycleState: state, HealthStatus: aws.String("Healthy")})
	return g
}

// A drain into a warm pool (a scale-in with ReuseOnScaleIn waits in
// Warmed:Pending:Wait under the terminate hook, listed by DescribeWarmPool,
// not by the group's describe) is waited for as any other, and, when it
// outlasts the bound, said cut; so is one in Warmed:Terminating:Wait (an
// instance terminated from the pool).
func TestUninstallWaitsForTheDrainIntoTheWarmPool(t *testing.T) {
	for _, state := range []astypes.LifecycleState{astypes.LifecycleStateWarmedPendingWait, astypes.LifecycleStateWarmedTerminatingWait} {
		t.Run(string(state), clustertest.InBubble(func(t *testing.T) {
			e := newEnv()
			e.asg.groups = []astypes.AutoScalingGroup{withWarmPool(e, taggedGroup("warm", "true"), idA, state)}
			hp := &cutWatch{asg: e.asg, AutoScaling: &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"warm": {markedBy("node-drainer-terminate", "node-drainer")}}}}
			h := New(e.cfg, Clients{Hooks: hp}, nil)
			drainEndsAfter(t, e, "warm", 70*time.Second)
			start := time.Now()
			out, err := h.Serve(lambdaCtx(t, 900*time.Second), terraformPayload(t, "delete", hookProps()))
			if err != nil || len(hp.cut()) != 0 || time.Since(start) < 70*time.Second {
				t.Errorf("an uninstall with %s waiting in the warm pool: %+v, %v, cut %v after %s; want the drain waited for (70 s)", idA, out, err, hp.cut(), time.Since(start))
			}
		}))
		t.Run(string(state)+", past the bound", clustertest.InBubble(func(t *testing.T) {
			e := newEnv()
			e.asg.groups = []astypes.AutoScalingGroup{withWarmPool(e, taggedGroup("warm", "true"), idA, state)}
			hp := &cutWatch{asg: e.asg, AutoScaling: &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"warm": {markedBy("node-drainer-terminate", "node-drainer")}}}}
			out, err := New(e.cfg, Clients{Hooks: hp}, nil).Serve(lambdaCtx(t, 900*time.Second), terraformPayload(t, "delete", hookProps()))
			if err != nil || !strings.Contains(out.Detail, "cut warm/node-drainer-terminate: "+idA+" in "+string(state)) {
				t.Errorf("an uninstall past the bound with %s waiting in the warm pool: %+v, %v; want its drain said cut", idA, out, err)
			}
		}))
	}
}
