package moto_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// srv is shared by the package's tests, which Reset it first.
var srv *moto.Server

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "moto-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	srv, err = moto.Start(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: starting moto:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := srv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping moto:", err)
	}
	if err := srv.Stop(); err != nil { // idempotent
		fmt.Fprintln(os.Stderr, "stopping moto twice:", err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func reset(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if err := srv.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// createGroup creates a launch template, an Auto Scaling group of one
// instance and a terminate lifecycle hook; it returns the instance id.
func createGroup(ctx context.Context, t *testing.T, asg, hook string) string {
	t.Helper()
	cfg := srv.AWSConfig()
	ec2c := ec2.NewFromConfig(cfg)
	asc := autoscaling.NewFromConfig(cfg)
	if _, err := ec2c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String(asg + "-lt"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{
			ImageId:      aws.String("ami-12c6146b"),
			InstanceType: ec2types.InstanceTypeT3Medium,
		},
	}); err != nil {
		t.Fatalf("CreateLaunchTemplate: %v", err)
	}
	if _, err := asc.CreateAutoScalingGroup(ctx, &autoscaling.CreateAutoScalingGroupInput{
		AutoScalingGroupName: aws.String(asg),
		LaunchTemplate:       &astypes.LaunchTemplateSpecification{LaunchTemplateName: aws.String(asg + "-lt")},
		MinSize:              aws.Int32(1),
		MaxSize:              aws.Int32(2),
		DesiredCapacity:      aws.Int32(1),
		AvailabilityZones:    []string{"us-east-1a"},
	}); err != nil {
		t.Fatalf("CreateAutoScalingGroup: %v", err)
	}
	if _, err := asc.PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{
		AutoScalingGroupName: aws.String(asg),
		LifecycleHookName:    aws.String(hook),
		LifecycleTransition:  aws.String("autoscaling:EC2_INSTANCE_TERMINATING"),
		HeartbeatTimeout:     aws.Int32(300),
		DefaultResult:        aws.String("CONTINUE"),
	}); err != nil {
		t.Fatalf("PutLifecycleHook: %v", err)
	}
	out, err := asc.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{
		AutoScalingGroupNames: []string{asg},
	})
	if err != nil {
		t.Fatalf("DescribeAutoScalingGroups: %v", err)
	}
	if len(out.AutoScalingGroups) != 1 || len(out.AutoScalingGroups[0].Instances) != 1 {
		t.Fatalf("want one group with one instance, got %+v", out.AutoScalingGroups)
	}
	return aws.ToString(out.AutoScalingGroups[0].Instances[0].InstanceId)
}

func wantValidationError(t *testing.T, err error, msg string) {
	t.Helper()
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("want smithy.APIError, got %T %v", err, err)
	}
	if apiErr.ErrorCode() != "ValidationError" || apiErr.ErrorMessage() != msg {
		t.Fatalf("want ValidationError %q, got %s %q", msg, apiErr.ErrorCode(), apiErr.ErrorMessage())
	}
}

