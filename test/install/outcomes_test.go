package install

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// redeployed is fn as Lambda holds it now (its environment read back after
// an update of the deployment).
func redeployed(t *testing.T, ctx context.Context, fn deployedFunction) deployedFunction {
	t.Helper()
	// stringEnvironment: the emulator's CloudFormation answers a Number
	// parameter's variable as a number (sam_test.go)
	lc := lambda.NewFromConfig(env.AWS.AWSConfig(), func(o *lambda.Options) { o.APIOptions = append(o.APIOptions, stringEnvironment) })
	f, err := lc.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(fn.Name)})
	if err != nil {
		t.Fatal(err)
	}
	fn.Env = f.Configuration.Environment.Variables
	return fn
}

// checkOutcomeEvents deploys the path again with a bus of the operator's
// and a target (deploy: the path's update, returning the function as
// deployed), then drains the scene's instance i with the deployed function:
// the deployment's own rule on that bus sends the drain's outcomes to the
// target, one readable line each (the input transformer of both
// templates): Node Drain Started, Node Drained and Lifecycle Action
// Completed, each once. The target is an SQS queue: the emulator's EventBridge sends
// to queues, not to SNS topics.
func checkOutcomeEvents(t *testing.T, ctx context.Context, bus string, deploy func(bus, target string) deployedFunction, s *drainScene, i int) {
	t.Helper()
	cfg := env.AWS.AWSConfig()
	eb, q := eventbridge.NewFromConfig(cfg), sqs.NewFromConfig(cfg)
	queueURL, queueARN, err := env.BusAndQueue(ctx, bus)
	if err != nil {
		t.Fatal(err)
	}
	fn := deploy(bus, queueARN)
	if got := fn.Env["OUTCOME_EVENT_BUS"]; got != bus {
		t.Fatalf("the deployed function's OUTCOME_EVENT_BUS is %q, want %q", got, bus)
	}
	// the deployment's rule on the bus, read back
	rules, err := eb.ListRules(ctx, &eventbridge.ListRulesInput{EventBusName: aws.String(bus)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rules.Rules) != 1 || aws.ToString(rules.Rules[0].Name) != fn.Name+"-outcomes" {
		t.Fatalf("rules on %s: %+v, want %s-outcomes alone", bus, rules.Rules, fn.Name)
	}
	tg, err := eb.ListTargetsByRule(ctx, &eventbridge.ListTargetsByRuleInput{Rule: rules.Rules[0].Name, EventBusName: aws.String(bus)})
	if err != nil {
		t.Fatal(err)
	}
	if len(tg.Targets) != 1 || aws.ToString(tg.Targets[0].Arn) != queueARN || tg.Targets[0].InputTransformer == nil {
		t.Fatalf("targets of %s: %+v, want the queue %s alone, with an input transformer", aws.ToString(rules.Rules[0].Name), tg.Targets, queueARN)
	}
	t.Logf("rule %s on %s: pattern %s, target %s, input template %s", aws.ToString(rules.Rules[0].Name), bus, aws.ToString(rules.Rules[0].EventPattern),
		queueARN, aws.ToString(tg.Targets[0].InputTransformer.InputTemplate))
	out := drainInstance(t, ctx, s, fn, i, "-outcomes")
	if t.Failed() {
		return
	}
	if strings.Contains(out, "could not put outcome events") {
		t.Errorf("the function could not put its outcome events")
	}
	target := s.Instances[i]
	var lines []string
	for {
		msgs, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs.Messages) == 0 {
			break
		}
		for _, m := range msgs.Messages {
			line := aws.ToString(m.Body)
			var unquoted string
			if json.Unmarshal([]byte(line), &unquoted) == nil {
				line = unquoted // the template is a JSON string
			}
			lines = append(lines, line)
			if _, err := q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, want := range []string{
		"Node Drain Started: " + target.ID + " (" + target.PrivateDNSName + ") in ", // once, at its first eviction
		"Node Drained: " + target.ID + " (" + target.PrivateDNSName + ") in ",
		"Lifecycle Action Completed: " + target.ID + " (" + target.PrivateDNSName + ") in ",
	} {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d lines %q… in the target, want 1 (all: %q)", n, want, lines)
		}
	}
	t.Logf("the target received: %q", lines)
}
