package handler

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/node"
)

const (
	scClusterTag = "kubernetes.io/cluster/prod"
	eventsDir    = "../../events"
)

// scFakeEC2 knows some instances; any other id is InvalidInstanceID.NotFound.
type scFakeEC2 struct {
	mu        sync.Mutex
	instances map[string]ec2types.Instance
	err       error // every call fails with it when set
	calls     int
}

func (f *scFakeEC2) DescribeInstances(_ context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	var out ec2.DescribeInstancesOutput
	for _, id := range in.InstanceIds {
		inst, ok := f.instances[id]
		if !ok {
			return nil, &smithy.GenericAPIError{Code: "InvalidInstanceID.NotFound", Message: "The instance ID '" + id + "' does not exist"}
		}
		out.Reservations = append(out.Reservations, ec2types.Reservation{Instances: []ec2types.Instance{inst}})
	}
	return &out, nil
}

// ec2Instance is an instance of the cluster (tagged) unless tags are given.
func ec2Instance(id, dns string, state ec2types.InstanceStateName, tags ...string) ec2types.Instance {
	if tags == nil {
		tags = []string{scClusterTag}
	}
	inst := ec2types.Instance{
		InstanceId:     aws.String(id),
		State:          &ec2types.InstanceState{Name: state},
		PrivateDnsName: aws.String(dns),
		Placement:      &ec2types.Placement{AvailabilityZone: aws.String("us-east-1a")},
	}
	for _, k := range tags {
		inst.Tags = append(inst.Tags, ec2types.Tag{Key: aws.String(k), Value: aws.String("owned")})
	}
	return inst
}

// scFakeASG records completions and heartbeats.
type scFakeASG struct {
	mu        sync.Mutex
	completed []*autoscaling.CompleteLifecycleActionInput
	beats     int
}

func (f *scFakeASG) CompleteLifecycleAction(_ context.Context, in *autoscaling.CompleteLifecycleActionInput, _ ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.completed = append(f.completed, in)
	return &autoscaling.CompleteLifecycleActionOutput{}, nil
}

func (f *scFakeASG) RecordLifecycleActionHeartbeat(context.Context, *autoscaling.RecordLifecycleActionHeartbeatInput, ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beats++
	return &autoscaling.RecordLifecycleActionHeartbeatOutput{}, nil
}

func (f *scFakeASG) DescribeLifecycleHooks(_ context.Context, _ *autoscaling.DescribeLifecycleHooksInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	return &autoscaling.DescribeLifecycleHooksOutput{LifecycleHooks: []astypes.LifecycleHook{{HeartbeatTimeout: aws.Int32(300)}}}, nil
}

func (f *scFakeASG) results() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.completed {
		out = append(out, aws.ToString(c.LifecycleActionResult))
	}
	return out
}

// scFakeLambda records asynchronous self-invocations.
type scFakeLambda struct {
	mu       sync.Mutex
	payloads [][]byte
}

func (f *scFakeLambda) Invoke(_ context.Context, in *lambda.InvokeInput, _ ...func(*lambda.Options)) (*lambda.InvokeOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.payloads = append(f.payloads, in.Payload)
	return &lambda.InvokeOutput{StatusCode: 202}, nil
}

// fixture is a handler over fakes.
type fixture struct {
	h      *Handler
	kube   *fake.Clientset
	ec2    *scFakeEC2
	asg    *scFakeASG
	lambda *scFakeLambda
	now    time.Time
}

func newFixture(t *testing.T, env map[string]string, nodes ...*corev1.Node) *fixture {
	t.Helper()
	vars := map[string]string{"CLUSTER_NAME": "prod", "AWS_LAMBDA_FUNCTION_NAME": "node-drainer"}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.FromEnv(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, n := range nodes {
		objs = append(objs, n)
	}
	f := &fixture{
		kube:   fake.NewClientset(objs...),
		ec2:    &scFakeEC2{instances: map[string]ec2types.Instance{}},
		asg:    &scFakeASG{},
		lambda: &scFakeLambda{},
		now:    time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC),
	}
	f.h = New(cfg, Clients{Kube: f.kube, EC2: f.ec2, ASG: f.asg, Lambda: f.lambda}, nil,
		WithClock(newMovingClock(func() time.Time { return f.now })))
	return f
}