func TestLifecycleActions(t *testing.T) {
	ctx := reset(t)
	const asg, hook, token = "nodes", "drain", "6d4a1f0e-0000-4000-8000-000000000001"
	instance := createGroup(ctx, t, asg, hook)
	asc := autoscaling.NewFromConfig(srv.AWSConfig())

	if err := srv.RegisterLifecycleAction(ctx, moto.LifecycleAction{
		ASG: asg, Hook: hook, InstanceID: instance, Token: token,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := asc.RecordLifecycleActionHeartbeat(ctx, &autoscaling.RecordLifecycleActionHeartbeatInput{
		AutoScalingGroupName: aws.String(asg), LifecycleHookName: aws.String(hook), LifecycleActionToken: aws.String(token),
	}); err != nil {
		t.Fatalf("RecordLifecycleActionHeartbeat: %v", err)
	}
	_, err := asc.CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName: aws.String(asg), LifecycleHookName: aws.String("other-hook"),
		LifecycleActionToken: aws.String(token), LifecycleActionResult: aws.String("CONTINUE"),
	})
	wantValidationError(t, err, "No Lifecycle Hook found with name other-hook in group nodes")
	if _, err := asc.CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName: aws.String(asg), LifecycleHookName: aws.String(hook),
		LifecycleActionToken: aws.String(token), LifecycleActionResult: aws.String("CONTINUE"),
	}); err != nil {
		t.Fatalf("CompleteLifecycleAction: %v", err)
	}
	_, err = asc.CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName: aws.String(asg), LifecycleHookName: aws.String(hook),
		LifecycleActionToken: aws.String(token), LifecycleActionResult: aws.String("CONTINUE"),
	})
	wantValidationError(t, err, "No active Lifecycle Action found with token "+token)
	_, err = asc.RecordLifecycleActionHeartbeat(ctx, &autoscaling.RecordLifecycleActionHeartbeatInput{
		AutoScalingGroupName: aws.String(asg), LifecycleHookName: aws.String(hook), InstanceId: aws.String(instance),
	})
	wantValidationError(t, err, "No active Lifecycle Action found with instance ID "+instance)

	calls, err := srv.LifecycleCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ op, outcome string }{
		{"RecordLifecycleActionHeartbeat", "ok"},
		{"CompleteLifecycleAction", "No Lifecycle Hook found with name other-hook in group nodes"},
		{"CompleteLifecycleAction", "ok"},
		{"CompleteLifecycleAction", "No active Lifecycle Action found with token " + token},
		{"RecordLifecycleActionHeartbeat", "No active Lifecycle Action found with instance ID " + instance},
	}
	if len(calls) != len(want) {
		t.Fatalf("want %d calls, got %+v", len(want), calls)
	}
	for i, w := range want {
		c := calls[i]
		if c.Operation != w.op || c.Outcome != w.outcome || c.OK() != (w.outcome == "ok") {
			t.Errorf("call %d: want %s %q, got %+v", i, w.op, w.outcome, c)
		}
		if time.Since(c.Time) > time.Minute || c.Params["AutoScalingGroupName"] != asg {
			t.Errorf("call %d: bad time or params: %+v", i, c)
		}
	}
	if p := calls[2].Params; p["LifecycleActionToken"] != token || p["LifecycleActionResult"] != "CONTINUE" || p["LifecycleHookName"] != hook {
		t.Errorf("completion params: %v", p)
	}

	if err := srv.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if calls, err := srv.LifecycleCalls(ctx); err != nil || len(calls) != 0 {
		t.Fatalf("after reset: calls %+v, err %v", calls, err)
	}
}

func TestCompleteByInstanceID(t *testing.T) {
	ctx := reset(t)
	instance := createGroup(ctx, t, "byid", "hook")
	asc := autoscaling.NewFromConfig(srv.AWSConfig())
	if err := srv.RegisterLifecycleAction(ctx, moto.LifecycleAction{
		ASG: "byid", Hook: "hook", InstanceID: instance, Token: "tok-1",
	}); err != nil {
		t.Fatal(err)
	}
	in := &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName: aws.String("byid"), LifecycleHookName: aws.String("hook"),
		InstanceId: aws.String(instance), LifecycleActionResult: aws.String("ABANDON"),
	}
	if _, err := asc.CompleteLifecycleAction(ctx, in); err != nil {
		t.Fatalf("CompleteLifecycleAction by instance id: %v", err)
	}
	_, err := asc.CompleteLifecycleAction(ctx, in)
	wantValidationError(t, err, "No active Lifecycle Action found with instance ID "+instance)
}

