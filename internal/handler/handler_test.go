package handler

import (
	"cmp"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
)

var (
	running    = reading{state: instance.StateRunning, tagged: true}
	stopped    = reading{state: instance.StateStopped, tagged: true}
	stopping   = reading{state: instance.StateStopping, tagged: true}
	terminated = reading{state: instance.StateTerminated, tagged: true}
	foreign    = reading{state: instance.StateRunning} // no cluster tag
	throttled  = reading{err: &smithy.GenericAPIError{Code: "RequestLimitExceeded", Message: "Request limit exceeded."}}
)

func forbidden(resource string) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New("rbac"))
}

// aNode is instance A's node with two pods, one of them using a volume.
func aNode() []runtime.Object {
	return []runtime.Object{
		newNode(idA),
		pod(idA, "apps", "web-1"),
		pod(idA, "db", "db-0", "data-db-0"),
		claim("db", "data-db-0", "pv-db"),
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// The terminate hook: every way it ends, and the result it is completed
// with (nil: not completed).
func TestTerminate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		ec2     []reading
		setup   func(*env)
		action  Action
		results []lifecycle.Result
		wantErr bool
		timeout time.Duration // of the invocation; 0: 2 s
		check   func(*testing.T, *env, Outcome)
	}{
		{
			name: "drained, volumes detached, completed with CONTINUE", objs: append(aNode(), attachment("csi-db", idA, "pv-db")), ec2: []reading{running},
			setup: func(e *env) {
				time.AfterFunc(50*time.Millisecond, func() { _ = e.kube.Tracker().Delete(vaGVR, "", "csi-db") })
			},
			action: ActionDrained, results: []lifecycle.Result{lifecycle.Continue},
			check: func(t *testing.T, e *env, out Outcome) {
				if want := []string{"apps/web-1", "db/db-0"}; !reflect.DeepEqual(sorted(out.Evicted), want) || !reflect.DeepEqual(sorted(e.evicted), want) {
					t.Errorf("evicted %v (outcome %v), want %v", e.evicted, out.Evicted, want)
				}
				n := e.node(t, idA)
				if !n.Spec.Unschedulable || !node.HasTaint(n, node.TaintDraining) || n.Labels[node.LabelExcludeLB] != "true" || out.Node != n.Name {
					t.Errorf("node %s not marked: %+v", out.Node, n.Spec)
				}
				want := map[string]string{string(node.ReasonDrainStarted): corev1.EventTypeNormal, string(node.ReasonDrainCompleted): corev1.EventTypeNormal,
					string(node.ReasonVolumesReleased): corev1.EventTypeNormal, string(node.ReasonLifecycleComplete): corev1.EventTypeNormal}
				if got := e.events(t); !reflect.DeepEqual(got, want) {
					t.Errorf("events %v, want %v", got, want)
				}
				in := e.asg.completed[0]
				if aws.ToString(in.AutoScalingGroupName) != asgName || aws.ToString(in.LifecycleActionToken) != token ||
					aws.ToString(in.InstanceId) != idA || aws.ToString(in.LifecycleHookName) != "node-drainer-terminate" {
					t.Errorf("completed %+v: not this action", in)
				}
				for _, w := range e.writes() {
					if strings.HasPrefix(w, "delete pods") {
						t.Errorf("the graceful path deleted a pod: %s", w)
					}
				}
			},
		},
		{
			// done means read again (rule 15) when the hook is completed:
			// the pods' list that ended the drain is 700 ms old by then
			name: "a pod bound while the volumes detach: drained too", objs: append(aNode(), attachment("csi-db", idA, "pv-db")), ec2: []reading{running},
			setup: func(e *env) {
				time.AfterFunc(300*time.Millisecond, func() { _ = e.kube.Tracker().Add(pod(idA, "apps", "late-1")) })
				time.AfterFunc(700*time.Millisecond, func() { _ = e.kube.Tracker().Delete(vaGVR, "", "csi-db") })
			},
			action: ActionDrained, results: []lifecycle.Result{lifecycle.Continue},
			check: func(t *testing.T, e *env, _ Outcome) {
				if want := []string{"apps/late-1", "apps/web-1", "db/db-0"}; !reflect.DeepEqual(sorted(e.evicted), want) {
					t.Errorf("evicted %v, want %v: the pod bound after the drain's list evicted before the completion", e.evicted, want)
				}
			},
		},
		{
			name: "volumes not detached in time: still CONTINUE, with a warning", objs: append(aNode(), attachment("csi-db", idA, "pv-db")), ec2: []reading{running},
			setup:  func(e *env) { e.cfg.VolumeDetachTimeout = 100 * time.Millisecond },
			action: ActionDrained, results: []lifecycle.Result{lifecycle.Continue},
			check: func(t *testing.T, e *env, _ Outcome) {
				if got := e.events(t)[string(node.ReasonVolumesReleased)]; got != corev1.EventTypeWarning {
					t.Errorf("volumes event %q, want a warning", got)
				}
			},
		},
		{
			name: "node missing: completed at once with CONTINUE", objs: nil, ec2: []reading{running},
			action: ActionNoNode, results: []lifecycle.Result{lifecycle.Continue},
			check: func(t *testing.T, e *env, _ Outcome) {
				if w := slices.DeleteFunc(e.writes(), func(w string) bool { return strings.Contains(w, "leases/") }); len(w) != 0 || e.asg.heartbeats != 0 {
					t.Errorf("wrote %v, %d heartbeats", w, e.asg.heartbeats)
				}
			},
		},
		{
			// a failed lookup is never "no node": retried, then handed on
			name: "node lookup fails: retried, then continued, not completed", objs: aNode(), ec2: []reading{running},
			setup:  func(e *env) { e.fail("get", "nodes", forbidden("nodes")); e.fail("list", "nodes", forbidden("nodes")) },
			action: ActionContinued, timeout: 500 * time.Millisecond,
		},
		{
			name: "node lookup fails, continuation off: failure result at the deadline", objs: aNode(), ec2: []reading{running},
			setup: func(e *env) {
				e.cfg.ContinueLongDrains = false
				e.fail("get", "nodes", forbidden("nodes"))
				e.fail("list", "nodes", forbidden("nodes"))
			},
			action: ActionFailed, results: []lifecycle.Result{lifecycle.Abandon}, timeout: 500 * time.Millisecond,
		},
		{
			name: "drain fails until the deadline: failure result", objs: aNode(), ec2: []reading{running},
			setup:  func(e *env) { e.cfg.ContinueLongDrains = false; e.fail("list", "pods", forbidden("pods")) },
			action: ActionFailed, results: []lifecycle.Result{lifecycle.Abandon}, timeout: 500 * time.Millisecond,
			check: func(t *testing.T, e *env, out Outcome) {
				if e.events(t)[string(node.ReasonDrainFailed)] != corev1.EventTypeWarning || !strings.Contains(out.Detail, "forbidden") {
					t.Errorf("events %v, detail %q: want the failure recorded", e.events(t), out.Detail)
				}
			},
		},
		{
			name: "configured CONTINUE on failure", objs: aNode(), ec2: []reading{running},
			setup: func(e *env) {
				e.cfg.LifecycleResultOnFailure = string(lifecycle.Continue)
				e.cfg.ContinueLongDrains = false
				e.fail("list", "pods", forbidden("pods"))
			},
			action: ActionFailed, results: []lifecycle.Result{lifecycle.Continue}, timeout: 500 * time.Millisecond,
		},
		{
			name: "blocked until this invocation's deadline, continuation off: failure result", objs: aNode(), ec2: []reading{running},
			// a second: under load the tiers before db-0's must have time to run
			setup: func(e *env) { e.blocked = []string{"db-0"}; e.cfg.ContinueLongDrains = false }, timeout: time.Second,
			action: ActionFailed, results: []lifecycle.Result{lifecycle.Abandon},
			check: func(t *testing.T, e *env, out Outcome) {
				if len(out.Remaining) != 1 || !strings.HasPrefix(out.Remaining[0], "db/db-0: blocked by PodDisruptionBudget") {
					t.Errorf("remaining %q: want db/db-0 blocked by its PDB", out.Remaining)
				}
				if !e.podExists("db", "db-0") || e.events(t)[string(node.ReasonDrainBlocked)] != corev1.EventTypeWarning {
					t.Errorf("pod gone or no blocked event: %v", e.events(t))
				}
				if !strings.Contains(out.Detail, "drain timed out; lifecycle action completed with ABANDON") {
					t.Errorf("detail %q", out.Detail)
				}
			},
		},
		{
			name: "instance already stopped: released at once, CONTINUE", objs: append(aNode(), attachment("csi-db", idA, "pv-db")), ec2: []reading{stopped},
			action: ActionReleased, results: []lifecycle.Result{lifecycle.Continue},
			check: func(t *testing.T, e *env, out Outcome) {
				if want := []string{"apps/web-1", "db/db-0"}; !reflect.DeepEqual(out.PodsDeleted, want) || len(out.AttachmentsDeleted) != 1 || len(e.evicted) != 0 {
					t.Errorf("pods deleted %v, attachments %v, evicted %v", out.PodsDeleted, out.AttachmentsDeleted, e.evicted)
				}
			},
		},
		{
			name: "instance stopped, release fails until the deadline: failure result", objs: aNode(), ec2: []reading{stopped},
			setup:  func(e *env) { e.cfg.ContinueLongDrains = false; e.fail("delete", "pods", forbidden("pods")) },
			action: ActionFailed, results: []lifecycle.Result{lifecycle.Abandon}, timeout: 500 * time.Millisecond,
		},
		{
			name: "foreign instance: ignored, nothing touched", objs: aNode(), ec2: []reading{foreign},
			action: ActionIgnored,
			check: func(t *testing.T, e *env, out Outcome) {
				if w := e.writes(); len(w) != 0 || !strings.Contains(out.Detail, clusterTag) {
					t.Errorf("wrote %v; detail %q", w, out.Detail)
				}
			},
		},
		{
			name: "ASG not listed: ignored without asking EC2", objs: aNode(), ec2: []reading{running},
			setup:  func(e *env) { e.cfg.ASGNames = []string{"other-nodes"} },
			action: ActionIgnored,
			check: func(t *testing.T, e *env, _ Outcome) {
				if w := e.writes(); len(w) != 0 || e.ec2.calls != 0 {
					t.Errorf("wrote %v, %d EC2 calls", w, e.ec2.calls)
				}
			},
		},
		{
			// nothing changed in the cluster; the hook, ours by name, is
			// heartbeated so that Lambda's retry (two minutes away at
			// worst) finds it alive (the simulation, seed 11368)
			name: "EC2 unreadable, any ASG: error, nothing done, the hook kept for the retry", objs: aNode(), ec2: []reading{throttled},
			wantErr: true,
			check: func(t *testing.T, e *env, _ Outcome) {
				if w := e.writes(); len(w) != 0 || e.asg.heartbeats != 1 {
					t.Errorf("wrote %v, %d heartbeats; want nothing written, one heartbeat", w, e.asg.heartbeats)
				}
			},
		},
		{
			name: "EC2 unreadable, ASG listed: drained by providerID and completed", objs: aNode(), ec2: []reading{throttled},
			setup:  func(e *env) { e.cfg.ASGNames = []string{asgName} },
			action: ActionDrained, results: []lifecycle.Result{lifecycle.Continue},
			check: func(t *testing.T, _ *env, out Outcome) {
				if len(out.PodsDeleted) != 0 || len(out.Evicted) != 2 {
					t.Errorf("evicted %v, force-deleted %v: want a graceful drain", out.Evicted, out.PodsDeleted)
				}
			},
		},
		{
			name: "dry run: nothing written, plan with the PDB that would block, hook completed with CONTINUE at once",
			objs: append(aNode(), attachment("csi-db", idA, "pv-db"), pdb("db", "db", 0), pdb("apps", "web", 1)), ec2: []reading{running},
			setup:  func(e *env) { e.cfg.DryRun = true; e.blocked = []string{"db-0"} },
			action: ActionDrained, results: []lifecycle.Result{lifecycle.Continue},
			check: func(t *testing.T, e *env, out Outcome) {
				if w := e.writes(); len(w) != 0 || e.asg.heartbeats != 0 || len(e.evicted) != 0 {
					t.Errorf("dry run wrote %v, %d heartbeats, evicted %v", w, e.asg.heartbeats, e.evicted)
				}
				if want := []string{"apps/web-1", "db/db-0"}; !reflect.DeepEqual(sorted(e.dryRunEvictions), want) {
					t.Errorf("server-side dry-run evictions %v, want %v", e.dryRunEvictions, want)
				}
				if !out.DryRun || out.Plan == nil || len(out.Remaining) != 2 {
					t.Fatalf("outcome %+v: want a dry run with its plan", out)
				}
				if !reflect.DeepEqual(out.Plan.WouldBlock, []string{"db/db"}) {
					t.Errorf("would block %v, want db/db (allows 0, covers db-0)", out.Plan.WouldBlock)
				}
				if !slices.ContainsFunc(out.Plan.Evict, func(s string) bool {
					return strings.HasPrefix(s, "db/db-0: dry run: eviction refused now by db/db")
				}) {
					t.Errorf("plan %q: want db-0's eviction refused now by db/db", out.Plan.Evict)
				}
				if !reflect.DeepEqual(out.Plan.Attachments, []string{"csi-db (pv-db)"}) {
					t.Errorf("attachments %v: want csi-db", out.Plan.Attachments)
				}
			},
		},
		{
			name: "dry run, apiserver refuses the listing: hook still completed with CONTINUE, nothing written", objs: aNode(), ec2: []reading{running},
			setup: func(e *env) {
				e.cfg.DryRun = true
				e.fail("list", "pods", forbidden("pods"))
			},
			action: ActionFailed, results: []lifecycle.Result{lifecycle.Continue}, timeout: 500 * time.Millisecond,
			check: func(t *testing.T, e *env, out Outcome) {
				if w := e.writes(); len(w) != 0 {
					t.Errorf("dry run wrote %v", w)
				}
				if !strings.Contains(out.Detail, "would complete with ABANDON, completed with CONTINUE") {
					t.Errorf("detail %q", out.Detail)
				}
			},
		},
		{
			name: "action no longer active: not this drain's end", objs: aNode(), ec2: []reading{running},
			setup:  func(e *env) { e.asg.completeErr = notActive() },
			action: ActionEndedElsewhere,
			check: func(t *testing.T, e *env, out Outcome) {
				if !strings.Contains(out.Detail, "no longer active") || out.LifecycleResult != string(lifecycle.Continue) {
					t.Errorf("outcome %+v", out)
				}
				// someone else completed it (or it timed out): no Event claims we did
				if _, ok := e.events(t)[string(node.ReasonLifecycleComplete)]; ok {
					t.Errorf("events %v: a completion recorded that did not happen", e.events(t))
				}
			},
		},
		{
			name: "completion fails: error", objs: aNode(), ec2: []reading{running},
			setup: func(e *env) {
				e.asg.completeErr = &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded"}
			},
			action:  ActionDrained,
			wantErr: true,
		},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv(tc.objs...)
			e.ec2.readings[idA] = tc.ec2
			if tc.setup != nil {
				tc.setup(e)
			}
			out, err := e.handle(t, terminateEvent(idA), cmp.Or(tc.timeout, 2*time.Second))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v (outcome %+v)", err, tc.wantErr, out)
			}
			if out.Action != tc.action || out.Event != event.KindTerminate || out.Instance != idA {
				t.Errorf("outcome %+v: want action %q", out, tc.action)
			}
			if got := e.asg.results(); !reflect.DeepEqual(got, tc.results) {
				t.Errorf("completed with %v, want %v", got, tc.results)
			}
			if len(tc.results) == 1 && out.LifecycleResult != string(tc.results[0]) {
				t.Errorf("outcome's result %q, want %q", out.LifecycleResult, tc.results[0])
			}
			if tc.check != nil {
				tc.check(t, e, out)
			}
		}))
	}
}

