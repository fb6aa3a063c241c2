package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/sweep"
)

func sweepEvent() []byte {
	return envelope("aws.events", "Scheduled Event", time.Now(), map[string]string{})
}

// waitingGroup is asgName with id waiting in Terminating:Wait on the terminate hook.
func waitingGroup(a *fakeASG, id string) {
	a.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String(asgName), Instances: []astypes.Instance{
		{InstanceId: aws.String(id), LifecycleState: astypes.LifecycleStateTerminatingWait, HealthStatus: aws.String("Healthy")}}}}
	a.hooks = []astypes.LifecycleHook{{LifecycleHookName: aws.String("node-drainer-terminate"),
		LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300)}}
}

// TestSweepCompletesForgottenHook: a terminate hook whose event never came
// is drained and completed by instance id (there is no token to name).
func TestSweepCompletesForgottenHook(t *testing.T) {
	e := newEnv(newNode(idA), pod(idA, "apps", "web-1"))
	e.ec2.readings[idA] = []reading{{state: instance.StateRunning, tagged: true}}
	waitingGroup(e.asg, idA)
	out, err := e.handle(t, sweepEvent(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out.Action != ActionSwept || out.Sweep == nil || !slices.Equal(out.Sweep.Hooks, []string{idA}) {
		t.Fatalf("outcome %+v sweep %+v: want swept, hook of %s handled", out, out.Sweep, idA)
	}
	if e.podExists("apps", "web-1") {
		t.Error("the node was not drained")
	}
	if len(e.asg.completed) != 1 {
		t.Fatalf("completions %v, want one", e.asg.completed)
	}
	c := e.asg.completed[0]
	if c.LifecycleActionToken != nil || aws.ToString(c.InstanceId) != idA || aws.ToString(c.LifecycleHookName) != "node-drainer-terminate" ||
		e.asg.results()[0] != lifecycle.Continue {
		t.Errorf("completion %+v: want by instance id %s, no token, CONTINUE", c, idA)
	}
}

// TestSweepActsOnNothingWithoutCompleteReadings: a list or a describe that
// fails leaves everything as it is, and says so.
func TestSweepActsOnNothingWithoutCompleteReadings(t *testing.T) {
	for name, fail := range map[string]func(e *env){
		"nodes":  func(e *env) { e.fail("list", "nodes", apierrors.NewInternalError(errors.New("etcd down"))) },
		"leases": func(e *env) { e.fail("list", "leases", apierrors.NewServiceUnavailable("unavailable")) },
		"ec2":    func(e *env) { e.ec2.readings[idA] = []reading{{err: errors.New("throttled")}} },
		"pods": func(e *env) {
			e.fail("list", "pods", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no")))
		},
		"volumes": func(e *env) { e.fail("list", "volumeattachments", apierrors.NewTimeoutError("slow", 1)) },
	} {
		t.Run(name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv(newNode(idA), pod(idA, "apps", "web-1"), newNode(idB), pod(idB, "apps", "db-0"))
			e.ec2.readings[idA] = []reading{{state: instance.StateRunning, tagged: true}}
			e.ec2.readings[idB] = []reading{{state: instance.StateStopped, tagged: true}} // dead: pods to release
			waitingGroup(e.asg, idA)
			fail(e)
			out, err := e.handle(t, sweepEvent(), 1500*time.Millisecond)
			if err == nil || out.Action != ActionFailed {
				t.Errorf("outcome %+v, %v: want failed with an error", out, err)
			}
			if w := e.writes(); len(w) != 0 {
				t.Errorf("writes %v, want none", w)
			}
			if len(e.asg.completed) != 0 {
				t.Errorf("completed %v, want nothing", e.asg.completed)
			}
		}))
	}
}

// TestSweepReleasesDeadNodeAndReportsZombie: a stopped instance's node is
// released through the abrupt path; a node NotReady on a running instance
// is reported, and marked Unhealthy only when asked.
func TestSweepReleasesDeadNodeAndReportsZombie(t *testing.T) {
	for _, replace := range []bool{false, true} {
		e := newEnv(newNode(idA, notReadySince(time.Now().Add(-time.Hour))), pod(idA, "apps", "web-1"),
			newNode(idB, notReadySince(time.Now().Add(-time.Hour))))
		e.ec2.readings[idA] = []reading{{state: instance.StateStopped, tagged: true}}
		e.ec2.readings[idB] = []reading{{state: instance.StateRunning, tagged: true}}
		e.cfg.ZombieAfter, e.cfg.ZombieMaxPerSweep, e.cfg.ZombieMaxASGShare = 10*time.Minute, 1, 0.5
		if replace {
			e.cfg.ZombieAction = "replace"
		}
		e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String(asgName), Instances: []astypes.Instance{
			{InstanceId: aws.String(idB), LifecycleState: astypes.LifecycleStateInService, HealthStatus: aws.String("Healthy")}}}}
		out, err := e.handle(t, sweepEvent(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out.Sweep.Dead, []string{idA}) || e.podExists("apps", "web-1") {
			t.Errorf("replace=%v: dead %v, pod there %v: want %s released", replace, out.Sweep.Dead, e.podExists("apps", "web-1"), idA)
		}
		if !slices.Equal(out.Sweep.Zombies, []string{nodeName(idB)}) || e.events(t)["NodeDrainerZombie"] != "Warning" {
			t.Errorf("replace=%v: zombies %v events %v: want %s reported with a Warning", replace, out.Sweep.Zombies, e.events(t), nodeName(idB))
		}
		if replace != slices.Equal(e.asg.unhealthy, []string{idB}) || replace != slices.Equal(out.Sweep.Replaced, []string{idB}) {
			t.Errorf("replace=%v: SetInstanceHealth on %v, replaced %v", replace, e.asg.unhealthy, out.Sweep.Replaced)
		}
	}
}

