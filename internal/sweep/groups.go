package sweep

// Reading the auto scaling groups: the groups the configuration names (or
// tags), their warm pools and the lifecycle hooks of those with an instance
// waiting on one.

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/discovery"
)

func (r *Readings) readGroups(ctx context.Context, api ASGAPI, cfg Config) error {
	in := &autoscaling.DescribeAutoScalingGroupsInput{MaxRecords: aws.Int32(100)}
	switch {
	case len(cfg.ASGNames) > 0:
		in.AutoScalingGroupNames = cfg.ASGNames
	case cfg.GroupTag.Key != "":
		in = nil // the tagged groups alone
	default:
		in.Filters = []astypes.Filter{{Name: aws.String("tag-key"), Values: []string{cfg.ClusterTagKey}}}
	}
	seen := map[string]bool{}
	add := func(g astypes.AutoScalingGroup) {
		if name := aws.ToString(g.AutoScalingGroupName); !seen[name] {
			seen[name] = true
			r.Groups = append(r.Groups, Group{Name: name, Instances: g.Instances, warm: g.WarmPoolConfiguration != nil})
		}
	}
	if in != nil {
		p := autoscaling.NewDescribeAutoScalingGroupsPaginator(api, in)
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				return fmt.Errorf("describing auto scaling groups: %w", err)
			}
			for _, g := range out.AutoScalingGroups {
				add(g)
			}
		}
	}
	tagged := cfg.Tagged
	if tagged == nil {
		var err error
		if tagged, err = discovery.Tagged(ctx, api, cfg.GroupTag); err != nil {
			return err
		}
	}
	for _, g := range tagged {
		add(g)
	}
	if wp, ok := api.(WarmPoolAPI); ok {
		if err := r.readWarmPools(ctx, wp); err != nil {
			return err
		}
	}
	return r.readHooks(ctx, api)
}

// readWarmPools reads the warm pool of each group that has one.
func (r *Readings) readWarmPools(ctx context.Context, wp WarmPoolAPI) error {
	for i, g := range r.Groups {
		if !g.warm {
			continue
		}
		in := &autoscaling.DescribeWarmPoolInput{AutoScalingGroupName: aws.String(g.Name), MaxRecords: aws.Int32(50)}
		for {
			out, err := wp.DescribeWarmPool(ctx, in)
			if err != nil {
				return fmt.Errorf("describing the warm pool of %s: %w", g.Name, err)
			}
			r.Groups[i].Pool = append(r.Groups[i].Pool, out.Instances...)
			if aws.ToString(out.NextToken) == "" {
				break
			}
			in.NextToken = out.NextToken
		}
	}
	return nil
}

// readHooks reads the lifecycle hooks of each group with an instance
// waiting on one.
func (r *Readings) readHooks(ctx context.Context, api ASGAPI) error {
	for i, g := range r.Groups {
		if !slices.ContainsFunc(g.all(), waiting) {
			continue
		}
		out, err := api.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(g.Name)})
		if err != nil {
			return fmt.Errorf("describing lifecycle hooks of %s: %w", g.Name, err)
		}
		r.Groups[i].Hooks = out.LifecycleHooks
	}
	return nil
}