var vaGVR = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "volumeattachments"}

// A drain that outlasts the invocation heartbeats the hook and invokes the
// function again with the original event, the drain's start and the next
// attempt; the hook is not completed.
func TestTerminateContinues(t *testing.T) {
	for _, tc := range []struct {
		name        string
		attempt     int // of the invocation; 0: the EventBridge event itself
		invokeErr   error
		heartbeat   error
		action      Action
		results     []lifecycle.Result
		invocations int
		wantErr     bool
	}{
		{name: "first attempt", action: ActionContinued, invocations: 1},
		{name: "a continuation continues", attempt: 2, action: ActionContinued, invocations: 1},
		// a failed hand-over never completes the hook early: the invocation
		// fails for Lambda to retry, the hook heartbeated (rule 16)
		{name: "invoke fails: an error to retry, the hook left as it is", invokeErr: errors.New("throttled"), action: ActionFailed, invocations: 1, wantErr: true},
		{name: "action gone meanwhile: done, nothing invoked", heartbeat: notActive(), action: ActionCompleted},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv(aNode()...)
			e.ec2.readings[idA] = []reading{running}
			e.blocked = []string{"db-0"}
			e.asg.heartbeatErr = tc.heartbeat
			e.lam.err = tc.invokeErr
			raw := terminateEvent(idA)
			payload, started := raw, e.now
			if tc.attempt > 0 {
				started = e.now.Add(-10 * time.Minute)
				var err error
				if payload, err = event.NewContinuation(raw, started, tc.attempt); err != nil {
					t.Fatal(err)
				}
			}
			out, err := e.handle(t, payload, 300*time.Millisecond)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			if out.Action != tc.action || !reflect.DeepEqual(e.asg.results(), tc.results) || len(e.lam.invoked) != tc.invocations {
				t.Fatalf("outcome %+v, completed %v, %d invocations; want %q, %v, %d", out, e.asg.results(), len(e.lam.invoked), tc.action, tc.results, tc.invocations)
			}
			if e.asg.heartbeats == 0 {
				t.Error("no heartbeat before handing over")
			}
			if tc.invocations == 0 {
				return
			}
			in := e.lam.invoked[0]
			if aws.ToString(in.FunctionName) != "node-drainer" || in.InvocationType != lambdatypes.InvocationTypeEvent {
				t.Errorf("invoked %s %s: want node-drainer, asynchronously", aws.ToString(in.FunctionName), in.InvocationType)
			}
			ev, cont, err := event.ParseInvocation(in.Payload)
			if err != nil || cont == nil {
				t.Fatalf("payload %s: %v", in.Payload, err)
			}
			next := max(tc.attempt, 1) + 1
			// the first attempt starts when the handler reads its clock,
			// which moves on from e.now
			if d := cont.StartedAt.Sub(started); ev.Kind != event.KindTerminate || string(cont.Event) != string(raw) || d < 0 || d > time.Second || cont.Attempt != next {
				t.Errorf("continuation %+v: want the original event, started %v, attempt %d", cont, started, next)
			}
			if tc.action == ActionContinued && (e.events(t)[string(node.ReasonContinued)] != corev1.EventTypeNormal || out.Attempt != tc.attempt) {
				t.Errorf("events %v, attempt %d", e.events(t), out.Attempt)
			}
		}))
	}
}