// notReadySince makes a node NotReady (its kubelet silent) since t.
func notReadySince(t time.Time) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: metav1.NewTime(t)}}
	}
}

// turningEC2 is fakeEC2 with a hook run after each call: a test changes
// EC2's answers there, between the sweep's reading and its acting.
type turningEC2 struct {
	*fakeEC2
	after func(f *fakeEC2, in *ec2.DescribeInstancesInput)
}

func (t *turningEC2) DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	out, err := t.fakeEC2.DescribeInstances(ctx, in, opts...)
	if t.after != nil {
		t.after(t.fakeEC2, in)
	}
	return out, err
}

// byName reports a DescribeInstances by private DNS name (the sweep's
// reading of the nodes attachments name).
func byName(in *ec2.DescribeInstancesInput) bool {
	for _, f := range in.Filters {
		if aws.ToString(f.Name) == "private-dns-name" {
			return true
		}
	}
	return false
}

// handlerOn is a Handler on the env's fakes but EC2 api and the clock now.
func (e *env) handlerOn(api instance.EC2API, now func() time.Time) *Handler {
	h := New(e.cfg, Clients{Kube: e.kube, EC2: api, ASG: e.asg, AutoScaling: e.asg, Lambda: e.lam}, nil, WithClock(newMovingClock(now)))
	h.StoppingPollInterval = 10 * time.Millisecond
	return h
}

