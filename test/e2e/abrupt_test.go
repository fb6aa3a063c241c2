package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/volume"
	"github.com/node-drainer/node-drainer/test/harness"
)

// statefulScene is a scene whose target node runs a StatefulSet pod with an
// RWO CSI volume (attached), the others being free to take it over.
func statefulScene(t *testing.T, ctx context.Context, name string) (*scene, harness.Instance, string) {
	t.Helper()
	return statefulSceneOf(t, ctx, name, harness.ASGSpec{})
}

// statefulSceneOf is statefulScene for a group of that spec (its name and
// size are the scene's).
func statefulSceneOf(t *testing.T, ctx context.Context, name string, spec harness.ASGSpec) (*scene, harness.Instance, string) {
	t.Helper()
	s := newScene(t, ctx, name, 2, spec)
	target := s.insts[0]
	var pv string
	s.onlyOn(ctx, target, func() {
		var err error
		if pv, err = env.StatefulSet(ctx, s.workload("db", 1), harness.Zone); err != nil {
			t.Fatal(err)
		}
		if _, err := env.WaitPodsRunning(ctx, s.ns, "app=db", 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	waitAttached(t, ctx, s.ns, "db-0", pv)
	return s, target, pv
}

func stateEvent(t *testing.T, id, state string) []byte {
	t.Helper()
	b, err := harness.StateChangeEvent(id, state)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func getNode(t *testing.T, ctx context.Context, name string) *corev1.Node {
	t.Helper()
	n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFailover waits until the StatefulSet pod runs on another node than
// dead with its volume attached there, and returns that node.
func waitFailover(t *testing.T, ctx context.Context, s *scene, dead, pv string, timeout time.Duration) string {
	t.Helper()
	var where string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		attached, n, _ := env.PodVolumeAttached(ctx, s.ns, "db-0", pv)
		where = n
		return attached && n != dead, nil
	})
	if err != nil {
		dumpState(t, s.ns)
		t.Fatalf("StatefulSet pod not running elsewhere with its volume attached within %s: %v", timeout, err)
	}
	return where
}

// TestAbruptStopReleasesVolume: the instance is stopped in EC2 and its
// kubelet dies; on the state-change event the StatefulSet pod runs on
// another node with its volume attached, in seconds. A duplicate and a stale
// "running" event change nothing more; a real restart undoes only our marks.
func TestAbruptStopReleasesVolume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, target, pv := statefulScene(t, ctx, "abrupt")
	// someone else's taint, to be kept when we undo ours
	// (TaintNode retries a conflict with the node's own updates)
	if err := env.TaintNode(ctx, target.PrivateDNSName, corev1.Taint{Key: "example.com/maintenance", Value: "ops", Effect: corev1.TaintEffectPreferNoSchedule}); err != nil {
		t.Fatal(err)
	}
	if err := env.SetInstanceState(ctx, target.ID, "stopped"); err != nil {
		t.Fatal(err)
	}
	if err := env.StopKubelet(ctx, target.PrivateDNSName); err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute)
	stale := stateEvent(t, target.ID, "running") // sent before anything happened: older than our marks
	begin := time.Now()
	out, err := harness.Invoke(ctx, rt, stateEvent(t, target.ID, "stopped"))
	if err != nil {
		t.Fatal(err)
	}
	if out.Action != "released" || len(out.PodsDeleted) == 0 || len(out.AttachmentsDeleted) == 0 {
		t.Fatalf("outcome %+v: want released with pods and attachments deleted", out)
	}
	where := waitFailover(t, ctx, s, target.PrivateDNSName, pv, 60*time.Second)
	t.Logf("failover to %s with volume attached %s after the event", where, time.Since(begin).Round(10*time.Millisecond))
	n := getNode(t, ctx, target.PrivateDNSName)
	if !n.Spec.Unschedulable || !node.HasTaint(n, node.TaintOutOfService) {
		t.Errorf("node not cordoned/out-of-service: %+v", n.Spec)
	}
	if len(s.nodeEvents(ctx, n.Name, node.ReasonOutOfService)) == 0 {
		t.Errorf("no %s event with the evidence", node.ReasonOutOfService)
	}

	// duplicate: nothing left to do, no error
	if out, err := harness.Invoke(ctx, rt, stateEvent(t, target.ID, "stopped")); err != nil || out.Action != "released" || len(out.PodsDeleted) != 0 {
		t.Errorf("duplicate stopped event: %+v, %v", out, err)
	}
	// stale running event (older than our marks), instance stopped: nothing undone
	if out, err := harness.Invoke(ctx, rt, stale); err != nil || out.Action != "ignored" {
		t.Errorf("stale running event: %+v, %v", out, err)
	}
	if n := getNode(t, ctx, target.PrivateDNSName); !node.HasTaint(n, node.TaintOutOfService) {
		t.Fatal("a stale running event removed the out-of-service taint")
	}

	// the instance comes back: our taint and cordon go, the other taint stays
	if err := env.SetInstanceState(ctx, target.ID, "running"); err != nil {
		t.Fatal(err)
	}
	if err := env.StartKubelet(ctx, target.PrivateDNSName); err != nil {
		t.Fatal(err)
	}
	out, err = harness.Invoke(ctx, rt, stateEvent(t, target.ID, "running"))
	if err != nil || out.Action != "recovered" {
		t.Fatalf("running event: %+v, %v", out, err)
	}
	n = getNode(t, ctx, target.PrivateDNSName)
	if n.Spec.Unschedulable || node.HasTaint(n, node.TaintOutOfService) || !node.HasTaint(n, "example.com/maintenance") {
		t.Errorf("after recovery: unschedulable=%v taints=%v; want ours removed, the other kept", n.Spec.Unschedulable, n.Spec.Taints)
	}
	if _, ok := n.Annotations[node.AnnotationOwned]; ok {
		t.Errorf("ownership annotation left after recovery")
	}
}

// TestAbruptRunningInstanceNotForced: the kubelet is unreachable but EC2 says
// the instance runs (a network split), and an event claims it stopped:
// nothing is forced, an Event says why.
func TestAbruptRunningInstanceNotForced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, target, pv := statefulScene(t, ctx, "split")
	if err := env.StopKubelet(ctx, target.PrivateDNSName); err != nil {
		t.Fatal(err)
	}
	// the kubelet died seconds ago: its Lease counts as stale after 2 s here
	// (15 s by default), so the stop is acted on once EC2 confirms it
	rt := s.function(ctx, time.Minute, "STOPPING_WAIT_TIMEOUT=3s", "NODE_LEASE_STALE_AFTER=2s")
	for _, state := range []string{"stopped", "stopping", "terminated"} {
		out, err := harness.Invoke(ctx, rt, stateEvent(t, target.ID, state))
		if err != nil {
			t.Fatal(err)
		}
		if out.Action != "not-forced" {
			t.Errorf("%s event for a running instance: outcome %+v, want not-forced", state, out)
		}
	}
	n := getNode(t, ctx, target.PrivateDNSName)
	if n.Spec.Unschedulable || node.HasTaint(n, node.TaintOutOfService) {
		t.Errorf("node of a running instance changed: %+v", n.Spec)
	}
	pods, err := env.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != target.PrivateDNSName || pods.Items[0].DeletionTimestamp != nil {
		t.Errorf("StatefulSet pod touched: %+v %v", pods, err)
	}
	if !attachmentPresent(ctx, target.PrivateDNSName, pv) {
		t.Errorf("VolumeAttachment of a running instance deleted")
	}
	if len(s.nodeEvents(ctx, n.Name, node.ReasonNotForced)) == 0 {
		t.Errorf("no %s event saying why", node.ReasonNotForced)
	}

	// then EC2 confirms the stop: now it acts
	if err := env.SetInstanceState(ctx, target.ID, "stopped"); err != nil {
		t.Fatal(err)
	}
	out, err := harness.Invoke(ctx, rt, stateEvent(t, target.ID, "stopped"))
	if err != nil || out.Action != "released" {
		t.Fatalf("stopped after confirmation: %+v, %v", out, err)
	}
	waitFailover(t, ctx, s, target.PrivateDNSName, pv, 60*time.Second)
}