// A continuation that never knowingly got the lease (its claim failed on
// the apiserver) hands over naming every invocation that may hold it: its
// predecessor, which may hold it still, and itself, whose claim may have
// taken it with the answer lost. Naming only the predecessor left the next
// attempt to find the lease held by this one and stand aside as a
// duplicate, and the hook timed out (the simulation, seed 16078).
func TestHandOverWithoutTheLeaseNamesEveryHolder(t *testing.T) {
	e := newEnv(aNode()...)
	e.ec2.readings[idA] = []reading{running}
	e.fail("create", "leases", apierrors.NewServiceUnavailable("etcd leader changed"))
	e.fail("get", "leases", apierrors.NewServiceUnavailable("etcd leader changed"))
	payload, err := event.Continuation{Event: terminateEvent(idA), StartedAt: e.now.Add(-time.Minute), Attempt: 2,
		Holder: "req-a", Holders: []string{"req-a"}}.Payload()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := e.handle(t, payload, 500*time.Millisecond)
	if out.Action != ActionContinued || len(e.lam.invoked) != 1 {
		t.Fatalf("outcome %+v, %d invocations: want handed over once", out, len(e.lam.invoked))
	}
	_, cont, err := event.ParseInvocation(e.lam.invoked[0].Payload)
	if err != nil || cont == nil {
		t.Fatalf("payload %s: %v", e.lam.invoked[0].Payload, err)
	}
	if h := cont.MayTakeFrom(); len(h) != 2 || h[0] != "req-a" || h[1] == "req-a" || h[1] == "" || cont.Holder != h[1] {
		t.Errorf("continuation may take the lease from %q (holder %q): want the predecessor req-a, then this invocation", h, cont.Holder)
	}
}

