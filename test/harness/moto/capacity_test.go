package moto_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// TestCapacityReservation: the instances an Auto Scaling group launches
// from a launch template that targets a Capacity Reservation run in it:
// DescribeInstances says so (CapacityReservationId) and finds them by the
// capacity-reservation-id filter, with the others; an instance launched
// without it runs in none and is not found.
func TestCapacityReservation(t *testing.T) {
	ctx := reset(t)
	cfg := srv.AWSConfig()
	c, asc := ec2.NewFromConfig(cfg), autoscaling.NewFromConfig(cfg)
	const cr = "cr-0d4b8f2a6c1e9e357"
	_, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String("block"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String("ami-12c6146b"),
			CapacityReservationSpecification: &ec2types.LaunchTemplateCapacityReservationSpecificationRequest{
				CapacityReservationTarget: &ec2types.CapacityReservationTarget{CapacityReservationId: aws.String(cr)}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := asc.CreateAutoScalingGroup(ctx, &autoscaling.CreateAutoScalingGroupInput{
		AutoScalingGroupName: aws.String("block"),
		LaunchTemplate:       &astypes.LaunchTemplateSpecification{LaunchTemplateName: aws.String("block")},
		MinSize:              aws.Int32(0), MaxSize: aws.Int32(2), DesiredCapacity: aws.Int32(2),
		AvailabilityZones: []string{"us-east-1a"},
	}); err != nil {
		t.Fatal(err)
	}
	plain, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-12c6146b"), MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	plainID := aws.ToString(plain.Instances[0].InstanceId)

	out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running"}},
		{Name: aws.String("capacity-reservation-id"), Values: []string{cr}}}})
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			found = append(found, aws.ToString(i.InstanceId))
			if got := aws.ToString(i.CapacityReservationId); got != cr {
				t.Errorf("instance %s of the group runs in %q, want %s", aws.ToString(i.InstanceId), got, cr)
			}
		}
	}
	if len(found) != 2 {
		t.Errorf("found %v by the reservation, want the group's 2 instances", found)
	}
	d, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{plainID}})
	if err != nil {
		t.Fatal(err)
	}
	if i := d.Reservations[0].Instances[0]; i.CapacityReservationId != nil {
		t.Errorf("instance launched without a reservation runs in %q", aws.ToString(i.CapacityReservationId))
	}
}