func TestResetClearsActions(t *testing.T) {
	ctx := reset(t)
	createGroup(ctx, t, "g", "h")
	if err := srv.RegisterLifecycleAction(ctx, moto.LifecycleAction{ASG: "g", Hook: "h", InstanceID: "i-1", Token: "t"}); err != nil {
		t.Fatal(err)
	}
	ctx = reset(t)
	createGroup(ctx, t, "g", "h") // the group is gone too; recreate it
	_, err := autoscaling.NewFromConfig(srv.AWSConfig()).CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName: aws.String("g"), LifecycleHookName: aws.String("h"),
		LifecycleActionToken: aws.String("t"), LifecycleActionResult: aws.String("CONTINUE"),
	})
	wantValidationError(t, err, "No active Lifecycle Action found with token t")
}

func TestRegisterValidates(t *testing.T) {
	ctx := reset(t)
	err := srv.RegisterLifecycleAction(ctx, moto.LifecycleAction{ASG: "g", Hook: "h"})
	if err == nil || !strings.Contains(err.Error(), "missing fields: instanceId, token") {
		t.Fatalf("want missing fields error, got %v", err)
	}
}

// TestAssumeRole documents what moto's STS gives the drainer: AssumeRole
// needs no IAM role to exist, and GetCallerIdentity with the returned
// credentials answers arn:aws:sts::123456789012:assumed-role/<role>/<session>.
func TestAssumeRole(t *testing.T) {
	ctx := reset(t)
	cfg := srv.AWSConfig()
	out, err := sts.NewFromConfig(cfg).AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn:         aws.String("arn:aws:iam::" + moto.AccountID + ":role/node-drainer"),
		RoleSessionName: aws.String("drainer-1"),
	})
	if err != nil {
		t.Fatalf("AssumeRole: %v", err)
	}
	const wantARN = "arn:aws:sts::" + moto.AccountID + ":assumed-role/node-drainer/drainer-1"
	if got := aws.ToString(out.AssumedRoleUser.Arn); got != wantARN {
		t.Errorf("AssumedRoleUser.Arn = %s, want %s", got, wantARN)
	}
	c := out.Credentials
	cfg.Credentials = credentials.NewStaticCredentialsProvider(aws.ToString(c.AccessKeyId), aws.ToString(c.SecretAccessKey), aws.ToString(c.SessionToken))
	id, err := sts.NewFromConfig(cfg).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatalf("GetCallerIdentity: %v", err)
	}
	if aws.ToString(id.Arn) != wantARN || aws.ToString(id.Account) != moto.AccountID {
		t.Errorf("GetCallerIdentity = %s (account %s), want %s", aws.ToString(id.Arn), aws.ToString(id.Account), wantARN)
	}
}

func TestStartNamesWhatToInstall(t *testing.T) {
	bin := t.TempDir()
	t.Setenv("PATH", bin)
	_, err := moto.Start(context.Background(), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "install python3") {
		t.Fatalf("without python3: want an error naming what to install, got %v", err)
	}

	// A python3 without moto.
	fake := "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'moto'\" >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "python3"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = moto.Start(context.Background(), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "pip install 'moto[server]'") {
		t.Fatalf("without moto: want an error naming what to install, got %v", err)
	}
}

// The SQS calls the bench's peer needs: a queue, a message on it.
func TestSQSQueue(t *testing.T) {
	ctx := reset(t)
	u, err := srv.CreateQueue(ctx, "peer-events")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(u, "/"+moto.AccountID+"/peer-events") {
		t.Fatalf("queue URL %q", u)
	}
	if again, err := srv.CreateQueue(ctx, "peer-events"); err != nil || again != u {
		t.Fatalf("creating it again: %q, %v; want %q", again, err, u)
	}
	if err := srv.SendMessage(ctx, u, `{"detail-type":"EC2 Instance-terminate Lifecycle Action"}`); err != nil {
		t.Fatal(err)
	}
	if err := srv.SendMessage(ctx, u+"-missing", "x"); err == nil {
		t.Fatal("sending to a queue that does not exist: no error")
	}
}

