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
	"github.com/node-drainer/node-drainer/internal/hooks/hookstest"
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

// TestSweepSaysTheRemovalMark: a removal mark is never silent. The sweep
// says it in its summary (RemovalMarked, and the note of internal/hooks'
// Removal) and its metrics, whether a removal may still run under it (no
// hook put) or it is older than that, left by a removal that failed (the
// hooks put as usual, the note says how to take it off): internal/hooks'
// TestRemovalMarkHeededByItsAge tells the two apart.
func TestSweepSaysTheRemovalMark(t *testing.T) {
	for _, age := range []time.Duration{time.Minute, 2 * time.Hour} {
		e := newEnv()
		tagMode(e)
		e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("stripped", "true")}
		since := e.now.Add(-age).UTC().Format(time.RFC3339)
		self := &markedSelf{name: "node-drainer", tags: map[string]string{"node-drainer:removing": since}}
		var buf bytes.Buffer
		h := New(e.cfg, Clients{Kube: e.kube, EC2: e.ec2, ASG: e.asg, AutoScaling: e.asg, Hooks: &hookstest.AutoScaling{Groups: e.asg}, Self: self}, nil,
			WithClock(newMovingClock(func() time.Time { return e.now })), WithMetrics(&buf))
		ctx, cancel := context.WithTimeout(lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{InvokedFunctionArn: self.arn()}), 5*time.Second)
		out, err := h.Handle(ctx, sweepEvent())
		cancel()
		if err != nil {
			t.Fatalf("mark %s old: sweep %+v, %v", age, out.Sweep, err)
		}
		if out.Sweep == nil || out.Sweep.RemovalMarked != since || !strings.Contains(strings.Join(out.Sweep.Notes, "; "), "node-drainer:removing") {
			t.Errorf("mark %s old: sweep %+v; want the mark said", age, out.Sweep)
		}
		if m := metricsLine(t, &buf); m["SweepRemovalMarked"] != 1.0 {
			t.Errorf("mark %s old: metric SweepRemovalMarked = %v, want 1", age, m["SweepRemovalMarked"])
		}
	}
}
