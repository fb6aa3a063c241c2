// Package lifecycle completes ASG lifecycle actions and keeps them alive with
// heartbeats while a drain runs. Completing an action that is no longer
// active (a duplicate event, a hook already completed or timed out) is not an
// error: the ASG is not waiting on us any more.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"k8s.io/utils/clock"
)

// Result is how a lifecycle action is completed.
type Result string

// Results of a lifecycle action.
const (
	Continue Result = "CONTINUE"
	Abandon  Result = "ABANDON"
)

// API is the part of Auto Scaling the function uses.
type API interface {
	CompleteLifecycleAction(ctx context.Context, in *autoscaling.CompleteLifecycleActionInput, opts ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error)
	RecordLifecycleActionHeartbeat(ctx context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, opts ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error)
	DescribeLifecycleHooks(ctx context.Context, in *autoscaling.DescribeLifecycleHooksInput, opts ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error)
}

// Action identifies one lifecycle action.
type Action struct {
	ASG, Hook, Token, InstanceID string
}

// Complete completes the action with result, once (the SDK's retries
// aside): Completion's first Try.
func Complete(ctx context.Context, api API, a Action, result Result) (bool, error) {
	return NewCompletion(api, a, result).Try(ctx)
}

// Completion is one completion of an action, which its caller may try
// again after a failure (the handler's backoff, a sibling's): each Try
// reports whether this completion completed the action (false: no active
// action any more, which is not an error). An action found no longer
// active by an attempt after the first (the SDK's retry, or a later Try,
// of one whose answer was lost: a connection dropped after the request
// was sent) is taken as completed by that earlier attempt: its request
// may have landed, and most likely did.
type Completion struct {
	api    API
	act    Action
	result Result
	sent   int // the attempts made so far, by every Try (the SDK's retries included)
}

// NewCompletion is the completion of a with result, not yet tried.
func NewCompletion(api API, a Action, result Result) *Completion {
	return &Completion{api: api, act: a, result: result}
}

// Try makes one call (with the SDK's retries) to complete the action.
func (c *Completion) Try(ctx context.Context) (bool, error) {
	a := c.act
	_, err := c.api.CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName:  aws.String(a.ASG),
		LifecycleHookName:     aws.String(a.Hook),
		LifecycleActionToken:  token(a),
		InstanceId:            aws.String(a.InstanceID),
		LifecycleActionResult: aws.String(string(c.result)),
	}, countAttempts(&c.sent))
	if IsNotActive(err) {
		return c.sent > 1, nil
	}
	if err != nil {
		return false, fmt.Errorf("completing lifecycle action (%s, %s, %s): %w", a.ASG, a.Hook, a.InstanceID, err)
	}
	return true, nil
}

// countAttempts counts the SDK's attempts of a call (its retries
// included): a middleware after the retry middleware runs once per attempt.
func countAttempts(n *int) func(*autoscaling.Options) {
	return func(o *autoscaling.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("nodeDrainerCountAttempts",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					*n++
					return next.HandleFinalize(ctx, in)
				}), middleware.After)
		})
	}
}

// token is the action's token, or nil for an action the sweep found without
// its event: Auto Scaling then finds the action by instance id.
func token(a Action) *string {
	if a.Token == "" {
		return nil
	}
	return aws.String(a.Token)
}

// IsNotActive reports the error AWS returns for an action that is no longer
// active: a ValidationError saying "No active Lifecycle Action found" (the
// action ended: completed, timed out, abandoned by another), or "No
// Lifecycle Hook found" (its hook deleted, which ended every action under
// it: an uninstall, a take-back; Auto Scaling's answer for a hook that is
// not there, as terraform's provider reads it on a deletion, and the
// harness's Auto Scaling's for a completion or a heartbeat of one).
func IsNotActive(err error) bool {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "ValidationError" {
		return false
	}
	msg := apiErr.ErrorMessage()
	return strings.Contains(msg, "No active Lifecycle Action found") || strings.Contains(msg, "No Lifecycle Hook found")
}

// Heartbeater is the one call Heartbeat needs (API has it).
type Heartbeater interface {
	RecordLifecycleActionHeartbeat(ctx context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, opts ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error)
}

// Heartbeat records one heartbeat, extending the hook's timeout.
func Heartbeat(ctx context.Context, api Heartbeater, a Action) error {
	_, err := api.RecordLifecycleActionHeartbeat(ctx, &autoscaling.RecordLifecycleActionHeartbeatInput{
		AutoScalingGroupName: aws.String(a.ASG),
		LifecycleHookName:    aws.String(a.Hook),
		LifecycleActionToken: token(a),
		InstanceId:           aws.String(a.InstanceID),
	})
	if err != nil {
		return fmt.Errorf("recording lifecycle heartbeat: %w", err)
	}
	return nil
}

