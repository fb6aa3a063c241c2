package handler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
)

// A group's policy (GROUP_POLICY_TAGS): its own node-drainer.io/ tags
// override REBALANCE_ACTION, SCHEDULED_CHANGE_ACTION and DRAIN_TIMEOUT for
// its instances (config.GroupPolicy reads them). An event reads its group
// once at most: one DescribeAutoScalingGroups, none when the event's path
// read the group already (whose, a group chosen by ASG_TAG_KEY), none when
// a warm function read it less than groupTagsTTL ago. A value refused, or a
// group that cannot be read, leaves the setting's own value, a warning and
// the GroupPolicyDefaulted metric: an event is never failed for a tag.

// The groups' policy tags are kept groupTagsTTL (a tag changed is heeded
// after at most that long), groupTagsMax groups at most; a reading is
// bounded by groupPolicyReadLimit, out of the drain's time.
const (
	groupTagsTTL         = 60 * time.Second
	groupTagsMax         = 1000
	groupPolicyReadLimit = 5 * time.Second
)

// GroupPolicy is what the group's tags set for this event's instance
// (Outcome.GroupPolicy): the values taken, those refused, or why the group
// could not be read. A dry run shows it too.
type GroupPolicy struct {
	Group                 string   `json:"group"`
	RebalanceAction       string   `json:"rebalanceAction,omitempty"`
	ScheduledChangeAction string   `json:"scheduledChangeAction,omitempty"`
	DrainTimeout          string   `json:"drainTimeout,omitempty"`
	Refused               []string `json:"refused,omitempty"`
	Unread                string   `json:"unread,omitempty"`
}

// policy is an invocation's reading of its group's policy.
type policy struct{ *invocation }

// of is what group's tags set for this event (nothing when
// GROUP_POLICY_TAGS is off, or there is no group), put in the outcome.
func (r policy) of(ctx context.Context, group string) config.GroupOverrides {
	if !r.h.cfg.GroupTags || group == "" {
		return config.GroupOverrides{}
	}
	tags, err := r.h.groupTags(ctx, group)
	if err != nil {
		r.log.WarnContext(ctx, "group policy not read: the settings' own values apply", "asg", group, "error", err)
		r.defaulted(1)
		r.out.GroupPolicy = &GroupPolicy{Group: group, Unread: err.Error()}
		return config.GroupOverrides{}
	}
	o := r.h.cfg.GroupPolicy(tags)
	if !o.Any() {
		return o
	}
	p := &GroupPolicy{Group: group, RebalanceAction: string(o.RebalanceAction), ScheduledChangeAction: string(o.ScheduledChangeAction), Refused: o.Refused}
	if o.DrainTimeout > 0 {
		p.DrainTimeout = o.DrainTimeout.String()
	}
	r.out.GroupPolicy = p
	if len(o.Refused) > 0 {
		r.log.WarnContext(ctx, "group policy tag refused: the setting's own value applies", "asg", group, "refused", o.Refused)
		r.defaulted(len(o.Refused))
	}
	return o
}

// timeout is DRAIN_TIMEOUT, or what group's tag sets. A continuation
// whose group cannot be read keeps the timeout its drain began with: an
// unread group shortens no drain already given longer (a hook completed at
// a deadline shorter than its drain's leaves its pods running).
func (r policy) timeout(ctx context.Context, group string) time.Duration {
	if d := r.of(ctx, group).DrainTimeout; d > 0 {
		return d
	}
	if p := r.out.GroupPolicy; p != nil && p.Unread != "" && r.drainTimeout > 0 {
		return r.drainTimeout
	}
	return r.h.cfg.DrainTimeout
}

// advised is the action and drain timeout of an advisory event on inst:
// those given (the settings'), or what its group's tags set for the
// event's kind (a rebalance recommendation, a scheduled change).
func (r policy) advised(ctx context.Context, inst instance.Instance, action config.Action, timeout time.Duration) (config.Action, time.Duration) {
	o := r.of(ctx, inst.Tags[instance.TagGroupName])
	tagged := o.RebalanceAction
	if r.ev.Kind == event.KindScheduledChange {
		tagged = o.ScheduledChangeAction
	}
	if tagged != "" {
		action = tagged
	}
	if o.DrainTimeout > 0 {
		timeout = o.DrainTimeout
	}
	return action, timeout
}

// defaulted counts values of the group policy not taken (refused, or
// unread): the GroupPolicyDefaulted metric.
func (r policy) defaulted(n int) {
	if r.rep == nil {
		return
	}
	r.rep.mu.Lock()
	r.rep.policyDefaulted += n
	r.rep.mu.Unlock()
}

// continuationTimeout is the age past which a continuation is refused:
// DRAIN_TIMEOUT, or with group policies the longest a group may set.
func (h *Handler) continuationTimeout() time.Duration {
	if h.cfg.GroupTags {
		return h.cfg.MaxDrainTimeout()
	}
	return h.cfg.DrainTimeout
}

// groupTags returns the policy tags of group name: kept from a reading of
// less than groupTagsTTL ago, or read now (one DescribeAutoScalingGroups).
func (h *Handler) groupTags(ctx context.Context, name string) (map[string]string, error) {
	if v, ok := h.groups.Get(name); ok {
		return v.(map[string]string), nil
	}
	if h.c.AutoScaling == nil {
		return nil, errors.New("no Auto Scaling client to read the group's tags")
	}
	rctx, cancel := context.WithTimeout(ctx, groupPolicyReadLimit)
	defer cancel()
	out, err := h.c.AutoScaling.DescribeAutoScalingGroups(rctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
	if err != nil {
		return nil, fmt.Errorf("reading the tags of auto scaling group %s: %w", name, err)
	}
	return h.keepGroup(name, out), nil
}

// keepGroup keeps, for groupTagsTTL, the policy tags of group name from a
// reading of it, and returns them (none: the group has none).
func (h *Handler) keepGroup(name string, out *autoscaling.DescribeAutoScalingGroupsOutput) map[string]string {
	tags := map[string]string{}
	for _, g := range out.AutoScalingGroups {
		if aws.ToString(g.AutoScalingGroupName) != name {
			continue
		}
		for _, t := range g.Tags {
			if k := aws.ToString(t.Key); strings.HasPrefix(k, config.PolicyTagPrefix) {
				tags[k] = aws.ToString(t.Value)
			}
		}
	}
	h.groups.Add(name, tags, groupTagsTTL)
	return tags
}

// groupsRead is an Auto Scaling client that keeps its last reading of
// groups: the reading whose makes of a group's tags (ASG_TAG_KEY) serves
// its policy too, with no second call.
type groupsRead struct {
	autoscaling.DescribeAutoScalingGroupsAPIClient
	out *autoscaling.DescribeAutoScalingGroupsOutput
}

func (g *groupsRead) DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, opts ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	out, err := g.DescribeAutoScalingGroupsAPIClient.DescribeAutoScalingGroups(ctx, in, opts...)
	if err == nil {
		g.out = out
	}
	return out, err
}

// kept keeps group name's policy tags from what g read, when group
// policies are on and g read it.
func (h *Handler) kept(name string, g *groupsRead) {
	if h.cfg.GroupTags && g.out != nil {
		h.keepGroup(name, g.out)
	}
}
