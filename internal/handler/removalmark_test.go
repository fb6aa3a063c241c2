package handler

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/node-drainer/node-drainer/internal/hooks"
)

// markedSelf is Lambda's view of a function carrying tags (the removal's
// mark, internal/hooks), read and never written by a sweep.
type markedSelf struct {
	hooks.SelfAPI // a write fails the test: nil
	name          string
	tags          map[string]string
}

func (f *markedSelf) arn() string { return "arn:aws:lambda:us-east-1:123456789012:function:" + f.name }

func (f *markedSelf) ListTags(_ context.Context, in *lambda.ListTagsInput, _ ...func(*lambda.Options)) (*lambda.ListTagsOutput, error) {
	if aws.ToString(in.Resource) != f.arn() {
		return nil, &lambdatypes.ResourceNotFoundException{Message: aws.String("no such function " + aws.ToString(in.Resource))}
	}
	return &lambda.ListTagsOutput{Tags: f.tags}, nil
}

// TestSweepSaysTheRemovalMark: a removal mark is never silent. While a
// removal may still run (the mark younger than internal/hooks' removalMarkStale), the
// sweep puts no hook and says why in its summary and its metrics. A mark
// older than that is left by a removal that failed or was abandoned (a
// terraform destroy that failed, then an apply, which does not invoke the
// unchanged hooks resource again): no removal runs under it, so the sweep
// puts the hooks as usual, on the groups the failed removal stripped and
// on those tagged since, and says the mark is there and how to take it off.
func TestSweepSaysTheRemovalMark(t *testing.T) {
	for _, tc := range []struct {
		name   string
		age    time.Duration
		hooked bool
		note   string
	}{
		{"a removal running", time.Minute, false, "no hook put on tagged groups"},
		{"a removal that failed long ago", 2 * time.Hour, true, "aws lambda untag-resource"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv()
			tagMode(e)
			e.cfg.FunctionName = "node-drainer"
			e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("stripped", "true")}
			hp := &hookPutter{fakeASG: e.asg}
			self := &markedSelf{name: "node-drainer", tags: map[string]string{"node-drainer:removing": e.now.Add(-tc.age).UTC().Format(time.RFC3339)}}
			var buf bytes.Buffer
			h := New(e.cfg, Clients{Kube: e.kube, EC2: e.ec2, ASG: e.asg, AutoScaling: e.asg, Hooks: hp, Self: self}, nil,
				WithClock(newMovingClock(func() time.Time { return e.now })), WithMetrics(&buf))
			ctx, cancel := context.WithTimeout(lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{InvokedFunctionArn: self.arn()}), 5*time.Second)
			defer cancel()
			out, err := h.Handle(ctx, sweepEvent())
			if err != nil {
				t.Fatalf("sweep: %+v, %v", out.Sweep, err)
			}
			if got := len(hp.have["stripped"]) > 0; got != tc.hooked {
				t.Errorf("stripped has %v; want hooked %v", hp.have["stripped"], tc.hooked)
			}
			if out.Sweep == nil || out.Sweep.RemovalMarked == "" || !strings.Contains(strings.Join(out.Sweep.Notes, "; "), tc.note) {
				t.Errorf("sweep %+v; want the mark said (%q)", out.Sweep, tc.note)
			}
			if m := metricsLine(t, &buf); m["SweepRemovalMarked"] != 1.0 {
				t.Errorf("metric SweepRemovalMarked = %v, want 1", m["SweepRemovalMarked"])
			}
		})
	}
}
