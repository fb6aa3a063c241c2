package moto_test

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
)

// TestHibernation: an instance launched from a launch template with
// hibernation configured can be stopped with Hibernate=true, and EC2's view
// of it then says so (StateReason Client.UserInitiatedHibernate); an
// instance without it is refused, as EC2 refuses it; a start clears the
// reason; a plain stop gives the shutdown's reason.
func TestHibernation(t *testing.T) {
	ctx := reset(t)
	c := ec2.NewFromConfig(srv.AWSConfig())
	_, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String("hib"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String("ami-12c6146b"),
			HibernationOptions: &ec2types.LaunchTemplateHibernationOptionsRequest{Configured: aws.Bool(true)}}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(in *ec2.RunInstancesInput) string {
		t.Helper()
		in.MinCount, in.MaxCount = aws.Int32(1), aws.Int32(1)
		out, err := c.RunInstances(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.Instances[0].InstanceId)
	}
	hib := run(&ec2.RunInstancesInput{LaunchTemplate: &ec2types.LaunchTemplateSpecification{LaunchTemplateName: aws.String("hib")}})
	plain := run(&ec2.RunInstancesInput{ImageId: aws.String("ami-12c6146b")})
	describe := func(id string) ec2types.Instance {
		t.Helper()
		out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Reservations[0].Instances[0]
	}
	if i := describe(hib); i.HibernationOptions == nil || !aws.ToBool(i.HibernationOptions.Configured) {
		t.Fatalf("instance from the template: HibernationOptions %+v, want Configured", i.HibernationOptions)
	}

	_, err = c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{plain}, Hibernate: aws.Bool(true)})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "UnsupportedHibernationConfiguration" {
		t.Errorf("hibernating an instance not configured for it: %v, want UnsupportedHibernationConfiguration", err)
	}
	if s := describe(plain).State.Name; s != ec2types.InstanceStateNameRunning {
		t.Errorf("refused hibernation left the instance %s", s)
	}

	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{hib}, Hibernate: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	i := describe(hib)
	if i.State.Name != ec2types.InstanceStateNameStopped || i.StateReason == nil || aws.ToString(i.StateReason.Code) != "Client.UserInitiatedHibernate" {
		t.Errorf("hibernated: state %s reason %+v, want stopped, Client.UserInitiatedHibernate", i.State.Name, i.StateReason)
	}
	if _, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{hib}}); err != nil {
		t.Fatal(err)
	}
	if i := describe(hib); i.State.Name != ec2types.InstanceStateNameRunning || i.StateReason != nil && aws.ToString(i.StateReason.Code) != "" {
		t.Errorf("started: state %s reason %+v, want running, no reason", i.State.Name, i.StateReason)
	}
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{hib}}); err != nil {
		t.Fatal(err)
	}
	if i := describe(hib); i.StateReason == nil || aws.ToString(i.StateReason.Code) != "Client.UserInitiatedShutdown" {
		t.Errorf("plain stop: reason %+v, want Client.UserInitiatedShutdown", i.StateReason)
	}
}