// Hooks reads every lifecycle hook of group, in one call: the hook of an
// action, for its heartbeat timeout, and the others on its transition.
func Hooks(ctx context.Context, api API, group string) ([]astypes.LifecycleHook, error) {
	out, err := api.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(group)})
	if err != nil {
		return nil, fmt.Errorf("reading the lifecycle hooks of %s: %w", group, err)
	}
	return out.LifecycleHooks, nil
}

// Interval is how often the actions under the named hooks (the first an
// action's own, the others its siblings) are heartbeated: half the shortest
// heartbeat timeout among them, so one missed beat still leaves time;
// fallback stands for the first's when hooks do not list it with one.
func Interval(hooks []astypes.LifecycleHook, names []string, fallback time.Duration) time.Duration {
	interval := fallback
	for i, name := range names {
		j := slices.IndexFunc(hooks, func(h astypes.LifecycleHook) bool { return aws.ToString(h.LifecycleHookName) == name })
		if j < 0 || hooks[j].HeartbeatTimeout == nil {
			continue
		}
		half := time.Duration(*hooks[j].HeartbeatTimeout) * time.Second / 2
		if i == 0 || half < interval {
			interval = half
		}
	}
	return interval
}

// Beat records one heartbeat of each of acts and returns those still to be
// kept alive. Failures go to onErr; an action no longer active ("No active
// Lifecycle Action found": completed, timed out, its hook deleted) is
// reported once and dropped, as it can never be active again; failed says
// that another failure, to be tried again soon, happened.
func Beat(ctx context.Context, api API, acts []Action, onErr func(Action, error)) (kept []Action, failed bool) {
	for _, a := range acts {
		err := Heartbeat(ctx, api, a)
		switch {
		case err == nil || ctx.Err() != nil:
		case IsNotActive(err):
			onErr(a, err)
			continue
		default:
			onErr(a, err)
			failed = true
		}
		kept = append(kept, a)
	}
	return kept, failed
}

// KeepAlive heartbeats each of acts (Beat) every interval of clk (nil: the
// real clock) until ctx ends or stop is called, or none is left to keep
// alive; failures go to onErr. A failed heartbeat is tried again soon
// (retryAfter), not an interval later: at half the hook's timeout, the
// next regular beat would come as the hook expires.
func KeepAlive(ctx context.Context, api API, clk clock.WithTicker, acts []Action, interval time.Duration, onErr func(Action, error)) (stop func()) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := clk.NewTimer(interval)
		defer t.Stop()
		for len(acts) > 0 {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				var failed bool
				acts, failed = Beat(ctx, api, acts, onErr)
				next := interval
				if failed {
					next = retryAfter(interval)
				}
				t.Reset(next)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// retryAfter is how soon a failed heartbeat is tried again: a tenth of the
// interval, between 1 and 10 seconds.
func retryAfter(interval time.Duration) time.Duration {
	return min(max(interval/10, time.Second), 10*time.Second)
}

// InService reports whether an instance's lifecycle state in its Auto
// Scaling group says it serves the group or is entering it (InService,
// Pending, Pending:Wait, Pending:Proceed): no termination of it is under way
// or waiting, and it is not in a warm pool or on standby. An instance
// terminated into a warm pool (its terminate action completed) and launched
// from it again is in one of these.
func InService(state astypes.LifecycleState) bool {
	switch state {
	case astypes.LifecycleStateInService, astypes.LifecycleStatePending,
		astypes.LifecycleStatePendingWait, astypes.LifecycleStatePendingProceed:
		return true
	}
	return false
}

// Group reads group now, its instances and their lifecycle states
// included, with one DescribeAutoScalingGroups (nil: no such group).
func Group(ctx context.Context, api autoscaling.DescribeAutoScalingGroupsAPIClient, group string) (*astypes.AutoScalingGroup, error) {
	out, err := api.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{group}})
	if err != nil {
		return nil, fmt.Errorf("reading group %s: %w", group, err)
	}
	for i, g := range out.AutoScalingGroups {
		if aws.ToString(g.AutoScalingGroupName) == group {
			return &out.AutoScalingGroups[i], nil
		}
	}
	return nil, nil
}

// GroupState reads the instance's lifecycle state in group, with one
// DescribeAutoScalingGroups of that group; "" when the group does not list
// the instance (or does not exist).
func GroupState(ctx context.Context, api autoscaling.DescribeAutoScalingGroupsAPIClient, group, instanceID string) (astypes.LifecycleState, error) {
	out, err := api.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{group}})
	if err != nil {
		return "", fmt.Errorf("reading group %s: %w", group, err)
	}
	for _, g := range out.AutoScalingGroups {
		for _, i := range g.Instances {
			if aws.ToString(i.InstanceId) == instanceID {
				return i.LifecycleState, nil
			}
		}
	}
	return "", nil
}