// handle invokes the handler with a 30-second deadline; a goroutine it
// started and left running fails t.
func (f *fixture) handle(t *testing.T, payload []byte) (Outcome, error) {
	t.Helper()
	out, err, left := invoke(f.h, payload, 30*time.Second)
	if left != nil {
		t.Errorf("work left running after the handler returned: %v", left)
	}
	return out, err
}

// writes are the create/update/patch/delete calls made on the cluster.
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.kube.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
	}
	return out
}

func testNode(name, instanceID string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + instanceID},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

func readEvent(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(eventsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// edit decodes an event, lets fn change it, and encodes it again.
func edit(t *testing.T, payload []byte, fn func(ev map[string]any, detail map[string]any)) []byte {
	t.Helper()
	var ev map[string]any
	if err := json.Unmarshal(payload, &ev); err != nil {
		t.Fatal(err)
	}
	fn(ev, ev["detail"].(map[string]any))
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func continuation(t *testing.T, raw []byte, startedAt time.Time, attempt int) []byte {
	t.Helper()
	b, err := event.NewContinuation(raw, startedAt, attempt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The instance of events/asg-terminate.json and its node.
const (
	termID   = "i-0b1f6e8d2c4a9f371"
	termDNS  = "ip-10-0-1-23.ec2.internal"
	termASG  = "eks-general-2ec9a6f1-7b3d-4e20-9c51-0d8e6a4f1b37"
	termHook = "node-drainer-terminate"
)

// Continuations are refused, changing nothing and completing nothing, past
// MAX_CONTINUATIONS or with a startedAt in the future or older than the
// drain timeout plus slack; within the bounds the hook is handled.
func TestContinuationBounds(t *testing.T) {
	raw := readEvent(t, "asg-terminate.json")
	// the drain's deadlines become real contexts' deadlines: a fixed date
	// past would have them expired before the first call (a paged list
	// looks at its context; the fake's calls do not)
	now := time.Now().UTC().Truncate(time.Second)
	for _, tc := range []struct {
		name      string
		startedAt time.Time
		attempt   int
		refused   string
	}{
		{"within bounds", now.Add(-5 * time.Minute), 3, ""},
		{"past MAX_CONTINUATIONS", now.Add(-5 * time.Minute), 5, "past the limit of 3"},
		{"started in the future", now.Add(time.Hour), 2, "in the future"},
		{"older than the drain timeout", now.Add(-2 * time.Hour), 2, "older than the drain timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]string{"MAX_CONTINUATIONS": "3", "DRAIN_TIMEOUT": "30m"}, testNode(termDNS, termID))
			f.now = now
			f.ec2.instances[termID] = ec2Instance(termID, termDNS, ec2types.InstanceStateNameRunning)
			out, err := f.handle(t, continuation(t, raw, tc.startedAt, tc.attempt))
			if tc.refused == "" {
				if err != nil || len(f.asg.results()) != 1 {
					t.Fatalf("got %+v, %v, completions %v; want the hook handled and completed", out, err, f.asg.results())
				}
				return
			}
			if !errors.Is(err, event.ErrContinuationRefused) || !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("err = %v, want ErrContinuationRefused saying %q", err, tc.refused)
			}
			if out.Action != ActionIgnored {
				t.Errorf("action %q, want %q", out.Action, ActionIgnored)
			}
			if w := f.writes(); len(w) > 0 || len(f.asg.results()) > 0 || f.ec2.calls > 0 || len(f.lambda.payloads) > 0 {
				t.Errorf("refused continuation acted: cluster writes %v, completions %v, EC2 calls %d, invocations %d",
					w, f.asg.results(), f.ec2.calls, len(f.lambda.payloads))
			}
		})
	}
}

// The last attempt MAX_CONTINUATIONS allows does not continue: it completes
// the hook itself with the failure result.
func TestLastContinuationCompletesTheHook(t *testing.T) {
	f := newFixture(t, map[string]string{"MAX_CONTINUATIONS": "2"})
	r := &hook{invocation: &invocation{h: f.h, attempt: 3, started: f.now}}
	if r.canContinue(f.now.Add(time.Hour)) {
		t.Errorf("attempt 3 with MAX_CONTINUATIONS=2 may continue: its continuation would be refused")
	}
	r.attempt = 2
	if !r.canContinue(f.now.Add(time.Hour)) {
		t.Errorf("attempt 2 with MAX_CONTINUATIONS=2 may not continue")
	}
}

// Only our hooks are completed, checked in code (rule 14): the templates'
// hook by name, or one HOOK_NAMES adds; another hook of the same ASG is left
// to its owner (not completed, nothing read or changed), whatever HOOK_NAMES
// says.
func TestHookNames(t *testing.T) {
	raw := readEvent(t, "asg-terminate.json")
	for _, tc := range []struct {
		name    string
		env     map[string]string
		handled bool
	}{
		{"defaults", nil, true},
		{"listed again", map[string]string{"HOOK_NAMES": termHook}, true},
		{"another terminate hook name", map[string]string{"TERMINATE_HOOK_NAME": "ops-drain"}, false},
		{"another name, added by HOOK_NAMES", map[string]string{"TERMINATE_HOOK_NAME": "ops-drain", "HOOK_NAMES": "other-hook, " + termHook}, true},
		{"HOOK_NAMES of someone else's", map[string]string{"TERMINATE_HOOK_NAME": "ops-drain", "HOOK_NAMES": "someone-elses-hook"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.env, testNode(termDNS, termID))
			f.now = time.Now().UTC() // the drain's deadlines are real contexts' (see TestContinuationBounds)
			f.ec2.instances[termID] = ec2Instance(termID, termDNS, ec2types.InstanceStateNameRunning)
			out, err := f.handle(t, raw)
			if err != nil {
				t.Fatal(err)
			}
			if tc.handled {
				if got := f.asg.results(); len(got) != 1 || got[0] != "CONTINUE" {
					t.Errorf("completions %v, want one CONTINUE (outcome %+v)", got, out)
				}
				return
			}
			if out.Action != ActionIgnored || !strings.Contains(out.Detail, "not node-drainer's") {
				t.Errorf("outcome %+v, want ignored as not ours", out)
			}
			if w := f.writes(); len(w) > 0 || len(f.asg.results()) > 0 || f.ec2.calls > 0 {
				t.Errorf("another's hook was acted on: writes %v, completions %v, EC2 calls %d", w, f.asg.results(), f.ec2.calls)
			}
		})
	}
}

// A terminate hook of an ASG listed in ASG_NAMES whose instance lacks the
// cluster tag is completed with CONTINUE, nothing drained; with ASG_NAMES
// empty (any ASG) such a hook is not ours and is left alone.
func TestListedASGUntaggedInstance(t *testing.T) {
	raw := readEvent(t, "asg-terminate.json")
	for _, tc := range []struct {
		asgNames string
		complete bool
	}{
		{termASG, true},
		{"", false},
	} {
		t.Run("ASG_NAMES="+tc.asgNames, func(t *testing.T) {
			f := newFixture(t, map[string]string{"ASG_NAMES": tc.asgNames}, testNode(termDNS, termID))
			f.ec2.instances[termID] = ec2Instance(termID, termDNS, ec2types.InstanceStateNameRunning, "some-other-tag")
			out, err := f.handle(t, raw)
			if err != nil {
				t.Fatal(err)
			}
			if w := f.writes(); len(w) > 0 {
				t.Errorf("untagged instance's node changed: %v", w)
			}
			got := f.asg.results()
			if tc.complete {
				if len(got) != 1 || got[0] != "CONTINUE" || out.LifecycleResult != "CONTINUE" || out.Action != ActionCompleted {
					t.Errorf("completions %v, outcome %+v; want one CONTINUE", got, out)
				}
				return
			}
			if len(got) != 0 || out.Action != ActionIgnored {
				t.Errorf("completions %v, outcome %+v; want ignored, not completed", got, out)
			}
		})
	}
}

// A spot warning for an instance already gone (EC2 does not know it, or
// reports it terminated) with no node left is a successful no-op.
func TestSpotWarningForGoneInstance(t *testing.T) {
	raw := readEvent(t, "spot-interruption.json")
	const spotID = "i-0c95a1e47d3b2f860"
	for _, tc := range []struct {
		name string
		ec2  func(f *fixture)
	}{
		{"unknown to EC2", func(*fixture) {}},
		{"terminated", func(f *fixture) {
			f.ec2.instances[spotID] = ec2Instance(spotID, "", ec2types.InstanceStateNameTerminated)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil, testNode("ip-10-0-9-9.ec2.internal", "i-0aaaaaaaaaaaaaaaa"))
			tc.ec2(f)
			out, err := f.handle(t, raw)
			if err != nil {
				t.Fatalf("err = %v, want a successful no-op (outcome %+v)", err, out)
			}
			if out.Action != ActionNoNode || !strings.Contains(out.Detail, "already gone") {
				t.Errorf("outcome %+v, want %s saying the instance is already gone", out, ActionNoNode)
			}
			if w := f.writes(); len(w) > 0 {
				t.Errorf("cluster changed: %v", w)
			}
		})
	}
}

// The instances of events/scheduled-change.json.
const (
	schedA    = "i-0f2a8c6e1d7b3e945"
	schedADNS = "ip-10-0-2-41.ec2.internal"
	schedB    = "i-4f8c2a1e"
	schedBDNS = "ip-10-0-2-42.ec2.internal"
)

// healthEvent is events/scheduled-change.json about instance A alone, with
// the given status and a start (and end) at start.
func healthEvent(t *testing.T, status string, start time.Time) []byte {
	t.Helper()
	return edit(t, readEvent(t, "scheduled-change.json"), func(_, d map[string]any) {
		d["statusCode"] = status
		d["startTime"] = start.Format(time.RFC1123)
		d["endTime"] = start.Add(2 * time.Hour).Format(time.RFC1123)
		d["affectedEntities"] = []any{map[string]any{"entityValue": schedA}}
	})
}

func (f *fixture) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A scheduled change is acted on at startTime − SCHEDULED_CHANGE_LEAD_TIME:
// before that, drain or cordon only cordons (held until the change's end
// plus ADVISORY_MARK_TTL) and the response says when the drain is due;
// from then on the node is drained.
func TestScheduledChangeHonoursStartTime(t *testing.T) {
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		action   string
		start    time.Time
		drained  bool
		cordoned bool
		detail   string
	}{
		{"drain, 14 days ahead", "drain", now.Add(14 * 24 * time.Hour), false, true, "drain due at 2026-12-04T11:45:00Z"},
		{"drain, just before the lead time", "drain", now.Add(16 * time.Minute), false, true, "drain due at 2026-11-20T12:01:00Z"},
		{"drain, within the lead time", "drain", now.Add(10 * time.Minute), true, true, ""},
		{"drain, already started", "drain", now.Add(-time.Hour), true, true, ""},
		{"cordon, 14 days ahead", "cordon", now.Add(14 * 24 * time.Hour), false, true, "cordoned until"},
		{"cordon, within the lead time", "cordon", now.Add(5 * time.Minute), false, true, "cordoned until"},
		{"ignore, within the lead time", "ignore", now.Add(5 * time.Minute), false, false, "configured to ignore"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]string{"SCHEDULED_CHANGE_ACTION": tc.action}, testNode(schedADNS, schedA))
			f.now = now
			f.ec2.instances[schedA] = ec2Instance(schedA, schedADNS, ec2types.InstanceStateNameRunning)
			out, err := f.handle(t, healthEvent(t, "upcoming", tc.start))
			if err != nil {
				t.Fatal(err)
			}
			n := f.node(t, schedADNS)
			if got := node.HasTaint(n, node.TaintDraining); got != tc.drained {
				t.Errorf("drain taint %v, want %v (outcome %+v)", got, tc.drained, out)
			}
			if _, got := n.Labels[node.LabelExcludeLB]; got != tc.drained {
				t.Errorf("excluded from load balancers %v, want %v", got, tc.drained)
			}
			if n.Spec.Unschedulable != tc.cordoned {
				t.Errorf("cordoned %v, want %v", n.Spec.Unschedulable, tc.cordoned)
			}
			if !strings.Contains(out.Detail, tc.detail) {
				t.Errorf("detail %q, want it to say %q", out.Detail, tc.detail)
			}
			if tc.cordoned {
				s, _ := node.Marks(n)
				h, ok := s.Causes[node.CauseScheduled]
				wantExpiry := tc.start.Add(2*time.Hour + time.Hour) // end + ADVISORY_MARK_TTL
				if !ok || h.Expires == nil || !h.Expires.Equal(wantExpiry) {
					t.Errorf("hold %+v (held %v), want cause %s expiring %s", h, ok, node.CauseScheduled, wantExpiry)
				}
			}
		})
	}
}

