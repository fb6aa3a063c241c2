package moto_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/test/harness/moto"
)

const (
	terminating = "autoscaling:EC2_INSTANCE_TERMINATING"
	launching   = "autoscaling:EC2_INSTANCE_LAUNCHING"
)

// putHook puts a lifecycle hook on asg.
func putHook(ctx context.Context, t *testing.T, asg, hook, transition string, timeout int32, result string) {
	t.Helper()
	if _, err := autoscaling.NewFromConfig(srv.AWSConfig()).PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{
		AutoScalingGroupName: aws.String(asg), LifecycleHookName: aws.String(hook), LifecycleTransition: aws.String(transition),
		HeartbeatTimeout: aws.Int32(timeout), DefaultResult: aws.String(result),
	}); err != nil {
		t.Fatalf("PutLifecycleHook %s: %v", hook, err)
	}
}

// register makes an action of hook active for instance.
func register(ctx context.Context, t *testing.T, asg, hook, instance, transition string) {
	t.Helper()
	if err := srv.RegisterLifecycleAction(ctx, moto.LifecycleAction{ASG: asg, Hook: hook, InstanceID: instance,
		Token: "token-" + hook, Transition: transition}); err != nil {
		t.Fatal(err)
	}
}

// state is the instance's lifecycle state in asg.
func state(ctx context.Context, t *testing.T, asg, instance string) astypes.LifecycleState {
	t.Helper()
	out, err := autoscaling.NewFromConfig(srv.AWSConfig()).DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{asg}})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range out.AutoScalingGroups {
		for _, i := range g.Instances {
			if aws.ToString(i.InstanceId) == instance {
				return i.LifecycleState
			}
		}
	}
	return ""
}

// heartbeat heartbeats hook's action of instance.
func heartbeat(ctx context.Context, asg, hook, instance string) error {
	_, err := autoscaling.NewFromConfig(srv.AWSConfig()).RecordLifecycleActionHeartbeat(ctx, &autoscaling.RecordLifecycleActionHeartbeatInput{
		AutoScalingGroupName: aws.String(asg), LifecycleHookName: aws.String(hook), InstanceId: aws.String(instance)})
	return err
}

// ended is how hook's action ended, as the emulator says (ok false: not yet).
func ended(ctx context.Context, t *testing.T, hook string) (moto.EndedAction, bool) {
	t.Helper()
	all, err := srv.EndedActions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		if e.Hook == hook {
			return e, true
		}
	}
	return moto.EndedAction{}, false
}

// waitEnded waits (bounded) until hook's action has ended.
func waitEnded(ctx context.Context, t *testing.T, hook string, within time.Duration) moto.EndedAction {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if e, ok := ended(ctx, t, hook); ok {
			return e
		}
	}
	t.Fatalf("the action of %s had not ended after %s", hook, within)
	return moto.EndedAction{}
}

// A hook's heartbeat timeout ends its action with the hook's default
// result, as Auto Scaling does; an ABANDON ends the instance's other
// actions too, and the instance proceeds to terminate.
func TestHeartbeatTimeoutEndsActionWithDefaultResult(t *testing.T) {
	ctx := reset(t)
	instance := createGroup(ctx, t, "expiry", "drain") // 300 s, CONTINUE
	putHook(ctx, t, "expiry", "legacy", terminating, 2, "ABANDON")
	register(ctx, t, "expiry", "drain", instance, terminating)
	register(ctx, t, "expiry", "legacy", instance, terminating)
	start := time.Now()
	if err := heartbeat(ctx, "expiry", "drain", instance); err != nil {
		t.Fatalf("heartbeat of drain: %v", err)
	}
	e := waitEnded(ctx, t, "legacy", 10*time.Second)
	if e.Result != "ABANDON" || e.Cause != moto.EndTimeout || e.InstanceID != instance {
		t.Errorf("legacy ended %+v: want ABANDON by its heartbeat timeout", e)
	}
	if at := e.Time.Sub(start); at < 1500*time.Millisecond || at > 4*time.Second {
		t.Errorf("legacy timed out %s after its start: want its 2 s", at)
	}
	d, ok := ended(ctx, t, "drain")
	if !ok || d.Result != "ABANDON" || d.Cause != moto.EndAbandoned {
		t.Errorf("drain's action: %+v (ended %v): want it ended by the sibling's ABANDON", d, ok)
	}
	wantValidationError(t, heartbeat(ctx, "expiry", "drain", instance), "No active Lifecycle Action found with instance ID "+instance)
	if s := state(ctx, t, "expiry", instance); s != astypes.LifecycleStateTerminatingProceed {
		t.Errorf("state %s, want Terminating:Proceed", s)
	}
}