// TestAbruptForeignOrMalformedChangesNothing: a state change of another
// cluster's instance, and one without a state, touch nothing.
func TestAbruptForeignOrMalformedChangesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "foreign", 1, harness.ASGSpec{ClusterTag: "kubernetes.io/cluster/other"})
	target := s.insts[0]
	if err := env.SetInstanceState(ctx, target.ID, "stopped"); err != nil {
		t.Fatal(err)
	}
	before := getNode(t, ctx, target.PrivateDNSName)
	rt := s.function(ctx, time.Minute)
	out, err := harness.Invoke(ctx, rt, stateEvent(t, target.ID, "stopped"))
	if err != nil || out.Action != "ignored" {
		t.Errorf("foreign instance: %+v, %v", out, err)
	}
	var ev map[string]any
	if err := json.Unmarshal(stateEvent(t, target.ID, "stopped"), &ev); err != nil {
		t.Fatal(err)
	}
	delete(ev["detail"].(map[string]any), "state")
	noState, _ := json.Marshal(ev)
	if _, err := harness.Invoke(ctx, rt, noState); err == nil {
		t.Errorf("an event without state was accepted")
	}
	// what the function would have changed; the node controller may still be
	// lifting its own not-ready taint from the freshly registered node
	after := getNode(t, ctx, target.PrivateDNSName)
	_, marked := after.Annotations[node.AnnotationOwned]
	if after.Spec.Unschedulable != before.Spec.Unschedulable || marked ||
		node.HasTaint(after, node.TaintOutOfService) || node.HasTaint(after, node.TaintDraining) {
		t.Errorf("node changed: %+v -> %+v (annotations %v)", before.Spec, after.Spec, after.Annotations)
	}
}

