// Package discovery finds the Auto Scaling groups chosen by a tag and puts
// node-drainer's lifecycle hooks on those that lack them, so that a node
// group created (or tagged) after the deployment is handled with no
// redeploy. It owns the hooks' settings: the same as the templates give the
// hooks they create on listed groups.
//
// A group is touched only while it carries the tag: the groups come from a
// tag-filtered describe and each is checked again for the tag (a filter is
// the server's reading, the check is ours); the role's IAM grant of
// autoscaling:PutLifecycleHook is conditioned on the same tag. A hook that
// exists with the right settings is left as it is; another tool's hook is
// never read for more than its name, never changed.
package discovery

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// API is the part of Auto Scaling discovery uses.
type API interface {
	autoscaling.DescribeAutoScalingGroupsAPIClient
	DescribeLifecycleHooks(ctx context.Context, in *autoscaling.DescribeLifecycleHooksInput, opts ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error)
	PutLifecycleHook(ctx context.Context, in *autoscaling.PutLifecycleHookInput, opts ...func(*autoscaling.Options)) (*autoscaling.PutLifecycleHookOutput, error)
}

// Tag is the tag that selects groups.
type Tag struct{ Key, Value string }

func (t Tag) String() string { return t.Key + "=" + t.Value }

// On reports whether g carries the tag with its value.
func (t Tag) On(g astypes.AutoScalingGroup) bool {
	return t.Key != "" && slices.ContainsFunc(g.Tags, func(tag astypes.TagDescription) bool {
		return aws.ToString(tag.Key) == t.Key && aws.ToString(tag.Value) == t.Value
	})
}

// Lifecycle transitions of the hooks.
const (
	Terminating = "autoscaling:EC2_INSTANCE_TERMINATING"
	Launching   = "autoscaling:EC2_INSTANCE_LAUNCHING"
)

// Hook is a lifecycle hook as node-drainer wants it on each group.
type Hook struct {
	Name             string
	Transition       string
	HeartbeatTimeout int32 // seconds
	DefaultResult    string
}

// Tagged lists the groups carrying tag (every page of a describe filtered
// by it), each checked again for the tag.
func Tagged(ctx context.Context, api autoscaling.DescribeAutoScalingGroupsAPIClient, tag Tag) ([]astypes.AutoScalingGroup, error) {
	if tag.Key == "" {
		return nil, nil
	}
	p := autoscaling.NewDescribeAutoScalingGroupsPaginator(api, &autoscaling.DescribeAutoScalingGroupsInput{
		MaxRecords: aws.Int32(100),
		Filters:    []astypes.Filter{{Name: aws.String("tag:" + tag.Key), Values: []string{tag.Value}}},
	})
	var groups []astypes.AutoScalingGroup
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describing auto scaling groups tagged %s: %w", tag, err)
		}
		for _, g := range out.AutoScalingGroups {
			if tag.On(g) {
				groups = append(groups, g)
			}
		}
	}
	return groups, nil
}

// Carries reads the named group now and reports whether it carries tag (a
// group that does not exist does not).
func Carries(ctx context.Context, api autoscaling.DescribeAutoScalingGroupsAPIClient, name string, tag Tag) (bool, error) {
	if tag.Key == "" || name == "" {
		return false, nil
	}
	out, err := api.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
	if err != nil {
		return false, fmt.Errorf("reading the tags of auto scaling group %s: %w", name, err)
	}
	for _, g := range out.AutoScalingGroups {
		if aws.ToString(g.AutoScalingGroupName) == name && tag.On(g) {
			return true, nil
		}
	}
	return false, nil
}

// Result is what Ensure found and did.
type Result struct {
	Groups int      // tagged groups looked at
	Put    []string // "<group>/<hook>": hooks created, or corrected
	Failed []string // "<group>: <error>"
}

// Ensure puts each of hooks on every group carrying tag that lacks it, or
// whose hook of that name has other settings; a hook with the right
// settings is not written again. With dryRun it says what it would put and
// writes nothing. One group's failure does not stop the others (Failed).
// The error is the listing's: then nothing was done.
func Ensure(ctx context.Context, api API, tag Tag, hooks []Hook, dryRun bool) (Result, error) {
	var res Result
	if tag.Key == "" || len(hooks) == 0 {
		return res, nil
	}
	groups, err := Tagged(ctx, api, tag)
	if err != nil {
		return res, err
	}
	res.Groups = len(groups)
	for _, g := range groups {
		name := aws.ToString(g.AutoScalingGroupName)
		put, err := ensureGroup(ctx, api, name, hooks, dryRun)
		for _, h := range put {
			res.Put = append(res.Put, name+"/"+h)
		}
		if err != nil {
			res.Failed = append(res.Failed, name+": "+err.Error())
		}
	}
	return res, nil
}

// ensureGroup puts the hooks group lacks; it returns their names.
func ensureGroup(ctx context.Context, api API, group string, hooks []Hook, dryRun bool) ([]string, error) {
	names := make([]string, len(hooks))
	for i, h := range hooks {
		names[i] = h.Name
	}
	out, err := api.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{
		AutoScalingGroupName: aws.String(group), LifecycleHookNames: names,
	})
	if err != nil {
		return nil, fmt.Errorf("describing lifecycle hooks: %w", err)
	}
	var put []string
	for _, want := range hooks {
		i := slices.IndexFunc(out.LifecycleHooks, func(h astypes.LifecycleHook) bool { return aws.ToString(h.LifecycleHookName) == want.Name })
		if i >= 0 && matches(out.LifecycleHooks[i], want) {
			continue
		}
		if !dryRun {
			if _, err := api.PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{
				AutoScalingGroupName: aws.String(group),
				LifecycleHookName:    aws.String(want.Name),
				LifecycleTransition:  aws.String(want.Transition),
				HeartbeatTimeout:     aws.Int32(want.HeartbeatTimeout),
				DefaultResult:        aws.String(want.DefaultResult),
			}); err != nil {
				return put, fmt.Errorf("putting lifecycle hook %s: %w", want.Name, err)
			}
		}
		put = append(put, want.Name)
	}
	return put, nil
}

// matches reports whether an existing hook has the settings wanted.
func matches(h astypes.LifecycleHook, want Hook) bool {
	return aws.ToString(h.LifecycleTransition) == want.Transition &&
		aws.ToInt32(h.HeartbeatTimeout) == want.HeartbeatTimeout &&
		strings.EqualFold(aws.ToString(h.DefaultResult), want.DefaultResult)
}
