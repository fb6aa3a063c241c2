package handler

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
)

// A failure is told apart with errors.Is, unwraps to its cause, and is the
// Outcome's Detail as it reads, after what the run said before or instead.
func TestFailureDetail(t *testing.T) {
	throttled := apierrors.NewTooManyRequests("slow down", 1)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "leases"}, "x", errors.New("rbac"))
	for _, tc := range []struct {
		name  string
		f     *Failure
		prior string
		want  string
	}{
		{"drain failed with an error", &Failure{Kind: ErrDrainFailed, Cause: throttled}, "node NotReady.",
			"node NotReady. drain failed until the deadline (last error, throttled): slow down"},
		{"drain timed out, pods left", &Failure{Kind: ErrDrainFailed, Result: lifecycle.Abandon}, "",
			"drain timed out; lifecycle action completed with ABANDON"},
		{"drain timed out, the run said why", &Failure{Kind: ErrDrainFailed, Result: lifecycle.Abandon}, "node NotReady.", "node NotReady."},
		{"hand-over", &Failure{Kind: ErrHandOver, Cause: errors.New("invoke: throttled")}, "",
			"could not hand over (the hook is left as it is, for Lambda's retry of this invocation): invoke: throttled"},
		{"no lease", &Failure{Kind: ErrNoLease, Cause: forbidden}, "ignored before",
			"the instance's lease could not be taken (forbidden); nothing was changed, a retry takes it: " + forbidden.Error()},
		{"node not Ready", &Failure{Kind: ErrNotReady, Cause: fmt.Errorf("%w: %w", cluster.ErrWaitTimeout, errors.New("deadline"))}, "",
			"node did not become Ready before the deadline"},
		{"node not watched", &Failure{Kind: ErrNotReady, Cause: forbidden}, "",
			"node not watched to the end (forbidden): " + forbidden.Error()},
		{"fan-out", &Failure{Kind: ErrFanOut, Cause: errors.New("invoking f for instance i-2: throttled")}, "one invocation per instance: i-1",
			"one invocation per instance: i-1; invoking f for instance i-2: throttled"},
		{"sweep read", &Failure{Kind: ErrSweepRead, Cause: throttled}, "", "sweep read nothing complete; nothing was changed: slow down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f.detail(tc.prior); got != tc.want {
				t.Errorf("detail %q\nwant   %q", got, tc.want)
			}
			if !errors.Is(tc.f, tc.f.Kind) {
				t.Errorf("%v does not match its kind", tc.f)
			}
			if tc.f.Cause != nil && !errors.Is(tc.f, tc.f.Cause) {
				t.Errorf("%v does not unwrap to its cause", tc.f)
			}
			for _, other := range []error{ErrDrainFailed, ErrHandOver, ErrNoLease, ErrNotReady, ErrFanOut, ErrSweepRead} {
				if other != tc.f.Kind && errors.Is(tc.f, other) {
					t.Errorf("%v matches %v too", tc.f, other)
				}
			}
		})
	}
}

// A drain held by a PDB until its deadline fails with ErrDrainFailed, which
// the Outcome carries.
func TestOutcomeErr(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.ec2.readings[idA] = []reading{running}
		e.blocked = []string{"db-0"}
		e.cfg.ContinueLongDrains = false
		out, err := e.handle(t, terminateEvent(idA), 1500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		var f *Failure
		if out.Action != ActionFailed || !errors.Is(out.Err(), ErrDrainFailed) || !errors.As(out.Err(), &f) || f.Result != lifecycle.Abandon {
			t.Errorf("outcome %s, err %v: want failed with ErrDrainFailed, completed with ABANDON", out.Action, out.Err())
		}
		if (Outcome{Action: ActionDrained, err: f}).Err() != nil {
			t.Error("Err of an outcome that did not fail")
		}
	})
}

// Lambda's retry of a drain that failed comes a minute or more after its
// event: its DRAIN_TIMEOUT counts from the drain's start, which the node's
// terminate mark records, not from the retry (rule 16). A mark older than
// DRAIN_TIMEOUT ends the drain at once: the hook is completed with the
// failure result instead of handed over for another DRAIN_TIMEOUT. The same
// event on time reads no mark and hands the drain over, and so does a late
// one whose mark is older than the event (an earlier action's, as an
// instance back from a warm pool may carry).
func TestLateRetryKeepsTheDrainsStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		age    time.Duration // of the event when the invocation starts
		action Action
	}{
		// the drain began 30 s after its event, 10.5 minutes ago
		{"retry, late: DRAIN_TIMEOUT spent", 11 * time.Minute, ActionFailed},
		{"on time: the drain goes on", time.Second, ActionContinued},
		{"late, the mark older than the event: the drain goes on", 2 * time.Minute, ActionContinued},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv(aNode()...)
			e.ec2.readings[idA] = []reading{running}
			e.blocked = []string{"db-0"}
			e.cfg.DrainTimeout = 10 * time.Minute
			began := e.now.Add(-10*time.Minute - 30*time.Second)
			n, err := e.kube.CoreV1().Nodes().Get(context.Background(), nodeName(idA), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n.Annotations = map[string]string{node.AnnotationOwned: `{"owned":{"cordoned":true},"causes":{"` + string(node.CauseTerminate) +
				`":{"since":"` + began.UTC().Format(time.RFC3339Nano) + `","wants":{"cordoned":true}}}}`}
			if _, err := e.kube.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			ev := envelope("aws.autoscaling", "EC2 Instance-terminate Lifecycle Action", e.now.Add(-tc.age), map[string]string{
				"LifecycleActionToken": token, "AutoScalingGroupName": asgName, "LifecycleHookName": "node-drainer-terminate",
				"EC2InstanceId": idA, "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
			})
			out, err := e.handle(t, ev, 1500*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if out.Action != tc.action {
				t.Fatalf("outcome %s (%s), want %s", out.Action, out.Detail, tc.action)
			}
			if completed := len(e.asg.completed) == 1; completed != (tc.action == ActionFailed) {
				t.Errorf("hook completed %v (%v), want %v", completed, e.asg.completed, tc.action == ActionFailed)
			}
		}))
	}
}