// Past DRAIN_TIMEOUT (by the handler's clock, from the drain's first
// start) the drain is not continued: the hook is completed with the failure
// result and the pods still there are named.
func TestTerminateDeadlineReached(t *testing.T) {
	e := newEnv(aNode()...)
	e.ec2.readings[idA] = []reading{running}
	e.blocked = []string{"db-0"}
	started := e.now
	e.now = started.Add(31 * time.Minute)
	payload, err := event.NewContinuation(terminateEvent(idA), started, 4)
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.handle(t, payload, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if out.Action != ActionFailed || !reflect.DeepEqual(e.asg.results(), []lifecycle.Result{lifecycle.Abandon}) || len(e.lam.invoked) != 0 {
		t.Fatalf("outcome %+v, completed %v, %d invocations: want failed, ABANDON, not continued", out, e.asg.results(), len(e.lam.invoked))
	}
	list, _ := e.kube.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{})
	found := false
	for _, ev := range list.Items {
		if ev.Reason == string(node.ReasonDrainBlocked) {
			found = strings.Contains(ev.Message, "after 31m0s") && strings.Contains(ev.Message, "db/db-0")
		}
	}
	if !found {
		t.Errorf("no blocked event naming the time by the handler's clock and the pod: %+v", list.Items)
	}
}