// TestEKSAccessEntries exercises the access-entry extension with the SDK's
// own EKS client, as terraform's aws provider calls it.
func TestEKSAccessEntries(t *testing.T) {
	ctx := reset(t)
	c := eks.NewFromConfig(srv.AWSConfig())
	role := "arn:aws:iam::" + moto.AccountID + ":role/node-drainer-x"
	if _, err := c.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String("nope"), PrincipalArn: aws.String(role)}); !isCode(err, "ResourceNotFoundException") {
		t.Fatalf("CreateAccessEntry on a missing cluster: got %v, want ResourceNotFoundException", err)
	}
	if _, err := c.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String("c1"), RoleArn: aws.String("arn:aws:iam::" + moto.AccountID + ":role/eks"),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{"subnet-1"}}}); err != nil {
		t.Fatal(err)
	}
	out, err := c.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String("c1"), PrincipalArn: aws.String(role),
		KubernetesGroups: []string{"node-drainer"}, Tags: map[string]string{"a": "b"}})
	if err != nil {
		t.Fatalf("CreateAccessEntry: %v", err)
	}
	e := out.AccessEntry
	if *e.PrincipalArn != role || *e.Type != "STANDARD" || len(e.KubernetesGroups) != 1 || e.KubernetesGroups[0] != "node-drainer" ||
		*e.Username != "arn:aws:sts::"+moto.AccountID+":assumed-role/node-drainer-x/{{SessionName}}" || !strings.Contains(*e.AccessEntryArn, ":access-entry/c1/role/") {
		t.Fatalf("created entry: %+v", *e)
	}
	if _, err := c.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String("c1"), PrincipalArn: aws.String(role)}); !isCode(err, "ResourceInUseException") {
		t.Fatalf("second CreateAccessEntry: got %v, want ResourceInUseException", err)
	}
	d, err := c.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String("c1"), PrincipalArn: aws.String(role)})
	if err != nil || *d.AccessEntry.AccessEntryArn != *e.AccessEntryArn || d.AccessEntry.Tags["a"] != "b" {
		t.Fatalf("DescribeAccessEntry: %v %+v", err, d)
	}
	if tags, err := c.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: e.AccessEntryArn}); err != nil || tags.Tags["a"] != "b" {
		t.Fatalf("ListTagsForResource: %v %+v", err, tags)
	}
	list, err := c.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String("c1")})
	if err != nil || len(list.AccessEntries) != 1 || list.AccessEntries[0] != role {
		t.Fatalf("ListAccessEntries: %v %+v", err, list)
	}
	policy := "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
	if _, err := c.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String("c1"), PrincipalArn: aws.String(role),
		PolicyArn: aws.String(policy), AccessScope: &ekstypes.AccessScope{Type: ekstypes.AccessScopeTypeNamespace, Namespaces: []string{"kube-system"}}}); err != nil {
		t.Fatalf("AssociateAccessPolicy: %v", err)
	}
	pols, err := c.ListAssociatedAccessPolicies(ctx, &eks.ListAssociatedAccessPoliciesInput{ClusterName: aws.String("c1"), PrincipalArn: aws.String(role)})
	if err != nil || len(pols.AssociatedAccessPolicies) != 1 || *pols.AssociatedAccessPolicies[0].PolicyArn != policy ||
		pols.AssociatedAccessPolicies[0].AccessScope.Namespaces[0] != "kube-system" {
		t.Fatalf("ListAssociatedAccessPolicies: %v %+v", err, pols)
	}
	if _, err := c.DisassociateAccessPolicy(ctx, &eks.DisassociateAccessPolicyInput{ClusterName: aws.String("c1"), PrincipalArn: aws.String(role), PolicyArn: aws.String(policy)}); err != nil {
		t.Fatalf("DisassociateAccessPolicy: %v", err)
	}
	if _, err := c.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String("c1"), PrincipalArn: aws.String(role)}); err != nil {
		t.Fatalf("DeleteAccessEntry: %v", err)
	}
	if _, err := c.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String("c1"), PrincipalArn: aws.String(role)}); !isCode(err, "ResourceNotFoundException") {
		t.Fatalf("DescribeAccessEntry after delete: got %v, want ResourceNotFoundException", err)
	}

	// DescribeCluster answers what SetEKSCluster chose.
	if err := srv.SetEKSCluster(ctx, "c1", "https://127.0.0.1:6443", "Q0E="); err != nil {
		t.Fatal(err)
	}
	cl, err := c.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("c1")})
	if err != nil || *cl.Cluster.Endpoint != "https://127.0.0.1:6443" || *cl.Cluster.CertificateAuthority.Data != "Q0E=" {
		t.Fatalf("DescribeCluster: %v %+v", err, cl)
	}
}

