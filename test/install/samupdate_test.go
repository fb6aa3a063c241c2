package install

// SAM's stack updated, as `sam deploy --parameter-overrides` updates it: an
// UpdateStack of the same transformed template with other parameter
// values, through the emulator's CloudFormation, and what the update
// changed read back from the services.
//
//	metrics_every_level_sam  the stack updated to LogLevel WARN, then ERROR,
//	                         a node drained with the function as updated
//	                         each time: its EMF metrics line is kept by
//	                         Lambda's filter at the function's
//	                         ApplicationLogLevel (metrics_test.go);
//	outcome_events_sam       the stack updated with OutcomeEventBus (a bus
//	                         made in the emulator) and OutcomeEventsTargetArn
//	                         (an SQS queue): the stack's rule on that bus,
//	                         read back, sends a drain's outcome events to the
//	                         queue as one line each (outcomes_test.go).
//
// The drains are of a group carrying the stack's tag (AsgTagKey=AsgTagValue),
// made after the deploy: its hook is the sweep's, as on a user's tagged node
// group; its first instance is never drained, so that the pods have a place.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cftypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// samUpdateGroup is the tagged group SAM's updates drain nodes of.
const samUpdateGroup = "sam-levels"

// update updates the stack with changes over its parameters (a value ""
// sets the parameter to "") and waits for UPDATE_COMPLETE; r.params and
// the evaluator follow the new values.
func (r *samRun) update(t *testing.T, ctx context.Context, changes map[string]string) {
	t.Helper()
	params := maps.Clone(r.params)
	maps.Copy(params, changes)
	body, err := json.Marshal(r.tmpl)
	if err != nil {
		t.Fatal(err)
	}
	var ps []cftypes.Parameter
	for _, k := range slices.Sorted(maps.Keys(params)) {
		ps = append(ps, cftypes.Parameter{ParameterKey: aws.String(k), ParameterValue: aws.String(params[k])})
	}
	cf := cloudformation.NewFromConfig(env.AWS.AWSConfig())
	began := time.Now()
	if _, err := cf.UpdateStack(ctx, &cloudformation.UpdateStackInput{
		StackName: aws.String(r.stackID), TemplateBody: aws.String(string(body)), Parameters: ps,
		Capabilities: []cftypes.Capability{cftypes.CapabilityCapabilityIam, cftypes.CapabilityCapabilityNamedIam, cftypes.CapabilityCapabilityAutoExpand},
	}); err != nil {
		t.Fatalf("UpdateStack %v: %v", changes, err)
	}
	if status, reason := r.waitStack(t, ctx, "UPDATE_IN_PROGRESS"); status != cftypes.StackStatusUpdateComplete {
		t.Fatalf("UpdateStack %v: %s %s", changes, status, reason)
	}
	t.Logf("UpdateStack %v: UPDATE_COMPLETE in %s", changes, time.Since(began).Round(100*time.Millisecond))
	r.params = params
	eval := newCfnEval(r.tmpl, params, moto.Region, moto.AccountID, samStackName)
	eval.refs, eval.attrs = r.eval.refs, r.eval.attrs
	rs, err := cf.DescribeStackResources(ctx, &cloudformation.DescribeStackResourcesInput{StackName: aws.String(r.stackID)})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range rs.StackResources {
		if res.LogicalResourceId != nil && res.PhysicalResourceId != nil {
			eval.refs[*res.LogicalResourceId] = *res.PhysicalResourceId
		}
	}
	r.eval = eval
}

// deployed is the stack's function as Lambda holds it now.
func (r *samRun) deployed(t *testing.T, ctx context.Context) deployedFunction {
	t.Helper()
	lc := lambda.NewFromConfig(env.AWS.AWSConfig(), func(o *lambda.Options) { o.APIOptions = append(o.APIOptions, stringEnvironment) })
	f, err := lc.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(r.fnName)})
	if err != nil {
		t.Fatal(err)
	}
	fc := f.Configuration
	return deployedFunction{
		Bootstrap: bootstrap, Name: aws.ToString(fc.FunctionName), Env: fc.Environment.Variables, RoleARN: aws.ToString(fc.Role),
		TerminateHook: fc.Environment.Variables["TERMINATE_HOOK_NAME"],
		Timeout:       time.Duration(aws.ToInt32(fc.Timeout)) * time.Second, MemoryMB: int(aws.ToInt32(fc.MemorySize)),
	}
}

// updates runs the steps that update the stack, on a tagged group made for
// them (deleted when t ends).
func (r *samRun) updates(t *testing.T) {
	ctx := samCtx(t, 15*time.Minute)
	fn := r.deployed(t, ctx)
	n := 1 + len(metricsLevels) + 1 // one that takes the pods, one per level, one for the outcomes
	deleteGroupsAtEnd(t, ctx, samUpdateGroup)
	scene := newDrainSceneTagged(t, ctx, samUpdateGroup, n, map[string]string{fn.Env["ASG_TAG_KEY"]: fn.Env["ASG_TAG_VALUE"]})
	sweepDeployed(t, ctx, fn)
	if got := hookNames(t, ctx, samUpdateGroup); !slices.Contains(got, fn.TerminateHook) {
		t.Fatalf("the sweep put no %s on the tagged group %s: %v", fn.TerminateHook, samUpdateGroup, got)
	}
	step(t, "metrics_every_level_sam", func(t *testing.T) string {
		checkMetricsEveryLevel(t, ctx, scene, 1, r.levelUpdate(t, ctx))
		return ""
	})
	step(t, "outcome_events_sam", func(t *testing.T) string {
		checkOutcomeEvents(t, ctx, "sam-oncall", func(bus, target string) deployedFunction {
			r.update(t, ctx, map[string]string{"LogLevel": "INFO", "OutcomeEventBus": bus, "OutcomeEventsTargetArn": target})
			return r.deployed(t, ctx)
		}, scene, 1+len(metricsLevels))
		return ""
	})
}

// levelUpdate is SAM's update for checkMetricsEveryLevel: LogLevel set to
// level; the filter is the function's LoggingConfig, or, as the emulator
// drops it (HARNESS.md), the transformed template's ApplicationLogLevel,
// resolved for this stack.
func (r *samRun) levelUpdate(t *testing.T, ctx context.Context) func(level string) (deployedFunction, string) {
	return func(level string) (deployedFunction, string) {
		t.Helper()
		r.update(t, ctx, map[string]string{"LogLevel": level})
		lc := lambda.NewFromConfig(env.AWS.AWSConfig(), func(o *lambda.Options) { o.APIOptions = append(o.APIOptions, stringEnvironment) })
		f, err := lc.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(r.fnName)})
		if err != nil {
			t.Fatal(err)
		}
		filter := ""
		if lcfg := f.Configuration.LoggingConfig; lcfg != nil {
			filter = string(lcfg.ApplicationLogLevel)
		}
		if filter == "" {
			lcfg, _ := r.resolved(t, "NodeDrainerFunction")["LoggingConfig"].(map[string]any)
			filter = fmt.Sprint(lcfg["ApplicationLogLevel"])
			t.Logf("DROPPED BY THE EMULATOR: the function has no LoggingConfig; the template's ApplicationLogLevel is %q", filter)
		}
		return r.deployed(t, ctx), filter
	}
}