// The launch hook is completed once the node is Ready, or with the failure
// result at the deadline.
func TestLaunch(t *testing.T) {
	notReady := func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		ec2     []reading
		asgs    []string
		action  Action
		results []lifecycle.Result
	}{
		{"node Ready", []runtime.Object{newNode(idA)}, []reading{running}, nil, ActionNodeJoined, []lifecycle.Result{lifecycle.Continue}},
		{"node never Ready", []runtime.Object{newNode(idA, notReady)}, []reading{running}, nil, ActionFailed, []lifecycle.Result{lifecycle.Abandon}},
		{"node never joins", nil, []reading{running}, nil, ActionFailed, []lifecycle.Result{lifecycle.Abandon}},
		{"foreign instance", []runtime.Object{newNode(idA)}, []reading{foreign}, nil, ActionIgnored, nil},
		{"ASG not listed", []runtime.Object{newNode(idA)}, []reading{running}, []string{"other"}, ActionIgnored, nil},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv(tc.objs...)
			e.ec2.readings[idA] = tc.ec2
			e.cfg.ASGNames = tc.asgs
			out, err := e.handle(t, hookEvent(true, asgName, idA), 400*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if out.Action != tc.action || !reflect.DeepEqual(e.asg.results(), tc.results) {
				t.Errorf("outcome %+v, completed %v; want %q, %v", out, e.asg.results(), tc.action, tc.results)
			}
			if tc.action == ActionNodeJoined && out.Node != nodeName(idA) {
				t.Errorf("node %q", out.Node)
			}
		}))
	}
}

// The abrupt path forces nothing unless EC2 confirms the instance down.
func TestStateChange(t *testing.T) {
	for _, tc := range []struct {
		name    string
		state   string
		ec2     []reading
		setup   func(*env)
		action  Action
		forced  bool // pods force-deleted, attachments deleted, node tainted out-of-service
		wantErr bool
		check   func(*testing.T, *env, Outcome)
	}{
		{name: "stopped", state: "stopped", ec2: []reading{stopped}, action: ActionReleased, forced: true},
		{name: "terminated, node deleted", state: "terminated", ec2: []reading{terminated}, action: ActionReleased, forced: true,
			setup: func(e *env) { e.cfg.DeleteTerminatedNodes = true },
			check: func(t *testing.T, e *env, out Outcome) {
				if _, err := e.kube.CoreV1().Nodes().Get(t.Context(), nodeName(idA), metav1.GetOptions{}); !apierrors.IsNotFound(err) || out.Detail != "node of terminated instance deleted" {
					t.Errorf("node still there (%v); detail %q", err, out.Detail)
				}
			}},
		{name: "gone from EC2", state: "terminated", ec2: nil, action: ActionReleased, forced: true},
		{name: "stopping, then stopped", state: "stopping", ec2: []reading{stopping, stopping, stopped}, action: ActionReleased, forced: true},
		{name: "still stopping at the wait's end: not forced", state: "stopping", ec2: []reading{stopping},
			setup: func(e *env) { e.cfg.StoppingWaitTimeout = 50 * time.Millisecond }, action: ActionNotForced,
			check: func(t *testing.T, e *env, _ Outcome) {
				if e.events(t)[string(node.ReasonNotForced)] != corev1.EventTypeWarning {
					t.Errorf("events %v: want the refusal recorded", e.events(t))
				}
			}},
		{name: "event says stopped, EC2 says running: not forced", state: "stopped", ec2: []reading{running}, action: ActionNotForced},
		{name: "EC2 unreadable: error, nothing done", state: "stopped", ec2: []reading{throttled}, wantErr: true},
		{name: "EC2 unreadable while stopping: error", state: "stopping", ec2: []reading{stopping, throttled}, wantErr: true},
		{name: "foreign instance", state: "stopped", ec2: []reading{{state: instance.StateStopped}}, action: ActionIgnored},
		{name: "no node", state: "stopped", ec2: []reading{stopped}, setup: func(e *env) {
			_ = e.kube.CoreV1().Nodes().Delete(t.Context(), nodeName(idA), metav1.DeleteOptions{})
			e.kube.ClearActions()
		}, action: ActionNoNode},
		{name: "pending needs nothing", state: "pending", ec2: []reading{running}, action: ActionIgnored},
		{name: "dry run: says what, does nothing", state: "stopped", ec2: []reading{stopped}, action: ActionReleased,
			setup: func(e *env) { e.cfg.DryRun = true },
			check: func(t *testing.T, _ *env, out Outcome) {
				if len(out.PodsDeleted) != 2 || len(out.AttachmentsDeleted) != 1 {
					t.Errorf("outcome %+v: want what would be deleted", out)
				}
			}},
		{name: "force-deletion refused: error", state: "stopped", ec2: []reading{stopped}, action: ActionReleased, wantErr: true,
			setup: func(e *env) { e.fail("delete", "pods", forbidden("pods")) }},
		{name: "node deletion refused: error", state: "terminated", ec2: []reading{terminated}, action: ActionReleased, forced: true, wantErr: true,
			setup: func(e *env) { e.cfg.DeleteTerminatedNodes = true; e.fail("delete", "nodes", forbidden("nodes")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(append(aNode(), attachment("csi-db", idA, "pv-db"))...)
			e.ec2.readings[idA] = tc.ec2
			if tc.setup != nil {
				tc.setup(e)
			}
			out, err := e.handle(t, stateEvent(idA, tc.state, time.Now()), 2*time.Second)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v (outcome %+v)", err, tc.wantErr, out)
			}
			if out.Action != tc.action {
				t.Errorf("outcome %+v: want action %q", out, tc.action)
			}
			podsGone := !e.podExists("apps", "web-1") && !e.podExists("db", "db-0")
			vaGone := true
			if _, err := e.kube.Tracker().Get(vaGVR, "", "csi-db"); err == nil {
				vaGone = false
			}
			tainted := false
			if n, err := e.kube.CoreV1().Nodes().Get(t.Context(), nodeName(idA), metav1.GetOptions{}); err == nil {
				tainted = node.HasTaint(n, node.TaintOutOfService) && n.Spec.Unschedulable
			}
			deleted := tc.setup != nil && e.cfg.DeleteTerminatedNodes && !tc.wantErr
			if !tc.wantErr && (podsGone != tc.forced || vaGone != tc.forced || (tainted != tc.forced && !deleted)) {
				t.Errorf("pods gone %v, attachment gone %v, tainted %v: want forced %v", podsGone, vaGone, tainted, tc.forced)
			}
			if !tc.forced && tc.action != ActionReleased {
				for _, w := range e.writes() {
					if !strings.HasPrefix(w, "create events") {
						t.Errorf("wrote %s without EC2's confirmation", w)
					}
				}
			}
			if tc.forced && !tc.wantErr && e.events(t)[string(node.ReasonOutOfService)] != corev1.EventTypeWarning {
				t.Errorf("events %v: want the release recorded with its evidence", e.events(t))
			}
			if tc.check != nil {
				tc.check(t, e, out)
			}
		})
	}
}

