package hooks

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/discovery"
	"github.com/node-drainer/node-drainer/internal/hooks/hookstest"
)

const (
	clusterTag  = "kubernetes.io/cluster/prod"
	groupTagKey = "node-drainer.io/enabled"
	idA         = "i-0123456789abcdef0"
	idB         = "i-0fedcba9876543210"
)

// env is one deployment's configuration, its clock and its Auto Scaling
// groups.
type env struct {
	asg *fakeASG
	cfg config.Config
	now time.Time // the keeper's clock
}

func newEnv() *env {
	return &env{
		asg: &fakeASG{},
		cfg: config.Config{
			ClusterName:       "prod",
			ClusterTagKey:     clusterTag,
			DeadlineMargin:    50 * time.Millisecond,
			FunctionName:      "node-drainer",
			TerminateHookName: "node-drainer-terminate",
			LaunchHookName:    "node-drainer-launch",
		},
		now: time.Now(),
	}
}

// deployment is a node-drainer deployment of function fn over the Auto
// Scaling of hp (self: Lambda's view of the function; nil: none).
func deployment(e *env, hp *hookstest.AutoScaling, fn string, self *fakeSelf) *Keeper {
	cfg := e.cfg
	cfg.FunctionName = fn
	c := Clients{Hooks: hp}
	if self != nil {
		c.Self = self
	}
	return New(cfg, c, nil, WithClock(clocktesting.NewFakePassiveClock(e.now)))
}

// fakeASG answers DescribeAutoScalingGroups with its groups, and
// DescribeWarmPool with the instances of each group's warm pool (pools,
// by group), which the groups' describe does not list.
type fakeASG struct {
	mu          sync.Mutex
	groups      []astypes.AutoScalingGroup
	pools       map[string][]astypes.Instance
	describeErr error // DescribeAutoScalingGroups fails
}

func (f *fakeASG) DescribeWarmPool(_ context.Context, in *autoscaling.DescribeWarmPoolInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeWarmPoolOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &autoscaling.DescribeWarmPoolOutput{Instances: slices.Clone(f.pools[aws.ToString(in.AutoScalingGroupName)])}, nil
}

func (f *fakeASG) DescribeAutoScalingGroups(context.Context, *autoscaling.DescribeAutoScalingGroupsInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.describeErr != nil {
		return nil, f.describeErr
	}
	return &autoscaling.DescribeAutoScalingGroupsOutput{AutoScalingGroups: f.groups}, nil
}

func taggedGroup(name, value string) astypes.AutoScalingGroup {
	return astypes.AutoScalingGroup{AutoScalingGroupName: aws.String(name),
		Tags: []astypes.TagDescription{{Key: aws.String(groupTagKey), Value: aws.String(value), ResourceId: aws.String(name)}}}
}

// markedBy is a hook of ours as a deployment of function fn put it.
func markedBy(name string, fn ...string) astypes.LifecycleHook {
	m := `{"node-drainer":[`
	for i, f := range fn {
		if i > 0 {
			m += ","
		}
		m += `"` + f + `"`
	}
	return astypes.LifecycleHook{LifecycleHookName: aws.String(name), LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"),
		HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE"), NotificationMetadata: aws.String(m + "]}")}
}

// fakeSelf is Lambda's view of the function itself: its ARN and its tags
// (the removal's mark). gone: the function was deleted.
type fakeSelf struct {
	mu   sync.Mutex
	name string
	tags map[string]string
	gone bool
	err  error // ListTags fails (a grant missing, Lambda throttling)
	// afterGet runs once, after a read of the tags has answered (the lock released):
	// what happens elsewhere at that moment
	afterGet func()
}

func (f *fakeSelf) arn() string { return "arn:aws:lambda:us-east-1:123456789012:function:" + f.name }

func (f *fakeSelf) ListTags(_ context.Context, in *lambda.ListTagsInput, _ ...func(*lambda.Options)) (*lambda.ListTagsOutput, error) {
	f.mu.Lock()
	if f.gone || aws.ToString(in.Resource) != f.arn() {
		f.mu.Unlock()
		return nil, &lambdatypes.ResourceNotFoundException{Message: aws.String("no such function " + aws.ToString(in.Resource))}
	}
	if f.err != nil {
		f.mu.Unlock()
		return nil, f.err
	}
	out := &lambda.ListTagsOutput{Tags: maps.Clone(f.tags)}
	after := f.afterGet
	f.afterGet = nil
	f.mu.Unlock()
	if after != nil {
		after()
	}
	return out, nil
}

func (f *fakeSelf) TagResource(_ context.Context, in *lambda.TagResourceInput, _ ...func(*lambda.Options)) (*lambda.TagResourceOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone || aws.ToString(in.Resource) != f.arn() {
		return nil, &lambdatypes.ResourceNotFoundException{Message: aws.String("no such function " + aws.ToString(in.Resource))}
	}
	if f.tags == nil {
		f.tags = map[string]string{}
	}
	maps.Copy(f.tags, in.Tags)
	return &lambda.TagResourceOutput{}, nil
}

func (f *fakeSelf) UntagResource(_ context.Context, in *lambda.UntagResourceInput, _ ...func(*lambda.Options)) (*lambda.UntagResourceOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone || aws.ToString(in.Resource) != f.arn() {
		return nil, &lambdatypes.ResourceNotFoundException{Message: aws.String("no such function " + aws.ToString(in.Resource))}
	}
	for _, k := range in.TagKeys {
		delete(f.tags, k)
	}
	return &lambda.UntagResourceOutput{}, nil
}

// invokedAs is ctx as Lambda gives it to an invocation of self's function
// (its ARN, which the removal mark is read at).
func invokedAs(ctx context.Context, self *fakeSelf) context.Context {
	return lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{InvokedFunctionArn: self.arn()})
}

// sweepTag is the tag of the groups a sweep in tag mode puts the
// terminate hook on (300 s, sweepOnce): groupTagKey=true, of this
// cluster (the handler's groupTag and ensureHooks).
var sweepTag = discovery.Tag{Key: groupTagKey, Value: "true", ClusterTagKey: clusterTag, ClusterName: "prod"}

// sweepOnce runs the sweep's puts of k (EnsureTagged) as Lambda invokes
// the function ctx (nil: with no invocation ARN).
func sweepOnce(k *Keeper, self *fakeSelf) (discovery.Result, Removal, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if self != nil {
		ctx = invokedAs(ctx, self)
	}
	return k.EnsureTagged(ctx, sweepTag, discovery.Wanted("node-drainer-terminate", true, "node-drainer-launch", false, 300), false)
}
