package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
)

// The sweep's scenarios: what events missed, reconciled by the next
// scheduled invocation through the real bootstrap. Each scene is a cluster
// of its own for the sweep (its own cluster tag and ASG_NAMES), so a sweep
// never acts on another test's instances. Scene names start with "sw-".

func swScene(t *testing.T, ctx context.Context, name string, nodes int) *scene {
	t.Helper()
	return newScene(t, ctx, name, nodes, harness.ASGSpec{ClusterTag: swTag(name)})
}

func swTag(name string) string { return "kubernetes.io/cluster/" + name }

// sweepFn is the function as the scene's own cluster sees it.
func (s *scene) sweepFn(ctx context.Context, extra ...string) func() handler.Outcome {
	s.t.Helper()
	rt := s.function(ctx, 2*time.Minute, append([]string{"CLUSTER_TAG_KEY=" + swTag(s.name), "ASG_NAMES=" + s.asg}, extra...)...)
	return func() handler.Outcome {
		s.t.Helper()
		payload, err := harness.EventFile("sweep.json", nil)
		if err != nil {
			s.t.Fatal(err)
		}
		out, err := harness.Invoke(ctx, rt, payload)
		if err != nil {
			s.t.Fatalf("sweep: %v", err)
		}
		s.t.Logf("sweep: %s %+v", out.Detail, out.Sweep)
		if out.Action != handler.ActionSwept || out.Sweep == nil {
			s.t.Fatalf("sweep outcome %+v: want swept with a summary", out)
		}
		return out
	}
}

// TestSweepCompletesForgottenHook: the ASG holds an instance in
// Terminating:Wait, and its event never reached the function. The next
// sweep drains the node and completes the hook by instance id.
func TestSweepCompletesForgottenHook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := swScene(t, ctx, "sw-hook", 2)
	target := s.insts[0]
	s.grPlacePods(ctx, target, "web", 2)
	if _, err := env.StartTerminating(ctx, s.asg, target, "token-never-sent"); err != nil {
		t.Fatal(err)
	}
	sweep := s.sweepFn(ctx)
	out := sweep()
	if !slices.Contains(out.Sweep.Hooks, target.ID) {
		t.Fatalf("hooks handled %v: want %s", out.Sweep.Hooks, target.ID)
	}
	ok, failed := s.completions(ctx, target.ID)
	if len(ok) != 1 || ok[0].Params["LifecycleActionResult"] != "CONTINUE" || ok[0].Params["LifecycleActionToken"] != "" || len(failed) != 0 {
		t.Fatalf("completions %+v (failed %+v): want one CONTINUE by instance id", ok, failed)
	}
	pods, err := env.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + target.PrivateDNSName})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods left on the node: it was completed undrained", len(pods.Items))
	}
	// the next sweep finds nothing waiting
	if again := sweep(); len(again.Sweep.Hooks) != 0 {
		t.Errorf("second sweep handled hooks %v again", again.Sweep.Hooks)
	}
}

// TestSweepReleasesStoppedNode: the instance stopped with an RWO pod on it
// and no event came. The next sweep releases the node (all the abrupt
// path's guards) and the pod runs elsewhere with its volume.
func TestSweepReleasesStoppedNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, target, pv := statefulSceneOf(t, ctx, "sw-dead", harness.ASGSpec{ClusterTag: swTag("sw-dead")})
	if err := env.StopKubelet(ctx, target.PrivateDNSName); err != nil {
		t.Fatal(err)
	}
	if err := env.SetInstanceState(ctx, target.ID, "stopped"); err != nil {
		t.Fatal(err)
	}
	out := s.sweepFn(ctx)()
	if !slices.Contains(out.Sweep.Dead, target.ID) {
		t.Fatalf("dead nodes released %v: want %s", out.Sweep.Dead, target.ID)
	}
	where := waitFailover(t, ctx, s, target.PrivateDNSName, pv, time.Minute)
	t.Logf("db-0 runs on %s with its volume", where)
	if len(s.nodeEvents(ctx, target.PrivateDNSName, node.ReasonOutOfService)) == 0 {
		t.Errorf("no %s event with the evidence", node.ReasonOutOfService)
	}
}

