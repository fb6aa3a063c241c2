// Package hookstest is a fake of Auto Scaling's lifecycle-hook calls for
// the unit tests of the packages that put and remove hooks
// (internal/hooks, and internal/handler's sweep).
package hookstest

import (
	"context"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// AutoScaling is discovery.API: the groups Groups describes (the test's
// own fake), and the hooks of each group in Have, put, deleted and
// described as Auto Scaling does, each call recorded.
type AutoScaling struct {
	Groups autoscaling.DescribeAutoScalingGroupsAPIClient

	mu        sync.Mutex
	Have      map[string][]astypes.LifecycleHook
	Puts      []string // "<group>/<hook>/<transition>"
	Deletes   []string // "<group>/<hook>"
	Calls     []string // "put <group>/<hook>", "delete <group>/<hook>", "heartbeat <group>/<hook>/<instance>", in turn
	DeleteErr error    // DeleteLifecycleHook fails
}

func (a *AutoScaling) DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, opts ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	return a.Groups.DescribeAutoScalingGroups(ctx, in, opts...)
}

func (a *AutoScaling) DescribeLifecycleHooks(_ context.Context, in *autoscaling.DescribeLifecycleHooksInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return &autoscaling.DescribeLifecycleHooksOutput{LifecycleHooks: a.Have[aws.ToString(in.AutoScalingGroupName)]}, nil
}

func (a *AutoScaling) PutLifecycleHook(_ context.Context, in *autoscaling.PutLifecycleHookInput, _ ...func(*autoscaling.Options)) (*autoscaling.PutLifecycleHookOutput, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	g := aws.ToString(in.AutoScalingGroupName)
	a.Puts = append(a.Puts, g+"/"+aws.ToString(in.LifecycleHookName)+"/"+aws.ToString(in.LifecycleTransition))
	a.Calls = append(a.Calls, "put "+g+"/"+aws.ToString(in.LifecycleHookName))
	if a.Have == nil {
		a.Have = map[string][]astypes.LifecycleHook{}
	}
	// a put over a hook of that name changes it, as Auto Scaling does
	a.Have[g] = slices.DeleteFunc(a.Have[g], func(x astypes.LifecycleHook) bool {
		return aws.ToString(x.LifecycleHookName) == aws.ToString(in.LifecycleHookName)
	})
	a.Have[g] = append(a.Have[g], astypes.LifecycleHook{LifecycleHookName: in.LifecycleHookName, LifecycleTransition: in.LifecycleTransition,
		HeartbeatTimeout: in.HeartbeatTimeout, DefaultResult: in.DefaultResult, NotificationMetadata: in.NotificationMetadata})
	return &autoscaling.PutLifecycleHookOutput{}, nil
}

func (a *AutoScaling) DeleteLifecycleHook(_ context.Context, in *autoscaling.DeleteLifecycleHookInput, _ ...func(*autoscaling.Options)) (*autoscaling.DeleteLifecycleHookOutput, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.DeleteErr != nil {
		return nil, a.DeleteErr
	}
	g := aws.ToString(in.AutoScalingGroupName)
	a.Deletes = append(a.Deletes, g+"/"+aws.ToString(in.LifecycleHookName))
	a.Calls = append(a.Calls, "delete "+g+"/"+aws.ToString(in.LifecycleHookName))
	a.Have[g] = slices.DeleteFunc(a.Have[g], func(x astypes.LifecycleHook) bool {
		return aws.ToString(x.LifecycleHookName) == aws.ToString(in.LifecycleHookName)
	})
	return &autoscaling.DeleteLifecycleHookOutput{}, nil
}

// RecordLifecycleActionHeartbeat records the heartbeat.
func (a *AutoScaling) RecordLifecycleActionHeartbeat(_ context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, _ ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.Calls = append(a.Calls, "heartbeat "+aws.ToString(in.AutoScalingGroupName)+"/"+aws.ToString(in.LifecycleHookName)+"/"+aws.ToString(in.InstanceId))
	return &autoscaling.RecordLifecycleActionHeartbeatOutput{}, nil
}

// DescribeWarmPool is Groups' when it reads warm pools; else no group has
// an instance in one.
func (a *AutoScaling) DescribeWarmPool(ctx context.Context, in *autoscaling.DescribeWarmPoolInput, opts ...func(*autoscaling.Options)) (*autoscaling.DescribeWarmPoolOutput, error) {
	if wp, ok := a.Groups.(interface {
		DescribeWarmPool(context.Context, *autoscaling.DescribeWarmPoolInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeWarmPoolOutput, error)
	}); ok {
		return wp.DescribeWarmPool(ctx, in, opts...)
	}
	return &autoscaling.DescribeWarmPoolOutput{}, nil
}

// HookNames are the names of the hooks on group, sorted.
func (a *AutoScaling) HookNames(group string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n []string
	for _, x := range a.Have[group] {
		n = append(n, aws.ToString(x.LifecycleHookName))
	}
	slices.Sort(n)
	return n
}