func isCode(err error, code string) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == code
}

// TestCloudWatchAlarmsCBOR drives the metric-alarm operations with the SDK's
// CloudWatch client, which speaks Smithy rpc-v2-cbor (as terraform's aws
// provider does), against motoext's CBOR endpoint.
func TestCloudWatchAlarmsCBOR(t *testing.T) {
	ctx := reset(t)
	c := cloudwatch.NewFromConfig(srv.AWSConfig())
	topic := "arn:aws:sns:us-east-1:" + moto.AccountID + ":node-drainer-alarms"
	in := &cloudwatch.PutMetricAlarmInput{
		AlarmName:               aws.String("node-drainer-errors"),
		AlarmDescription:        aws.String("drain errors"),
		ActionsEnabled:          aws.Bool(true),
		AlarmActions:            []string{topic},
		OKActions:               []string{topic},
		InsufficientDataActions: []string{},
		MetricName:              aws.String("DrainErrors"),
		Namespace:               aws.String("NodeDrainer"),
		Statistic:               cwtypes.StatisticSum,
		Dimensions:              []cwtypes.Dimension{{Name: aws.String("Cluster"), Value: aws.String("c1")}},
		Period:                  aws.Int32(300),
		Unit:                    cwtypes.StandardUnitCount,
		EvaluationPeriods:       aws.Int32(2),
		DatapointsToAlarm:       aws.Int32(1),
		Threshold:               aws.Float64(0.5),
		ComparisonOperator:      cwtypes.ComparisonOperatorGreaterThanOrEqualToThreshold,
		TreatMissingData:        aws.String("notBreaching"),
		Tags:                    []cwtypes.Tag{{Key: aws.String("team"), Value: aws.String("infra")}},
	}
	before := time.Now().Add(-time.Minute)
	if _, err := c.PutMetricAlarm(ctx, in); err != nil {
		t.Fatalf("PutMetricAlarm: %v", err)
	}
	out, err := c.DescribeAlarms(ctx, &cloudwatch.DescribeAlarmsInput{
		AlarmNames: []string{"node-drainer-errors"},
		AlarmTypes: []cwtypes.AlarmType{cwtypes.AlarmTypeMetricAlarm},
	})
	if err != nil {
		t.Fatalf("DescribeAlarms: %v", err)
	}
	if len(out.MetricAlarms) != 1 || len(out.CompositeAlarms) != 0 || out.NextToken != nil {
		t.Fatalf("DescribeAlarms: want one metric alarm, got %+v", out)
	}
	a := out.MetricAlarms[0]
	arn := "arn:aws:cloudwatch:us-east-1:" + moto.AccountID + ":alarm:node-drainer-errors"
	checks := []struct {
		name      string
		got, want any
	}{
		{"AlarmName", aws.ToString(a.AlarmName), "node-drainer-errors"},
		{"AlarmArn", aws.ToString(a.AlarmArn), arn},
		{"AlarmDescription", aws.ToString(a.AlarmDescription), "drain errors"},
		{"ActionsEnabled", aws.ToBool(a.ActionsEnabled), true},
		{"AlarmActions", fmt.Sprint(a.AlarmActions), fmt.Sprint([]string{topic})},
		{"OKActions", fmt.Sprint(a.OKActions), fmt.Sprint([]string{topic})},
		{"InsufficientDataActions", len(a.InsufficientDataActions), 0},
		{"StateValue", a.StateValue, cwtypes.StateValueOk},
		{"MetricName", aws.ToString(a.MetricName), "DrainErrors"},
		{"Namespace", aws.ToString(a.Namespace), "NodeDrainer"},
		{"Statistic", a.Statistic, cwtypes.StatisticSum},
		{"ExtendedStatistic", a.ExtendedStatistic, (*string)(nil)},
		{"Dimensions", len(a.Dimensions), 1},
		{"Period", aws.ToInt32(a.Period), int32(300)},
		{"Unit", a.Unit, cwtypes.StandardUnitCount},
		{"EvaluationPeriods", aws.ToInt32(a.EvaluationPeriods), int32(2)},
		{"DatapointsToAlarm", aws.ToInt32(a.DatapointsToAlarm), int32(1)},
		{"Threshold", aws.ToFloat64(a.Threshold), 0.5},
		{"ComparisonOperator", a.ComparisonOperator, cwtypes.ComparisonOperatorGreaterThanOrEqualToThreshold},
		{"TreatMissingData", aws.ToString(a.TreatMissingData), "notBreaching"},
		{"EvaluateLowSampleCountPercentile", a.EvaluateLowSampleCountPercentile, (*string)(nil)},
		{"Metrics", len(a.Metrics), 0},
		{"ThresholdMetricId", a.ThresholdMetricId, (*string)(nil)},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %#v, want %#v", ch.name, ch.got, ch.want)
		}
	}
	if len(a.Dimensions) == 1 && (aws.ToString(a.Dimensions[0].Name) != "Cluster" || aws.ToString(a.Dimensions[0].Value) != "c1") {
		t.Errorf("Dimensions: got %+v", a.Dimensions[0])
	}
	if a.AlarmConfigurationUpdatedTimestamp == nil || a.AlarmConfigurationUpdatedTimestamp.Before(before) ||
		a.StateUpdatedTimestamp == nil || a.StateUpdatedTimestamp.Before(before) {
		t.Errorf("timestamps: configuration %v, state %v, want after %v", a.AlarmConfigurationUpdatedTimestamp, a.StateUpdatedTimestamp, before)
	}

	tags, err := c.ListTagsForResource(ctx, &cloudwatch.ListTagsForResourceInput{ResourceARN: aws.String(arn)})
	if err != nil || len(tags.Tags) != 1 || aws.ToString(tags.Tags[0].Key) != "team" || aws.ToString(tags.Tags[0].Value) != "infra" {
		t.Fatalf("ListTagsForResource: %v %+v", err, tags)
	}
	if _, err := c.TagResource(ctx, &cloudwatch.TagResourceInput{ResourceARN: aws.String(arn),
		Tags: []cwtypes.Tag{{Key: aws.String("env"), Value: aws.String("test")}}}); err != nil {
		t.Fatalf("TagResource: %v", err)
	}
	if _, err := c.UntagResource(ctx, &cloudwatch.UntagResourceInput{ResourceARN: aws.String(arn), TagKeys: []string{"team"}}); err != nil {
		t.Fatalf("UntagResource: %v", err)
	}
	tags, err = c.ListTagsForResource(ctx, &cloudwatch.ListTagsForResourceInput{ResourceARN: aws.String(arn)})
	if err != nil || len(tags.Tags) != 1 || aws.ToString(tags.Tags[0].Key) != "env" {
		t.Fatalf("ListTagsForResource after tag/untag: %v %+v", err, tags)
	}

	if _, err := c.DeleteAlarms(ctx, &cloudwatch.DeleteAlarmsInput{AlarmNames: []string{"node-drainer-errors"}}); err != nil {
		t.Fatalf("DeleteAlarms: %v", err)
	}
	out, err = c.DescribeAlarms(ctx, &cloudwatch.DescribeAlarmsInput{AlarmNames: []string{"node-drainer-errors"}})
	if err != nil || len(out.MetricAlarms) != 0 || len(out.CompositeAlarms) != 0 {
		t.Fatalf("DescribeAlarms after delete: %v %+v", err, out)
	}

	// A request without AlarmName reaches the server (the client's own
	// validation is removed) and comes back as a CBOR error the SDK decodes.
	noValidation := func(o *cloudwatch.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			_, err := s.Initialize.Remove("OperationInputValidation")
			return err
		})
	}
	bad := *in
	bad.AlarmName = nil
	_, err = c.PutMetricAlarm(ctx, &bad, noValidation)
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "ValidationError" || !strings.Contains(apiErr.ErrorMessage(), "alarmName") {
		t.Fatalf("PutMetricAlarm without AlarmName: want API error ValidationError about alarmName, got %T %v", err, err)
	}
}