// A closed scheduled change undoes what upcoming/open placed for it, and
// only that: a cordon an operator set, or a hold for another cause, stays;
// a closed change never drains.
func TestScheduledChangeClosed(t *testing.T) {
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	start := now.Add(5 * time.Minute)

	t.Run("undoes its own drain marks", func(t *testing.T) {
		f := newFixture(t, nil, testNode(schedADNS, schedA))
		f.now = now
		f.ec2.instances[schedA] = ec2Instance(schedA, schedADNS, ec2types.InstanceStateNameRunning)
		if _, err := f.handle(t, healthEvent(t, "open", start)); err != nil {
			t.Fatal(err)
		}
		if n := f.node(t, schedADNS); !node.HasTaint(n, node.TaintDraining) || !n.Spec.Unschedulable {
			t.Fatalf("open change did not drain: %+v", n.Spec)
		}
		out, err := f.handle(t, healthEvent(t, "closed", start))
		if err != nil {
			t.Fatal(err)
		}
		n := f.node(t, schedADNS)
		if n.Spec.Unschedulable || node.HasTaint(n, node.TaintDraining) || n.Labels[node.LabelExcludeLB] != "" || node.Holds(n, node.CauseScheduled) {
			t.Errorf("closed change left marks: unschedulable %v taints %v labels %v annotations %v (outcome %+v)",
				n.Spec.Unschedulable, n.Spec.Taints, n.Labels, n.Annotations, out)
		}
		if out.Action != ActionUnmarked {
			t.Errorf("action %q, want %q", out.Action, ActionUnmarked)
		}
	})

	t.Run("never drains, leaves an operator's cordon", func(t *testing.T) {
		cordoned := testNode(schedADNS, schedA)
		cordoned.Spec.Unschedulable = true
		f := newFixture(t, nil, cordoned)
		f.now = now
		f.ec2.instances[schedA] = ec2Instance(schedA, schedADNS, ec2types.InstanceStateNameRunning)
		out, err := f.handle(t, healthEvent(t, "closed", start))
		if err != nil {
			t.Fatal(err)
		}
		if w := f.writes(); len(w) > 0 {
			t.Errorf("closed change wrote %v (outcome %+v)", w, out)
		}
		if n := f.node(t, schedADNS); !n.Spec.Unschedulable {
			t.Errorf("operator's cordon removed")
		}
	})

	t.Run("keeps another cause's hold", func(t *testing.T) {
		f := newFixture(t, nil, testNode(schedADNS, schedA))
		f.now = now
		f.ec2.instances[schedA] = ec2Instance(schedA, schedADNS, ec2types.InstanceStateNameRunning)
		read, err := f.kube.CoreV1().Nodes().Get(context.Background(), schedADNS, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := node.ApplyTo(context.Background(), f.kube, read, node.Mark{Cause: node.CauseRebalance, Cordon: true}, now, false); err != nil {
			t.Fatal(err)
		}
		if _, err := f.handle(t, healthEvent(t, "upcoming", now.Add(48*time.Hour))); err != nil {
			t.Fatal(err)
		}
		if _, err := f.handle(t, healthEvent(t, "closed", now.Add(48*time.Hour))); err != nil {
			t.Fatal(err)
		}
		n := f.node(t, schedADNS)
		if !n.Spec.Unschedulable || !node.Holds(n, node.CauseRebalance) || node.Holds(n, node.CauseScheduled) {
			t.Errorf("want the rebalance cordon kept and the scheduled hold gone: unschedulable %v, annotation %s",
				n.Spec.Unschedulable, n.Annotations[node.AnnotationOwned])
		}
	})
}

// An event listing several instances fans out, one asynchronous invocation
// per instance, when the function can invoke itself; each invocation then
// handles its instance alone.
func TestScheduledChangeFansOut(t *testing.T) {
	f := newFixture(t, nil, testNode(schedADNS, schedA), testNode(schedBDNS, schedB))
	f.ec2.instances[schedA] = ec2Instance(schedA, schedADNS, ec2types.InstanceStateNameRunning)
	f.ec2.instances[schedB] = ec2Instance(schedB, schedBDNS, ec2types.InstanceStateNameRunning)
	out, err := f.handle(t, readEvent(t, "scheduled-change.json"))
	if err != nil {
		t.Fatal(err)
	}
	if out.Action != ActionFannedOut || len(f.lambda.payloads) != 2 {
		t.Fatalf("outcome %+v, %d invocations; want %s, 2", out, len(f.lambda.payloads), ActionFannedOut)
	}
	if w := f.writes(); len(w) > 0 || f.ec2.calls > 0 {
		t.Errorf("fan-out itself acted: writes %v, EC2 calls %d", w, f.ec2.calls)
	}
	for i, want := range []string{schedA, schedB} {
		payload := f.lambda.payloads[i]
		ev, cont, err := event.ParseInvocation(payload)
		if err != nil || cont == nil || len(ev.InstanceIDs) != 1 || ev.InstanceIDs[0] != want || cont.Attempt != 1 {
			t.Fatalf("invocation %d: %v, %+v, %v; want instance %s alone, attempt 1", i, ev.InstanceIDs, cont, err, want)
		}
		out, err := f.handle(t, payload)
		if err != nil || out.Instance != want || out.Action != ActionCordoned {
			t.Errorf("invocation for %s: %+v, %v; want it cordoned (the change is 11 days ahead)", want, out, err)
		}
	}
	if len(f.lambda.payloads) != 2 {
		t.Errorf("a per-instance invocation fanned out again: %d invocations", len(f.lambda.payloads))
	}
}

// gatedEC2 holds every DescribeInstances until n calls are in flight (or a
// timeout passes), and records how many ran at once.
type gatedEC2 struct {
	*scFakeEC2
	n        int
	mu       sync.Mutex
	inflight int
	most     int
	all      chan struct{}
}

func (g *gatedEC2) DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	g.mu.Lock()
	g.inflight++
	g.most = max(g.most, g.inflight)
	if g.inflight == g.n {
		close(g.all)
	}
	g.mu.Unlock()
	select {
	case <-g.all:
	case <-time.After(3 * time.Second):
	}
	return g.scFakeEC2.DescribeInstances(ctx, in, opts...)
}