// dumpState logs the scene's pods and all VolumeAttachments, for failures.
func dumpState(t *testing.T, ns string) {
	ctx := context.Background()
	pods, _ := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		t.Logf("pod %s node=%s phase=%s deleting=%v", p.Name, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil)
	}
	vas, _ := env.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	for _, va := range vas.Items {
		t.Logf("va %s node=%s pv=%v attached=%v deleting=%v finalizers=%v", va.Name, va.Spec.NodeName, *va.Spec.Source.PersistentVolumeName, va.Status.Attached, va.DeletionTimestamp != nil, va.Finalizers)
	}
	evs, _ := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	for _, e := range evs.Items {
		t.Logf("event %s/%s %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
}

// The force-release meets a pod changed since it read it. On a dead node the
// node controller marks the pods not Ready when the node turns NotReady,
// often in the very second the release begins; the apiserver then refuses
// the delete, whose resourceVersion precondition names the version read
// (409). The pod is read again and deleted at its new version: two deletes.
// Before RetryPinned the same stale delete was retried until the caller's
// deadline (a sweep's release held 13 minutes).
func TestForceReleaseRereadsAPodChangedMeanwhile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "changed-meanwhile", 1, harness.ASGSpec{})
	target := s.insts[0]
	p, err := env.BarePod(ctx, s.workload("lost", 1), target.PrivateDNSName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPodsRunning(ctx, s.ns, "app=lost", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	// kwok leaves the pod alone from here: only the test changes it (the
	// node controller would mark it not Ready 20 s later)
	if err := env.StopKubelet(ctx, target.PrivateDNSName); err != nil {
		t.Fatal(err)
	}
	api := recordingProxy(t)
	cfg := rest.CopyConfig(env.Admin)
	cfg.Host = api.URL
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	changed := false
	guard := func(ctx context.Context) error {
		if changed {
			return nil
		}
		changed = true // between the reading and the delete, as the node controller does
		// the guard runs beside the pods' list: change the pod once the list
		// is answered, so the delete carries the version the list read
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			for _, r := range api.Requests() {
				if r.Method == http.MethodGet && r.Path == "/api/v1/pods" {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return fmt.Errorf("the pods' list was not answered: %w", err)
		}
		cur, err := env.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Conditions = append(cur.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse,
			Reason: "NodeNotReady", LastTransitionTime: metav1.Now()})
		_, err = env.Client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	}
	rctx, rcancel := context.WithTimeout(ctx, 40*time.Second)
	defer rcancel()
	rel, err := volume.ForceRelease(rctx, kube, target.PrivateDNSName, false, volume.NewVerdict(guard))
	if err != nil || !slices.Equal(rel.PodsDeleted, []string{p.Namespace + "/" + p.Name}) {
		t.Fatalf("ForceRelease = %+v, %v; want %s/%s deleted", rel, err, p.Namespace, p.Name)
	}
	var deletes []int
	for _, r := range api.Requests() {
		if r.Method == http.MethodDelete && strings.HasSuffix(r.Path, "/pods/"+p.Name) {
			deletes = append(deletes, r.Status)
		}
	}
	if !slices.Equal(deletes, []int{http.StatusConflict, http.StatusOK}) {
		t.Errorf("deletes of the pod answered %v, want [409 200]: refused at the version read, done at the new one", deletes)
	}
	if _, err := env.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod still there: %v", err)
	}
}