// TestSweepOrphanReadsEC2AgainBeforeDeleting: the sweep's reading of EC2 is
// up to a whole sweep old; an orphaned attachment is deleted only when EC2,
// read again at the moment of acting, still reports no instance of that
// name that could run. Unreadable means nothing is done.
func TestSweepOrphanReadsEC2AgainBeforeDeleting(t *testing.T) {
	const idB = "i-0987654321abcdef0" // its node, ip-098765.ec2.internal, is gone
	idNew := idB[:8] + "00000000000"  // another instance, given the same name
	for _, tc := range []struct {
		name    string
		before  map[string][]reading // EC2 at the sweep's reading
		then    map[string][]reading // EC2 from the first reading by name on
		deleted bool
		failed  bool
	}{
		{"still terminated: deleted", map[string][]reading{idB: {{state: instance.StateTerminated, tagged: true}}}, nil, true, false},
		{"unknown to EC2 all along: deleted", nil, nil, true, false},
		{"a new instance took the name: kept", nil, map[string][]reading{idNew: {{state: instance.StateRunning, tagged: true}}}, false, false},
		{"a new instance is pending under the name: kept", map[string][]reading{idB: {{state: instance.StateTerminated, tagged: true}}},
			map[string][]reading{idB: {{state: instance.StateTerminated, tagged: true}}, idNew: {{state: instance.StatePending, tagged: true}}}, false, false},
		{"EC2 unreadable at the moment of acting: kept, failed", map[string][]reading{idB: {{state: instance.StateTerminated, tagged: true}}},
			map[string][]reading{idB: {{err: errors.New("throttled")}}}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(attachment("csi-b", idB, "pv-b")) // no node of idB in the cluster
			for id, rs := range tc.before {
				e.ec2.readings[id] = rs
			}
			reads := 0
			api := &turningEC2{fakeEC2: e.ec2, after: func(f *fakeEC2, in *ec2.DescribeInstancesInput) {
				if !byName(in) {
					return
				}
				if reads++; reads == 1 && tc.then != nil {
					f.mu.Lock()
					f.readings = tc.then
					f.mu.Unlock()
				}
			}}
			out, err := e.handleWith(e.handlerOn(api, func() time.Time { return e.now }), sweepEvent(), 5*time.Second)
			if (err != nil) != tc.failed {
				t.Fatalf("sweep error %v, want error %v (outcome %+v)", err, tc.failed, out)
			}
			if reads < 2 {
				t.Errorf("EC2 read by name %d times: want the reading, then again at the moment of acting", reads)
			}
			_, getErr := e.kube.StorageV1().VolumeAttachments().Get(context.Background(), "csi-b", metav1.GetOptions{})
			if deleted := apierrors.IsNotFound(getErr); deleted != tc.deleted {
				t.Fatalf("attachment deleted %v, want %v (sweep %+v)", deleted, tc.deleted, out.Sweep)
			}
			if listed := slices.Equal(out.Sweep.Orphans, []string{"csi-b"}); listed != tc.deleted {
				t.Errorf("orphans %v: listed %v, want %v", out.Sweep.Orphans, listed, tc.deleted)
			}
			if !tc.deleted && !tc.failed && !slices.ContainsFunc(out.Sweep.Notes, func(n string) bool { return strings.Contains(n, "csi-b") && strings.Contains(n, "kept") }) {
				t.Errorf("notes %q: want why csi-b was kept", out.Sweep.Notes)
			}
		})
	}
}

// manyWaiting is n instances waiting in Terminating:Wait on the terminate
// hook, each with a node and a pod a PDB holds.
func manyWaiting(n int) (ids []string, objs []runtime.Object, group astypes.AutoScalingGroup) {
	group = astypes.AutoScalingGroup{AutoScalingGroupName: aws.String(asgName)}
	for k := range n {
		id := fmt.Sprintf("i-%06x%011x", 0xa00000+k, k)
		ids = append(ids, id)
		objs = append(objs, newNode(id), pod(id, "apps", "held-"+id))
		group.Instances = append(group.Instances, astypes.Instance{InstanceId: aws.String(id),
			LifecycleState: astypes.LifecycleStateTerminatingWait, HealthStatus: aws.String("Healthy")})
	}
	return ids, objs, group
}