// TestSweepLiftsLapsedCordonOnly: a rebalance cordon whose window passed on
// a running instance is lifted; an operator's cordon is not.
func TestSweepLiftsLapsedCordonOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := swScene(t, ctx, "sw-marks", 2)
	ours, operators := s.insts[0], s.insts[1]
	now := time.Now()
	if _, err := node.ApplyTo(ctx, env.Client, getNode(t, ctx, ours.PrivateDNSName), node.Mark{Cause: node.CauseRebalance, Cordon: true, Expires: now.Add(-time.Minute)}, now.Add(-2*time.Hour), false); err != nil {
		t.Fatal(err)
	}
	if err := env.SetUnschedulable(ctx, operators.PrivateDNSName, true); err != nil {
		t.Fatal(err)
	}
	out := s.sweepFn(ctx)()
	if !slices.Equal(out.Sweep.Unmarked, []string{ours.ID}) {
		t.Errorf("unmarked %v: want only %s", out.Sweep.Unmarked, ours.ID)
	}
	if n := getNode(t, ctx, ours.PrivateDNSName); n.Spec.Unschedulable || node.Holds(n, node.CauseRebalance) {
		t.Errorf("the lapsed rebalance cordon stayed: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
	if n := getNode(t, ctx, operators.PrivateDNSName); !n.Spec.Unschedulable {
		t.Error("the operator's cordon was lifted")
	}
}

// TestSweepDeletesOrphanedAttachment: an attachment to a node the cluster
// no longer has, whose instance EC2 does not list, is deleted; one to a
// missing node whose instance still runs is kept.
func TestSweepDeletesOrphanedAttachment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := swScene(t, ctx, "sw-orphan", 1)
	// an instance of the group whose node has not joined (or was deleted)
	bare, err := env.CreateASG(ctx, harness.ASGSpec{Name: "sw-orphan-bare", Size: 1, ClusterTag: swTag(s.name)})
	if err != nil {
		t.Fatal(err)
	}
	orphan := swAttachment(t, ctx, "sw-orphan-gone", "ip-10-250-7-7.ec2.internal")
	kept := swAttachment(t, ctx, "sw-orphan-running", bare[0].PrivateDNSName)
	out := s.sweepFn(ctx)()
	if !slices.Equal(out.Sweep.Orphans, []string{orphan.Name}) {
		t.Errorf("orphans deleted %v: want only %s", out.Sweep.Orphans, orphan.Name)
	}
	got, err := env.Client.StorageV1().VolumeAttachments().Get(ctx, orphan.Name, metav1.GetOptions{})
	if err == nil && got.DeletionTimestamp == nil {
		t.Errorf("attachment %s still there", orphan.Name)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if _, err := env.Client.StorageV1().VolumeAttachments().Get(ctx, kept.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("attachment to a running instance's node: %v (want kept)", err)
	}
}

func swAttachment(t *testing.T, ctx context.Context, name, nodeName string) *storagev1.VolumeAttachment {
	t.Helper()
	pv := "pv-" + name
	va, err := env.Client.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "ebs.csi.aws.com", NodeName: nodeName,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.StorageV1().VolumeAttachments().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return va
}

// TestSweepZombieNode: a node NotReady while EC2 says its instance runs is
// reported by default; with ZOMBIE_ACTION=replace its instance is marked
// Unhealthy in its ASG (which replaces it through the terminate hook).
func TestSweepZombieNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := swScene(t, ctx, "sw-zombie", 1)
	target := s.insts[0]
	if err := env.StopKubelet(ctx, target.PrivateDNSName); err != nil {
		t.Fatal(err)
	}
	if err := env.WaitNodeReady(ctx, target.PrivateDNSName, false, time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // NotReady for longer than ZOMBIE_AFTER
	out := s.sweepFn(ctx, "ZOMBIE_AFTER=1s")()
	if !slices.Equal(out.Sweep.Zombies, []string{target.PrivateDNSName}) || len(out.Sweep.Replaced) != 0 {
		t.Errorf("zombies %v replaced %v: want %s reported only", out.Sweep.Zombies, out.Sweep.Replaced, target.PrivateDNSName)
	}
	if len(s.nodeEvents(ctx, target.PrivateDNSName, node.ReasonZombie)) == 0 {
		t.Errorf("no %s event on the node", node.ReasonZombie)
	}
	if h := swHealth(t, ctx, target.ID); h != "HEALTHY" && h != "Healthy" {
		t.Errorf("health %q after a report-only sweep", h)
	}
	out = s.sweepFn(ctx, "ZOMBIE_AFTER=1s", "ZOMBIE_ACTION=replace")()
	if !slices.Equal(out.Sweep.Replaced, []string{target.ID}) {
		t.Errorf("replaced %v: want %s", out.Sweep.Replaced, target.ID)
	}
	if h := swHealth(t, ctx, target.ID); h != "UNHEALTHY" && h != "Unhealthy" {
		t.Errorf("health %q: want Unhealthy recorded by the emulator", h)
	}
}

func swHealth(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	out, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: []string{id}})
	if err != nil || len(out.AutoScalingInstances) != 1 {
		t.Fatalf("describing %s: %v", id, err)
	}
	return *out.AutoScalingInstances[0].HealthStatus
}

