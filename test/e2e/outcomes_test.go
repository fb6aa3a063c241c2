package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/outcome"
	"github.com/node-drainer/node-drainer/test/harness"
)

// outcomeQueue makes a bus of the operator's in the AWS emulator with a rule
// sending every node-drainer event on it to a queue, as a user routes them
// to a person; it returns the bus's name and a reader of what reached the
// queue (each event read strictly and held to the published schema).
func outcomeQueue(t *testing.T, ctx context.Context, name string) (string, func() map[string][]outcome.Detail) {
	t.Helper()
	cfg := env.AWS.AWSConfig()
	eb, q := eventbridge.NewFromConfig(cfg), sqs.NewFromConfig(cfg)
	queueURL, queueARN, err := env.BusAndQueue(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String(name), EventBusName: aws.String(name),
		EventPattern: aws.String(`{"source":["node-drainer"]}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: aws.String(name), EventBusName: aws.String(name),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(queueARN)}}}); err != nil {
		t.Fatal(err)
	}
	// what reached the queue since the last read
	read := func() map[string][]outcome.Detail {
		got := map[string][]outcome.Detail{}
		for {
			msgs, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs.Messages) == 0 {
				return got
			}
			for _, m := range msgs.Messages {
				var ev struct {
					DetailType string          `json:"detail-type"`
					Source     string          `json:"source"`
					Detail     json.RawMessage `json:"detail"`
				}
				if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &ev); err != nil {
					t.Fatalf("queue message %s: %v", aws.ToString(m.Body), err)
				}
				var d outcome.Detail
				dec := json.NewDecoder(bytes.NewReader(ev.Detail))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&d); err != nil {
					t.Fatalf("%s detail: %v", ev.DetailType, err)
				}
				if err := outcome.Validate(outcome.DetailType(ev.DetailType), d); err != nil || ev.Source != outcome.Source {
					t.Errorf("%s from %s: %v", ev.DetailType, ev.Source, err)
				}
				got[ev.DetailType] = append(got[ev.DetailType], d)
				if _, err := q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return name, read
}

// TestOutcomeEvents: the real function, configured with a bus, tells of a
// drain blocked by its PDB (once, though it goes on over several
// invocations), of the drain once the PDB lets go, of the completed
// lifecycle action, and of a forced release with EC2's evidence; a bus it
// cannot reach changes nothing of a drain.
func TestOutcomeEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bus, read := outcomeQueue(t, ctx, "oc-oncall")

	t.Run("blocked then drained", func(t *testing.T) {
		s := newScene(t, ctx, "oc", 2, harness.ASGSpec{})
		target := s.insts[0]
		w := s.guarded(ctx, target)
		// each invocation drains ~4 s; the drain is blocked past 3 s in the
		// first. The margin leaves the outcome put its 3 s bound: with less,
		// the invocation that hands over skips the put and counts it lost
		// (OutcomeEventsFailed.no-time), as it must
		rt := s.function(ctx, 8*time.Second, "DEADLINE_MARGIN=4s", "DRAIN_TIMEOUT=3m", "OUTCOME_BLOCKED_AFTER=3s", "OUTCOME_EVENT_BUS="+bus)
		payload, err := env.StartTerminating(ctx, s.asg, target, "token-oc")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := harness.Invoke(ctx, rt, payload); err != nil || out.Action != "continued" {
			t.Fatalf("first invocation: %+v, %v; want continued", out, err)
		}
		time.Sleep(8 * time.Second) // a continuation or two, still blocked
		if err := env.Client.PolicyV1().PodDisruptionBudgets(s.ns).Delete(ctx, w.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitCompleted(t, ctx, s, target.ID, 2*time.Minute)
		if err := rt.WaitIdle(ctx); err != nil {
			t.Fatal(err)
		}
		got := read()
		for dt, n := range map[outcome.DetailType]int{outcome.NodeDrainBlocked: 1, outcome.NodeDrained: 1, outcome.LifecycleActionCompleted: 1} {
			var mine []outcome.Detail
			for _, d := range got[string(dt)] {
				if d.Instance == target.ID {
					mine = append(mine, d)
				}
			}
			if len(mine) != n {
				t.Errorf("%d %q events for %s, want %d (all: %v)", len(mine), dt, target.ID, n, kinds(got))
				continue
			}
			d := mine[0]
			switch dt {
			case outcome.NodeDrainBlocked:
				if len(d.Remaining) != 1 || d.Node != target.PrivateDNSName {
					t.Errorf("blocked: %+v, want the guarded pod on %s", d, target.PrivateDNSName)
				}
			case outcome.LifecycleActionCompleted:
				if d.LifecycleResult != "CONTINUE" || d.AutoScalingGroup != s.asg || d.LifecycleHook == "" {
					t.Errorf("completed: %+v", d)
				}
			case outcome.NodeDrained:
				if d.Attempt < 2 || d.DrainSeconds < 8 {
					t.Errorf("drained: attempt %d after %.1f s, want a continuation after the blocked spell", d.Attempt, d.DrainSeconds)
				}
			}
		}
	})

	t.Run("released", func(t *testing.T) {
		s, target, _ := statefulScene(t, ctx, "oc-rel")
		if err := env.SetInstanceState(ctx, target.ID, "stopped"); err != nil {
			t.Fatal(err)
		}
		if err := env.StopKubelet(ctx, target.PrivateDNSName); err != nil {
			t.Fatal(err)
		}
		rt := s.function(ctx, time.Minute, "OUTCOME_EVENT_BUS="+bus)
		out, err := harness.Invoke(ctx, rt, stateEvent(t, target.ID, "stopped"))
		if err != nil || out.Action != "released" {
			t.Fatalf("stopped: %+v, %v", out, err)
		}
		rel := read()[string(outcome.NodeReleased)]
		if len(rel) != 1 || rel[0].Instance != target.ID || rel[0].Evidence == "" ||
			!slices.Equal(rel[0].PodsDeleted, out.PodsDeleted) || !slices.Equal(rel[0].AttachmentsDeleted, out.AttachmentsDeleted) {
			t.Fatalf("released events %+v, want one for %s as the outcome %+v", rel, target.ID, out)
		}
	})

	t.Run("bus unreachable", func(t *testing.T) {
		s := newScene(t, ctx, "oc-down", 2, harness.ASGSpec{})
		target := s.insts[0]
		s.onlyOn(ctx, target, func() {
			if _, err := env.Deployment(ctx, s.workload("web", 2), false); err != nil {
				t.Fatal(err)
			}
			if _, err := env.WaitPodsRunning(ctx, s.ns, "app=web", 2, time.Minute); err != nil {
				t.Fatal(err)
			}
		})
		// nothing listens on port 9: every put fails at once
		rt := s.function(ctx, time.Minute, "OUTCOME_EVENT_BUS="+bus, "AWS_ENDPOINT_URL_EVENTBRIDGE=http://127.0.0.1:9")
		payload, err := env.StartTerminating(ctx, s.asg, target, "token-oc-down")
		if err != nil {
			t.Fatal(err)
		}
		out, err := harness.Invoke(ctx, rt, payload)
		if err != nil || out.Action != "drained" || len(out.Evicted) != 2 {
			t.Fatalf("drain with the bus down: %+v, %v", out, err)
		}
		if ok, failed := s.completions(ctx, target.ID); len(ok) != 1 || len(failed) != 0 || ok[0].Params["LifecycleActionResult"] != "CONTINUE" {
			t.Fatalf("completions %+v (failed %+v), want one CONTINUE", ok, failed)
		}
		if got := read(); len(got) != 0 {
			t.Errorf("events reached the queue though the bus was unreachable: %v", kinds(got))
		}
	})
}

func kinds(got map[string][]outcome.Detail) string {
	var s []string
	for k, v := range got {
		s = append(s, fmt.Sprintf("%s×%d", k, len(v)))
	}
	slices.Sort(s)
	return fmt.Sprint(s)
}

// waitCompleted waits for the instance's lifecycle action to be completed.
func waitCompleted(t *testing.T, ctx context.Context, s *scene, id string, timeout time.Duration) {
	t.Helper()
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if ok, _ := s.completions(ctx, id); len(ok) > 0 {
			return
		}
	}
	t.Fatalf("the lifecycle action of %s was not completed within %s", id, timeout)
}