// A heartbeat restarts the timer; an instance waits until every action of
// its transition has ended, one ended by its timeout (CONTINUE) included.
func TestHeartbeatRestartsTimer(t *testing.T) {
	ctx := reset(t)
	instance := createGroup(ctx, t, "beats", "drain") // 300 s, CONTINUE
	putHook(ctx, t, "beats", "short", terminating, 2, "CONTINUE")
	register(ctx, t, "beats", "drain", instance, terminating)
	register(ctx, t, "beats", "short", instance, terminating)
	for range 4 { // 4 s, past the 2 s timeout, heartbeated every second
		time.Sleep(time.Second)
		if err := heartbeat(ctx, "beats", "short", instance); err != nil {
			t.Fatalf("heartbeat within the timeout: %v", err)
		}
	}
	last := time.Now()
	e := waitEnded(ctx, t, "short", 10*time.Second)
	if e.Result != "CONTINUE" || e.Cause != moto.EndTimeout || e.Time.Sub(last) < 1500*time.Millisecond {
		t.Errorf("short ended %+v, %s after its last heartbeat: want CONTINUE, 2 s after it", e, e.Time.Sub(last))
	}
	if s := state(ctx, t, "beats", instance); s != astypes.LifecycleStateTerminatingWait {
		t.Errorf("state %s with drain's action still pending: want Terminating:Wait", s)
	}
	if _, err := autoscaling.NewFromConfig(srv.AWSConfig()).CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName: aws.String("beats"), LifecycleHookName: aws.String("drain"), InstanceId: aws.String(instance),
		LifecycleActionResult: aws.String("CONTINUE")}); err != nil {
		t.Fatalf("completing drain's action: %v", err)
	}
	if d, ok := ended(ctx, t, "drain"); !ok || d.Cause != moto.EndCompleted || d.Result != "CONTINUE" {
		t.Errorf("drain's action: %+v (ended %v): want completed with CONTINUE", d, ok)
	}
	if s := state(ctx, t, "beats", instance); s != astypes.LifecycleStateTerminatingProceed {
		t.Errorf("state %s once every action ended: want Terminating:Proceed", s)
	}
}

// DeleteLifecycleHook completes the actions pending under the hook:
// CONTINUE for a terminating instance, ABANDON for a launching one.
func TestDeleteHookCompletesPendingActions(t *testing.T) {
	ctx := reset(t)
	instance := createGroup(ctx, t, "del", "drain") // 300 s, CONTINUE
	register(ctx, t, "del", "drain", instance, terminating)
	asc := autoscaling.NewFromConfig(srv.AWSConfig())
	if _, err := asc.DeleteLifecycleHook(ctx, &autoscaling.DeleteLifecycleHookInput{AutoScalingGroupName: aws.String("del"), LifecycleHookName: aws.String("drain")}); err != nil {
		t.Fatal(err)
	}
	if e, ok := ended(ctx, t, "drain"); !ok || e.Result != "CONTINUE" || e.Cause != moto.EndHookDeleted {
		t.Errorf("drain's action: %+v (ended %v): want CONTINUE by the hook's deletion", e, ok)
	}
	if s := state(ctx, t, "del", instance); s != astypes.LifecycleStateTerminatingProceed {
		t.Errorf("terminating instance's state %s: want Terminating:Proceed", s)
	}

	ctx = reset(t)
	instance = createGroup(ctx, t, "del", "drain")
	putHook(ctx, t, "del", "warmup", launching, 300, "CONTINUE")
	register(ctx, t, "del", "warmup", instance, launching)
	if s := state(ctx, t, "del", instance); s != astypes.LifecycleStatePendingWait {
		t.Fatalf("launching instance's state %s: want Pending:Wait", s)
	}
	if _, err := asc.DeleteLifecycleHook(ctx, &autoscaling.DeleteLifecycleHookInput{AutoScalingGroupName: aws.String("del"), LifecycleHookName: aws.String("warmup")}); err != nil {
		t.Fatal(err)
	}
	if e, ok := ended(ctx, t, "warmup"); !ok || e.Result != "ABANDON" || e.Cause != moto.EndHookDeleted {
		t.Errorf("warmup's action: %+v (ended %v): want ABANDON by the hook's deletion", e, ok)
	}
	if s := state(ctx, t, "del", instance); s != astypes.LifecycleStateTerminatingProceed {
		t.Errorf("launching instance's state %s after an ABANDON: want Terminating:Proceed", s)
	}
}