// An instance running again gets back what node-drainer changed on its node,
// and only that.
func TestRecover(t *testing.T) {
	since := time.Now().Add(-time.Hour)
	owned := func(reason string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Spec.Unschedulable = true
			n.Spec.Taints = []corev1.Taint{{Key: node.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
			n.Annotations = map[string]string{node.AnnotationOwned: `{"reason":"` + reason + `","since":"` + since.UTC().Format(time.RFC3339Nano) + `","cordoned":true,"outOfServiceTaint":true}`}
		}
	}
	othersMarks := func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		n.Spec.Taints = []corev1.Taint{{Key: node.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		ec2     []reading
		at      time.Time
		action  Action
		undone  bool
		wantErr bool
	}{
		{"released node comes back", newNode(idA, owned("out-of-service")), []reading{running}, time.Now(), ActionRecovered, true, false},
		{"event older than the release", newNode(idA, owned("out-of-service")), []reading{running}, since.Add(-time.Minute), ActionIgnored, false, false},
		{"a drain in progress is not undone", newNode(idA, owned("terminate")), []reading{running}, time.Now(), ActionIgnored, false, false},
		{"only others' marks on the node", newNode(idA, othersMarks), []reading{running}, time.Now(), ActionIgnored, false, false},
		{"EC2 says stopped", newNode(idA, owned("out-of-service")), []reading{stopped}, time.Now(), ActionIgnored, false, false},
		{"foreign instance", newNode(idA, owned("out-of-service")), []reading{foreign}, time.Now(), ActionIgnored, false, false},
		{"EC2 unreadable", newNode(idA, owned("out-of-service")), []reading{throttled}, time.Now(), "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(tc.node)
			e.ec2.readings[idA] = tc.ec2
			out, err := e.handle(t, stateEvent(idA, "running", tc.at), time.Second)
			if (err != nil) != tc.wantErr || out.Action != tc.action {
				t.Fatalf("outcome %+v, error %v: want %q, error %v", out, err, tc.action, tc.wantErr)
			}
			n := e.node(t, idA)
			if undone := !n.Spec.Unschedulable && !node.HasTaint(n, node.TaintOutOfService); undone != tc.undone {
				t.Errorf("node %+v: undone %v, want %v", n.Spec, undone, tc.undone)
			}
			if tc.undone && e.events(t)[string(node.ReasonRecovered)] != corev1.EventTypeNormal {
				t.Errorf("events %v", e.events(t))
			}
		})
	}
}

// Spot warnings, rebalance recommendations and scheduled changes cordon or
// drain as configured; no hook is completed.
func TestAdvisory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload []byte
		ec2     []reading
		setup   func(*env)
		action  Action
		evicted int
		cordon  bool
		wantErr bool
	}{
		{name: "spot: drained", payload: spotEvent(idA, time.Now()), ec2: []reading{running}, action: ActionDrained, evicted: 2, cordon: true},
		{name: "spot, instance already terminated: released", payload: spotEvent(idA, time.Now()), ec2: []reading{terminated}, action: ActionReleased, cordon: true},
		{name: "spot, foreign instance", payload: spotEvent(idA, time.Now()), ec2: []reading{foreign}, action: ActionIgnored},
		{name: "spot, EC2 unreadable", payload: spotEvent(idA, time.Now()), ec2: []reading{throttled}, wantErr: true},
		{name: "spot, no node", payload: spotEvent(idB, time.Now()), ec2: []reading{running}, action: ActionNoNode},
		{name: "rebalance: cordoned (default)", payload: rebalanceEvent(idA), ec2: []reading{running}, action: ActionCordoned, cordon: true},
		{name: "rebalance: cordon refused", payload: rebalanceEvent(idA), ec2: []reading{running}, wantErr: true,
			setup: func(e *env) { e.fail("update", "nodes", forbidden("nodes")) }},
		{name: "rebalance: drain", payload: rebalanceEvent(idA), ec2: []reading{running}, action: ActionDrained, evicted: 2, cordon: true,
			setup: func(e *env) { e.cfg.RebalanceAction = config.ActionDrain }},
		{name: "rebalance: ignore", payload: rebalanceEvent(idA), ec2: []reading{running}, action: ActionIgnored,
			setup: func(e *env) { e.cfg.RebalanceAction = config.ActionIgnore }},
		{name: "scheduled change: drained", payload: scheduledEvent(idA), ec2: []reading{running}, action: ActionDrained, evicted: 2, cordon: true},
		{name: "scheduled change: ignore", payload: scheduledEvent(idA), ec2: []reading{running}, action: ActionIgnored,
			setup: func(e *env) { e.cfg.ScheduledChangeAction = config.ActionIgnore }},
		{name: "drain refused", payload: spotEvent(idA, time.Now()), ec2: []reading{running}, wantErr: true, cordon: true,
			setup: func(e *env) { e.fail("list", "pods", forbidden("pods")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(aNode()...)
			e.ec2.readings[idA], e.ec2.readings[idB] = tc.ec2, tc.ec2
			if tc.setup != nil {
				tc.setup(e)
			}
			out, err := e.handle(t, tc.payload, 2*time.Second)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v (outcome %+v)", err, tc.wantErr, out)
			}
			if !tc.wantErr && out.Action != tc.action {
				t.Errorf("outcome %+v: want action %q", out, tc.action)
			}
			if len(e.evicted) != tc.evicted || e.node(t, idA).Spec.Unschedulable != tc.cordon {
				t.Errorf("evicted %v, cordoned %v: want %d evicted, cordoned %v", e.evicted, e.node(t, idA).Spec.Unschedulable, tc.evicted, tc.cordon)
			}
			if len(e.asg.completed) != 0 || e.asg.heartbeats != 0 {
				t.Errorf("an advisory event touched a hook: %v, %d heartbeats", e.asg.results(), e.asg.heartbeats)
			}
		})
	}
}