// TestSweepApiserverFailingChangesNothing: the apiserver fails every
// VolumeAttachment list during the sweep (after the nodes were listed):
// the sweep acts on nothing — not the stopped node, not the waiting hook —
// and says so; once the apiserver answers, the next sweep does both.
func TestSweepApiserverFailingChangesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := swScene(t, ctx, "sw-fail", 3)
	hooked, dead := s.insts[0], s.insts[1]
	s.grPlacePods(ctx, dead, "web", 1)
	if _, err := env.StartTerminating(ctx, s.asg, hooked, "token-fail"); err != nil {
		t.Fatal(err)
	}
	if err := env.StopKubelet(ctx, dead.PrivateDNSName); err != nil {
		t.Fatal(err)
	}
	if err := env.SetInstanceState(ctx, dead.ID, "stopped"); err != nil {
		t.Fatal(err)
	}
	api := recordingProxy(t)
	failing := api.Add(fp.Rule{Name: "va-list-fails", Method: http.MethodGet, Path: regexp.MustCompile(`/volumeattachments$`), Fault: fp.ServerError})
	rt := s.function(ctx, 2*time.Minute, "CLUSTER_ENDPOINT="+api.URL, "CLUSTER_TAG_KEY="+swTag(s.name), "ASG_NAMES="+s.asg)
	payload, err := harness.EventFile("sweep.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := rt.Invoke(ctx, payload)
	if err != nil {
		t.Fatal(err)
	}
	if res.FunctionError == "" {
		t.Fatalf("sweep with the apiserver failing: %s, want a function error", res.Payload)
	}
	t.Logf("sweep failed as it must: %s (%d faulted lists)", res.Payload, failing.Hits())
	if failing.Hits() == 0 {
		t.Fatal("the fault never fired: the scenario shows nothing")
	}
	for _, r := range api.Requests() {
		if r.Method != http.MethodGet {
			t.Errorf("the sweep wrote with an incomplete reading: %s %s", r.Method, r.Path)
		}
	}
	if ok, _ := s.completions(ctx, hooked.ID); len(ok) != 0 {
		t.Errorf("hook completed on an incomplete reading: %+v", ok)
	}
	if n := getNode(t, ctx, dead.PrivateDNSName); node.Holds(n, node.CauseOutOfService) || n.Spec.Unschedulable {
		t.Error("the stopped node was marked on an incomplete reading")
	}

	// the apiserver answers again: the next sweep does what it must
	failing.End()
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(fmt.Errorf("sweep after recovery: %w", err))
	}
	if !slices.Contains(out.Sweep.Hooks, hooked.ID) || !slices.Contains(out.Sweep.Dead, dead.ID) {
		t.Errorf("after recovery: hooks %v dead %v, want %s and %s", out.Sweep.Hooks, out.Sweep.Dead, hooked.ID, dead.ID)
	}
}