// TestSweepLeavesHooksQueuedPastTheBudget: a ninth hook queued behind
// eight drains a PDB holds to the end of the budget is not started with
// what remains — no lease claimed with an ended context, no drain, no
// completion —: it is left for the next sweep, and the summary says so.
func TestSweepLeavesHooksQueuedPastTheBudget(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		ids, objs, group := manyWaiting(maxParallelInstances + 1)
		e := newEnv(objs...)
		for _, id := range ids {
			e.ec2.readings[id] = []reading{{state: instance.StateRunning, tagged: true}}
			e.blocked = append(e.blocked, "held-"+id)
		}
		waitingGroup(e.asg, ids[0])
		e.asg.groups = []astypes.AutoScalingGroup{group}
		last := ids[len(ids)-1]
		// an invocation took the last one before and its lease lapsed (it
		// failed to hand it over): the function owes it a completion
		taken := heldLease(lease.Name(last))
		lapsed := metav1.NewMicroTime(time.Now().Add(-5 * time.Minute))
		taken.Spec.AcquireTime, taken.Spec.RenewTime = &lapsed, &lapsed
		if _, err := e.kube.CoordinationV1().Leases("node-drainer").Create(context.Background(), taken, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// a clock that runs: the budget is spent by the time the ninth's turn comes
		out, err := e.handleWith(e.handlerOn(e.ec2, time.Now), sweepEvent(), 3*time.Second)
		if err != nil {
			t.Fatalf("sweep: %v (%+v)", err, out.Sweep)
		}
		if slices.Contains(out.Sweep.Hooks, last) || slices.ContainsFunc(out.Sweep.Failed, func(f string) bool { return strings.HasPrefix(f, last) }) {
			t.Errorf("hooks %v failed %v: %s was started past the budget", out.Sweep.Hooks, out.Sweep.Failed, last)
		}
		if !slices.ContainsFunc(out.Sweep.Notes, func(n string) bool {
			return strings.HasPrefix(n, last) && strings.Contains(n, "left for the next sweep: budget spent")
		}) {
			t.Errorf("notes %q: want %s left for the next sweep", out.Sweep.Notes, last)
		}
		// its age unknown, and an invocation that took it may have failed to
		// hand it over: heartbeated, so the next sweep finds it waiting (rule 3)
		e.asg.mu.Lock()
		beaten := slices.Clone(e.asg.beaten)
		e.asg.mu.Unlock()
		if !slices.Contains(beaten, last) {
			t.Errorf("heartbeats %v: the hook of %s, left for the next sweep, was not heartbeated", beaten, last)
		}
		if l, err := e.kube.CoordinationV1().Leases("node-drainer").Get(context.Background(), lease.Name(last), metav1.GetOptions{}); err != nil ||
			ptr.Deref(l.Spec.HolderIdentity, "") != "another-invocation" || !l.Spec.RenewTime.Equal(&lapsed) {
			t.Errorf("lease of %s: %+v, %v, want it as it was, not claimed", last, l, err)
		}
		for _, c := range e.asg.completed {
			if aws.ToString(c.InstanceId) == last {
				t.Errorf("the hook of %s was completed (%s)", last, aws.ToString(c.LifecycleActionResult))
			}
		}
		if len(out.Sweep.Hooks) != maxParallelInstances {
			t.Errorf("hooks handled %v: want the %d that started in time", out.Sweep.Hooks, maxParallelInstances)
		}
	})
}

// TestSweepStartsNoPathWithoutItsMinimum: with less left of the budget than
// a path needs (sweepPathMinimum), nothing is started at all.
func TestSweepStartsNoPathWithoutItsMinimum(t *testing.T) {
	e := newEnv(newNode(idA), pod(idA, "apps", "web-1"))
	e.ec2.readings[idA] = []reading{{state: instance.StateRunning, tagged: true}}
	waitingGroup(e.asg, idA)
	timeout := sweepPathFloor - 500*time.Millisecond
	out, err := e.handle(t, sweepEvent(), timeout)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Sweep.Hooks) != 0 || len(e.asg.completed) != 0 || !e.podExists("apps", "web-1") {
		t.Errorf("hooks %v completed %v: want nothing started with %s of budget", out.Sweep.Hooks, e.asg.completed, timeout)
	}
	if w := e.writes(); len(w) != 0 {
		t.Errorf("writes %v, want none", w)
	}
	if !slices.ContainsFunc(out.Sweep.Notes, func(n string) bool { return strings.HasPrefix(n, idA+": left for the next sweep: budget spent") }) {
		t.Errorf("notes %q: want %s left for the next sweep", out.Sweep.Notes, idA)
	}
	// no invocation took it (no lease): not heartbeated, which would take it
	// on with nothing to carry it
	if e.asg.heartbeats != 0 {
		t.Errorf("%d heartbeats: a hook nobody took was heartbeated", e.asg.heartbeats)
	}
}