// The dashboard operations over rpc-v2-cbor (the terraform provider's
// aws_cloudwatch_dashboard): put, get, list, delete, and the errors real
// CloudWatch gives for a body that is not JSON and a dashboard that is gone.
func TestCloudWatchDashboardsCBOR(t *testing.T) {
	ctx := reset(t)
	c := cloudwatch.NewFromConfig(srv.AWSConfig())
	body := `{"widgets":[{"type":"text","x":0,"y":0,"width":6,"height":3,"properties":{"markdown":"hi"}}]}`
	if _, err := c.PutDashboard(ctx, &cloudwatch.PutDashboardInput{DashboardName: aws.String("nd"), DashboardBody: aws.String(body)}); err != nil {
		t.Fatalf("PutDashboard: %v", err)
	}
	if _, err := c.PutDashboard(ctx, &cloudwatch.PutDashboardInput{DashboardName: aws.String("bad"), DashboardBody: aws.String("{")}); err == nil {
		t.Error("PutDashboard with a body that is not JSON: no error")
	}
	got, err := c.GetDashboard(ctx, &cloudwatch.GetDashboardInput{DashboardName: aws.String("nd")})
	if err != nil {
		t.Fatalf("GetDashboard: %v", err)
	}
	if aws.ToString(got.DashboardBody) != body || aws.ToString(got.DashboardName) != "nd" ||
		aws.ToString(got.DashboardArn) != "arn:aws:cloudwatch::"+moto.AccountID+":dashboard/nd" {
		t.Errorf("GetDashboard: %s %s %s", aws.ToString(got.DashboardName), aws.ToString(got.DashboardArn), aws.ToString(got.DashboardBody))
	}
	list, err := c.ListDashboards(ctx, &cloudwatch.ListDashboardsInput{DashboardNamePrefix: aws.String("n")})
	if err != nil || len(list.DashboardEntries) != 1 || aws.ToString(list.DashboardEntries[0].DashboardName) != "nd" || aws.ToInt64(list.DashboardEntries[0].Size) != int64(len(body)) {
		t.Fatalf("ListDashboards: %v %+v", err, list)
	}
	if _, err := c.DeleteDashboards(ctx, &cloudwatch.DeleteDashboardsInput{DashboardNames: []string{"nd"}}); err != nil {
		t.Fatalf("DeleteDashboards: %v", err)
	}
	var nf *cwtypes.ResourceNotFound
	if _, err := c.GetDashboard(ctx, &cloudwatch.GetDashboardInput{DashboardName: aws.String("nd")}); !errors.As(err, &nf) {
		t.Errorf("GetDashboard after the delete: %v, want ResourceNotFound", err)
	}
}