// A spot drain's deadline runs from the warning, not from the invocation.
func TestSpotDeadlineFromWarning(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.ec2.readings[idA] = []reading{running}
		e.blocked = []string{"db-0"}
		e.cfg.SpotDrainTimeout = 2 * time.Second
		warned := time.Now().Add(-1500 * time.Millisecond)
		e.now = time.Now()
		start := time.Now()
		out, err := e.handle(t, spotEvent(idA, warned), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > time.Second { // from the warning: 0.5 s; from the invocation: 2 s
			t.Errorf("drain took %s: the deadline did not count from the warning", took)
		}
		if len(out.Remaining) != 1 || e.events(t)[string(node.ReasonDrainBlocked)] != corev1.EventTypeWarning {
			t.Errorf("remaining %v, events %v: want db-0 reported blocked", out.Remaining, e.events(t))
		}
	})
}

// A scheduled change names several instances: each is handled, and the
// errors are joined.
func TestScheduledChangeSeveral(t *testing.T) {
	e := newEnv(append(aNode(), newNode(idB), pod(idB, "apps", "web-2"))...)
	e.lam = nil // no fan-out: the instances are handled in parallel in this invocation
	e.ec2.readings[idA] = []reading{running}
	e.ec2.readings[idB] = []reading{running}
	out, err := e.handle(t, scheduledEvent(idA, idB), 2*time.Second)
	if err != nil || out.Action != ActionPerInstance || len(out.Instances) != 2 || len(e.evicted) != 3 {
		t.Fatalf("outcome %+v, error %v, evicted %v: want both nodes drained", out, err, e.evicted)
	}

	e = newEnv(aNode()...)
	e.lam = nil
	e.ec2.readings[idA] = []reading{throttled}
	e.ec2.readings[idB] = []reading{throttled}
	_, err = e.handle(t, scheduledEvent(idA, idB), 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), idA) || !strings.Contains(err.Error(), idB) {
		t.Errorf("error %v: want both instances' errors", err)
	}
}

// Events node-drainer does not act on are ignored; a malformed one is an
// error; neither touches anything.
func TestNotActionable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload []byte
		wantErr bool
	}{
		{"malformed", []byte(`{"version":"0","source":"aws.ec2"`), true},
		{"not an event", []byte(`{"hello":"world"}`), true},
		{"terminate hook without an instance", envelope("aws.autoscaling", "EC2 Instance-terminate Lifecycle Action", time.Now(),
			map[string]string{"LifecycleActionToken": token, "AutoScalingGroupName": asgName, "LifecycleHookName": "h", "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING"}), true},
		{"another source", envelope("aws.s3", "Object Created", time.Now(), map[string]string{"key": "x"}), false},
		{"test notification", envelope("aws.autoscaling", "EC2 Instance-terminate Lifecycle Action", time.Now(),
			map[string]string{"Event": "autoscaling:TEST_NOTIFICATION", "LifecycleTransition": "autoscaling:TEST_NOTIFICATION", "AutoScalingGroupName": asgName}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(aNode()...)
			e.ec2.readings[idA] = []reading{running}
			out, err := e.handle(t, tc.payload, time.Second)
			if (err != nil) != tc.wantErr || out.Action != ActionIgnored {
				t.Errorf("outcome %+v, error %v: want ignored, error %v", out, err, tc.wantErr)
			}
			if w := e.writes(); len(w) != 0 || e.ec2.calls != 0 || len(e.asg.completed) != 0 {
				t.Errorf("wrote %v, %d EC2 calls, completed %v", w, e.ec2.calls, e.asg.results())
			}
		})
	}
}

