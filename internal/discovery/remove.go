package discovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/smithy-go"
)

// Remove takes, from each group, the hooks named that are owner's: those
// whose mark names it alone are deleted ("<group>/<hook>"); never another
// name, never a hook another deployment's mark names, nor one no
// deployment marked (made by hand, another tool's: rule 18). A shared mark
// from before one owner per hook loses owner's name, the rest of the
// metadata as it was ("<group>/<hook> kept for <others>"); it is read again
// after, and owner's name put back by another's removal at the same moment
// is taken out again (or the hook deleted, owner's alone then). Without an
// owner nothing is removed. A group that no longer exists has nothing to
// remove. It returns what it did (or, with dryRun, would do) and
// "<group>: <error>" of each group that failed; one group's failure does
// not stop the others.
func Remove(ctx context.Context, api API, groups, names []string, owner string, dryRun bool) (removed, failed []string) {
	if len(names) == 0 || owner == "" {
		return nil, nil
	}
	for _, g := range groups {
		hooks, err := describeHooks(ctx, api, g, names)
		if err != nil {
			if !isGone(err) {
				failed = append(failed, g+": "+err.Error())
			}
			continue
		}
		for _, h := range hooks {
			did, err := releaseAll(ctx, api, h, g, owner, dryRun)
			if err != nil {
				failed = append(failed, g+": "+err.Error())
			} else if did != "" {
				removed = append(removed, did)
			}
		}
	}
	return removed, failed
}

// Marked lists the groups of the region, less those of skip, that carry a
// hook of the names whose mark names owner (alone, or among others in a
// mark from before one owner per hook): the hooks a deployment put on
// groups it no longer selects (their tag taken off, or its value changed,
// since a sweep put them), which its removal must find so that none
// outlives it. One DescribeLifecycleHooks a group; a group that cannot be
// read is in failed ("<group>: <error>") and the others are read on; the
// error is the listing's.
func Marked(ctx context.Context, api API, names []string, owner string, skip []string) (groups, failed []string, err error) {
	if len(names) == 0 || owner == "" {
		return nil, nil, nil
	}
	p := autoscaling.NewDescribeAutoScalingGroupsPaginator(api, &autoscaling.DescribeAutoScalingGroupsInput{MaxRecords: aws.Int32(100)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return groups, failed, fmt.Errorf("describing the auto scaling groups: %w", err)
		}
		for _, g := range out.AutoScalingGroups {
			name := aws.ToString(g.AutoScalingGroupName)
			if slices.Contains(skip, name) || slices.Contains(groups, name) {
				continue
			}
			hooks, err := describeHooks(ctx, api, name, names)
			if err != nil && !isGone(err) {
				failed = append(failed, name+": "+err.Error())
			}
			if slices.ContainsFunc(hooks, func(h astypes.LifecycleHook) bool {
				st, _ := readMark(h).of(owner, "")
				return st == ours || st == shared
			}) {
				groups = append(groups, name)
			}
		}
	}
	return groups, failed, nil
}

// describeHooks reads the hooks of group of the names, and none other (the
// describe is asked for ours: never another's).
func describeHooks(ctx context.Context, api API, group string, names []string) ([]astypes.LifecycleHook, error) {
	out, err := api.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(group), LifecycleHookNames: names})
	if err != nil {
		return nil, fmt.Errorf("describing lifecycle hooks: %w", err)
	}
	var hooks []astypes.LifecycleHook
	for _, h := range out.LifecycleHooks {
		if slices.Contains(names, aws.ToString(h.LifecycleHookName)) {
			hooks = append(hooks, h)
		}
	}
	return hooks, nil
}

// releaseTries bounds the rereads of a shared mark after owner's name was
// taken out (two removals at the same moment put each other's back).
const releaseTries = 3

// releaseAll takes owner's part of hook h of group g (release), reading a
// shared hook again after to take out owner's name put back by another
// removal's write at the same moment; it says what it did last.
func releaseAll(ctx context.Context, api API, h astypes.LifecycleHook, g, owner string, dryRun bool) (string, error) {
	var said string
	for range releaseTries {
		did, kept, err := release(ctx, api, h, g, owner, dryRun)
		if did != "" {
			said = did
		}
		if err != nil || !kept || dryRun {
			return said, err
		}
		now, err := describeHooks(ctx, api, g, []string{aws.ToString(h.LifecycleHookName)})
		if err != nil || len(now) == 0 {
			return said, nil // its rewrite done; gone, or unread: the next removal reads it
		}
		h = now[0]
	}
	return said, nil
}

// release takes owner's part of hook h of group g (Remove); it says what it
// did ("" nothing: not owner's), and whether the hook was kept for others.
//
// Deleting the hook completes every action pending under it: this is the
// uninstall's (and an update's, for the groups leaving it), the one path
// that may (rule 17; the caller says each drain it cut). A hook not marked
// owner's is never deleted nor rewritten (rule 18).
func release(ctx context.Context, api API, h astypes.LifecycleHook, g, owner string, dryRun bool) (did string, kept bool, err error) {
	name := aws.ToString(h.LifecycleHookName)
	m := readMark(h)
	switch st, others := m.of(owner, ""); st {
	case ours:
	case shared:
		if in := again(h, g, m.with(others)); !dryRun {
			if err := fits(in); err != nil {
				return "", false, err
			}
			if _, err := api.PutLifecycleHook(ctx, in); err != nil && !isGone(err) {
				return "", false, fmt.Errorf("putting lifecycle hook %s again without %s: %w", name, owner, err)
			}
		}
		return g + "/" + name + " kept for " + strings.Join(others, ", "), true, nil
	default:
		return "", false, nil
	}
	if !dryRun {
		if _, err := api.DeleteLifecycleHook(ctx, &autoscaling.DeleteLifecycleHookInput{AutoScalingGroupName: aws.String(g), LifecycleHookName: aws.String(name)}); err != nil && !isGone(err) {
			return "", false, fmt.Errorf("deleting lifecycle hook %s: %w", name, err)
		}
	}
	return g + "/" + name, false, nil
}

// isGone reports Auto Scaling's answer for a group or hook that does not
// exist (a ValidationError naming it).
func isGone(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "ValidationError" {
		return false
	}
	msg := strings.ToLower(ae.ErrorMessage())
	return strings.Contains(msg, "not found") || strings.Contains(msg, "does not exist") || strings.Contains(msg, "no lifecycle hook")
}
