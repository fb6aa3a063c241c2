package harness

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// HibernateReasonCode is the StateReason code EC2 gives an instance stopped
// with hibernation (StopInstances Hibernate=true): its RAM was saved to its
// root volume and comes back, with its volumes, when it is started.
const HibernateReasonCode = "Client.UserInitiatedHibernate"

// AddHibernatableInstance launches one more instance into the group made by
// CreateASG, from a new version of its launch template (made the default)
// with HibernationOptions Configured, as a group of hibernating instances
// is set up: only such an instance can be hibernated. It has the group's
// tags (the cluster tag among them) and no node.
func (e *Env) AddHibernatableInstance(ctx context.Context, asg string) (Instance, error) {
	cfg := e.AWS.AWSConfig()
	ec2c, asc := ec2.NewFromConfig(cfg), autoscaling.NewFromConfig(cfg)
	lt := asg + "-lt"
	v, err := ec2c.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{
		LaunchTemplateName: aws.String(lt), SourceVersion: aws.String("1"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{HibernationOptions: &ec2types.LaunchTemplateHibernationOptionsRequest{Configured: aws.Bool(true)}},
	})
	if err != nil {
		return Instance{}, fmt.Errorf("launch template %s with hibernation: %w", lt, err)
	}
	_, err = ec2c.ModifyLaunchTemplate(ctx, &ec2.ModifyLaunchTemplateInput{LaunchTemplateName: aws.String(lt),
		DefaultVersion: aws.String(strconv.FormatInt(aws.ToInt64(v.LaunchTemplateVersion.VersionNumber), 10))})
	if err != nil {
		return Instance{}, fmt.Errorf("launch template %s default version: %w", lt, err)
	}
	members := func() ([]string, int32, error) {
		out, err := asc.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{asg}})
		if err != nil || len(out.AutoScalingGroups) != 1 {
			return nil, 0, fmt.Errorf("describing ASG %s: %v", asg, err)
		}
		var ids []string
		for _, i := range out.AutoScalingGroups[0].Instances {
			ids = append(ids, aws.ToString(i.InstanceId))
		}
		return ids, aws.ToInt32(out.AutoScalingGroups[0].DesiredCapacity), nil
	}
	before, desired, err := members()
	if err != nil {
		return Instance{}, err
	}
	if _, err := asc.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String(asg), DesiredCapacity: aws.Int32(desired + 1)}); err != nil {
		return Instance{}, fmt.Errorf("scaling ASG %s out: %w", asg, err)
	}
	after, _, err := members()
	if err != nil {
		return Instance{}, err
	}
	var added []string
	for _, id := range after {
		if !slices.Contains(before, id) {
			added = append(added, id)
		}
	}
	if len(added) != 1 {
		return Instance{}, fmt.Errorf("ASG %s scaled out by %v, want one instance", asg, added)
	}
	desc, err := ec2c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: added})
	if err != nil || len(desc.Reservations) != 1 || len(desc.Reservations[0].Instances) != 1 {
		return Instance{}, fmt.Errorf("describing instance %s: %v", added[0], err)
	}
	i := desc.Reservations[0].Instances[0]
	if i.HibernationOptions == nil || !aws.ToBool(i.HibernationOptions.Configured) {
		return Instance{}, fmt.Errorf("instance %s launched without hibernation configured (the emulator's extension is missing?)", added[0])
	}
	return Instance{ID: added[0], PrivateDNSName: aws.ToString(i.PrivateDnsName), Zone: Zone}, nil
}

// Hibernate stops the instance with hibernation (StopInstances
// Hibernate=true): EC2 then reports it `stopped` with the StateReason code
// HibernateReasonCode.
func (e *Env) Hibernate(ctx context.Context, id string) error {
	_, err := ec2.NewFromConfig(e.AWS.AWSConfig()).StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}, Hibernate: aws.Bool(true)})
	if err != nil {
		return fmt.Errorf("hibernating instance %s: %w", id, err)
	}
	return nil
}