// TestSweepTakesInstanceOnTwoHooksOfOurs: an instance waiting on two hooks
// of ours on its transition (HOOK_NAMES beside TERMINATE_HOOK_NAME), its
// events lost, is drained under TERMINATE_HOOK_NAME, the other its sibling,
// both completed by instance; when TERMINATE_HOOK_NAME holds no action of
// it (put after the instance began to wait: a rename in flight), Auto
// Scaling's answer to a heartbeat says so, and the drain is under the
// other.
func TestSweepTakesInstanceOnTwoHooksOfOurs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inactive map[string]bool
		want     []string // the hooks completed, in order
	}{
		{"both hold it", nil, []string{"node-drainer-terminate", "legacy-terminate"}},
		{"only the other holds it", map[string]bool{"node-drainer-terminate": true}, []string{"legacy-terminate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(newNode(idA), pod(idA, "apps", "web-1"))
			e.ec2.readings[idA] = []reading{{state: instance.StateRunning, tagged: true}}
			e.cfg.HookNames = []string{"legacy-terminate"}
			waitingGroup(e.asg, idA)
			e.asg.hooks = append(e.asg.hooks, astypes.LifecycleHook{LifecycleHookName: aws.String("legacy-terminate"),
				LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(60)})
			e.asg.inactive = tc.inactive
			out, err := e.handle(t, sweepEvent(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(out.Sweep.Hooks, []string{idA}) || e.podExists("apps", "web-1") {
				t.Fatalf("sweep %+v, pod there %v: want %s's hook taken, its node drained", out.Sweep, e.podExists("apps", "web-1"), idA)
			}
			var got []string
			for _, c := range e.asg.completed {
				got = append(got, aws.ToString(c.LifecycleHookName))
				if c.LifecycleActionToken != nil || aws.ToString(c.InstanceId) != idA || aws.ToString(c.LifecycleActionResult) != "CONTINUE" {
					t.Errorf("completion %+v: want CONTINUE by instance %s", c, idA)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("completed %v, want %v", got, tc.want)
			}
			if beats := e.asg.beatsOf("legacy-terminate"); len(beats) == 0 {
				t.Error("the sibling was never heartbeated: its age unknown, it is heartbeated at once (rule 16, 17)")
			}
		})
	}
}

// TestKeepForNextSweepHeartbeatsEveryActionOfOurs: a hook left for the next
// sweep is heartbeated with the other hooks of ours that may hold the
// instance (a sibling on its transition, rule 17); one that holds no action
// of it is not a failure.
func TestKeepForNextSweepHeartbeatsEveryActionOfOurs(t *testing.T) {
	action := func(hook string) event.LifecycleAction {
		return event.LifecycleAction{AutoScalingGroupName: asgName, HookName: hook, InstanceID: idA, Transition: event.TransitionTerminating}
	}
	sib := sweep.Hook{Kind: event.KindTerminate, Action: action("legacy-terminate")}
	h := sweep.Hook{Kind: event.KindTerminate, Action: action("node-drainer-terminate"), Ask: true, Taken: true, Else: &sib}
	for _, tc := range []struct {
		name     string
		inactive map[string]bool
		note     string
	}{
		{"both hold it", nil, "heartbeated"},
		{"only the sibling holds it", map[string]bool{"node-drainer-terminate": true}, "heartbeated"},
		{"neither holds it", map[string]bool{"node-drainer-terminate": true, "legacy-terminate": true}, "found no action of ours"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv()
			e.asg.inactive = tc.inactive
			r := &sweeper{&invocation{h: e.handler(), log: slog.New(slog.DiscardHandler)}}
			note := r.keepForNextSweep(t.Context(), h)
			if !strings.Contains(note, tc.note) {
				t.Errorf("note %q, want it to say %q", note, tc.note)
			}
			for _, hook := range []string{"node-drainer-terminate", "legacy-terminate"} {
				if n := len(e.asg.beatsOf(hook)); n != 1 {
					t.Errorf("%s heartbeated %d times, want once", hook, n)
				}
			}
		})
	}
}