// Without self-invocation, the instances are handled in parallel in this
// invocation, each with its own outcome.
func TestScheduledChangeInParallel(t *testing.T) {
	f := newFixture(t, map[string]string{"CONTINUE_LONG_DRAINS": "false"}, testNode(schedADNS, schedA), testNode(schedBDNS, schedB))
	f.ec2.instances[schedA] = ec2Instance(schedA, schedADNS, ec2types.InstanceStateNameRunning)
	f.ec2.instances[schedB] = ec2Instance(schedB, schedBDNS, ec2types.InstanceStateNameRunning)
	gate := &gatedEC2{scFakeEC2: f.ec2, n: 2, all: make(chan struct{})}
	f.h.c.EC2 = gate
	// within the lead time: both drained
	raw := edit(t, readEvent(t, "scheduled-change.json"), func(_, d map[string]any) {
		d["startTime"] = f.now.Add(5 * time.Minute).Format(time.RFC1123)
	})
	out, err := f.handle(t, raw)
	if err != nil {
		t.Fatal(err)
	}
	if gate.most != 2 {
		t.Errorf("%d instances handled at once, want 2", gate.most)
	}
	if out.Action != ActionPerInstance || len(out.Instances) != 2 || len(f.lambda.payloads) != 0 {
		t.Fatalf("outcome %+v, %d invocations; want %s with 2 instances, none", out, len(f.lambda.payloads), ActionPerInstance)
	}
	for i, want := range []struct{ id, node string }{{schedA, schedADNS}, {schedB, schedBDNS}} {
		if o := out.Instances[i]; o.Instance != want.id || o.Node != want.node || o.Action != ActionDrained {
			t.Errorf("instance %d outcome %+v, want %s drained on %s", i, o, want.id, want.node)
		}
		if !node.HasTaint(f.node(t, want.node), node.TaintDraining) {
			t.Errorf("node %s not drained", want.node)
		}
	}
}