// A launch hook whose node watch is refused (403) is completed with the
// failure result at once, the cause named: not waited out as a timeout.
func TestLaunchWatchForbidden(t *testing.T) {
	e := newEnv()
	e.ec2.readings[idA] = []reading{running}
	e.kube.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, forbidden("nodes")
	})
	start := time.Now()
	out, err := e.handle(t, hookEvent(true, asgName, idA), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out.Action != ActionFailed || !strings.Contains(out.Detail, "forbidden") || !reflect.DeepEqual(e.asg.results(), []lifecycle.Result{lifecycle.Abandon}) {
		t.Errorf("outcome %+v, completed %v: want the failure result, the 403 named", out, e.asg.results())
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("took %s: the 403 was waited out", took)
	}
}

// TestForeignInstanceRemembered: the EC2 state-change rule sends every
// instance of the account; a warm function asks EC2 about a foreign instance
// once, answers its later events from memory (no AWS call, no cluster
// request) until foreignTTL passes, and never remembers its own instances.
func TestForeignInstanceRemembered(t *testing.T) {
	const other = "i-0123456789abcdef9"
	e := newEnv(aNode()...)
	e.ec2.readings[other] = []reading{{state: instance.StateStopping}}
	e.ec2.readings[idA] = []reading{running}
	h := e.handler()
	for i, state := range []string{"stopping", "stopped", "terminated"} {
		out, err := e.handleWith(h, stateEvent(other, state, e.now), time.Second)
		if err != nil || out.Action != ActionIgnored {
			t.Fatalf("event %d: outcome %+v, error %v: want ignored", i, out, err)
		}
	}
	if e.ec2.calls != 1 {
		t.Errorf("%d DescribeInstances for three events of one foreign instance: want 1", e.ec2.calls)
	}
	if n := len(e.kube.Actions()); n != 0 {
		t.Errorf("%d cluster requests for a foreign instance: want none", n)
	}
	e.now = e.now.Add(foreignTTL + time.Second)
	if _, err := e.handleWith(h, stateEvent(other, "terminated", e.now), time.Second); err != nil {
		t.Fatal(err)
	}
	if e.ec2.calls != 2 {
		t.Errorf("%d DescribeInstances after the memory lapsed: want EC2 asked again (2)", e.ec2.calls)
	}

	// the cluster's own instance: EC2 is asked at every event
	before := e.ec2.calls
	for range 2 {
		if _, err := e.handleWith(h, stateEvent(idA, "running", e.now), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.ec2.calls - before; got < 2 {
		t.Errorf("%d DescribeInstances for two events of the cluster's own instance: want EC2 asked at each", got)
	}
}

// A refusal is not a verdict (rule 13): an eviction a policy refuses (422)
// is asked again through the invocation's budget; the invocation hands over
// only then, once, and the hook is not completed.
func TestTerminateRefusedEvictionWaitsItsBudget(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.ec2.readings[idA] = []reading{running}
		var refusals atomic.Int32
		e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "eviction" || a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name != "db-0" {
				return false, nil, nil
			}
			refusals.Add(1)
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "policy", Kind: "Eviction"}, "db-0", nil)
		})
		out, err := e.handle(t, terminateEvent(idA), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if out.Action != ActionContinued || len(e.asg.results()) != 0 || len(e.lam.invoked) != 1 {
			t.Fatalf("outcome %+v, completed %v, %d invocations: want one hand-over, no completion", out, e.asg.results(), len(e.lam.invoked))
		}
		if n := refusals.Load(); n < 3 {
			t.Errorf("the refused eviction was asked %d times in the budget: want it asked again until the budget's end", n)
		}
	})
}

// The node's attachments read ahead (as the drain lists its pods again) are
// the ones the wait for its volumes starts from: no second request when the
// read succeeded, a new one when it failed (its context was the drain's)
// or none was begun.
func TestAttachmentsReadAhead(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ahead     bool
		failAhead bool
		lists     int // requests in all
	}{
		{"read ahead", true, false, 1},
		{"the read ahead failed", true, true, 2},
		{"none read ahead", false, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(append(aNode(), attachment("csi-db", idA, "pv-db"))...)
			var lists atomic.Int32
			e.kube.PrependReactor("list", "volumeattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
				if lists.Add(1) == 1 && tc.failAhead {
					return true, nil, apierrors.NewForbidden(vaGVR.GroupResource(), "", errors.New("rbac"))
				}
				return false, nil, nil
			})
			r := &nodeDrain{&invocation{h: e.handler(), log: slog.New(slog.DiscardHandler)}}
			name := newNode(idA).Name
			if tc.ahead {
				r.readAttachmentsSoon(t.Context(), name)
			}
			vas, err := r.attachmentsOn(t.Context(), name)
			r.recording.Wait()
			if err != nil || len(vas) != 1 || vas[0].Name != "csi-db" {
				t.Fatalf("attachments %v, %v: want csi-db", vas, err)
			}
			if n := lists.Load(); int(n) != tc.lists {
				t.Errorf("%d list requests, want %d", n, tc.lists)
			}
			if r.attachments != nil {
				t.Errorf("the read ahead was not taken")
			}
		})
	}
}
