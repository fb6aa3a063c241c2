package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
)

// TestGracefulCapacityInterruption: an interruptible Capacity Reservation's
// warning drains the node as a spot warning does (no hook to complete),
// for its own cause, until what SPOT_DRAIN_TIMEOUT leaves before EC2's
// termination time; the pods move elsewhere.
func TestGracefulCapacityInterruption(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "gr-capacity", 2, harness.ASGSpec{})
	target := s.insts[0]
	pods := s.grPlacePods(ctx, target, "web", 2)
	terminates := time.Now().Add(2 * time.Minute).UTC().Format(time.RFC3339)
	payload, err := harness.EventFile("capacity-reservation-interruption.json", map[string]string{
		"instance-id": target.ID, "instance-termination-time": terminates})
	if err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute)
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome: %+v", out)
	if out.Action != "drained" || out.Node != target.PrivateDNSName || len(out.Remaining) != 0 ||
		!strings.Contains(out.Detail, "EC2 takes the instance at "+terminates) {
		t.Errorf("outcome %+v: want drained, node %s, nothing remaining, the termination time said", out, target.PrivateDNSName)
	}
	for _, p := range pods {
		if !slices.Contains(out.Evicted, p.Namespace+"/"+p.Name) {
			t.Errorf("outcome does not list %s/%s as evicted: %v", p.Namespace, p.Name, out.Evicted)
		}
		got, err := env.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err == nil && got.UID == p.UID {
			t.Errorf("pod %s still exists (deleting=%v)", p.Name, got.DeletionTimestamp != nil)
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	n := grGetNode(t, ctx, target.PrivateDNSName)
	if !n.Spec.Unschedulable || !node.HasTaint(n, node.TaintDraining) || !node.Holds(n, node.CauseCapacityInterruption) {
		t.Errorf("node not cordoned, tainted and held for the reservation's warning: unschedulable=%v taints=%v annotation=%s",
			n.Spec.Unschedulable, n.Spec.Taints, n.Annotations[node.AnnotationOwned])
	}
	s.grNoLifecycleCalls(ctx, target.ID)
	moved, err := env.WaitPodsRunning(ctx, s.ns, "app=web", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range moved {
		if p.Spec.NodeName == target.PrivateDNSName {
			t.Errorf("replacement pod %s scheduled on the drained node", p.Name)
		}
	}
}

// TestGracefulCapacityBlock: a Capacity Block's warning names its
// reservation, no instance. The function finds the block's instances of
// this cluster (its group's two, launched into the reservation), fans out
// one asynchronous invocation each, and each drains its node for the
// block; an instance of this cluster outside the block is left alone.
func TestGracefulCapacityBlock(t *testing.T) {
	const cr = "cr-0d4b8f2a6c1e9e357"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "gr-block", 2, harness.ASGSpec{CapacityReservation: cr})
	outside := newScene(t, ctx, "gr-block-out", 1, harness.ASGSpec{})
	var pods []corev1.Pod
	for i, inst := range s.insts {
		pods = append(pods, s.grPlacePods(ctx, inst, fmt.Sprintf("web-%d", i), 1)...)
	}
	stays := outside.grPlacePods(ctx, outside.insts[0], "web", 1)
	payload, err := harness.EventFile("capacity-block-expiration.json", map[string]string{
		"capacity-reservation-id": cr, "end-date": time.Now().Add(40 * time.Minute).UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute)
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome: %+v", out)
	if out.Action != "fanned-out" {
		t.Fatalf("outcome %+v: want fanned out, one invocation per instance of the block", out)
	}
	if err := rt.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	drained := map[string]bool{}
	for _, inv := range rt.Invocations() {
		if !inv.Async {
			continue
		}
		var o struct{ Action, Instance string }
		if err := json.Unmarshal(inv.Response, &o); err != nil || !inv.OK() {
			t.Errorf("invocation %s: %s %s %s", inv.RequestID, inv.Response, inv.ErrorType, inv.Error)
		}
		drained[o.Instance] = o.Action == "drained"
	}
	for _, inst := range s.insts {
		if !drained[inst.ID] {
			t.Errorf("instance %s of the block not drained by its invocation: %v", inst.ID, drained)
		}
		n := grGetNode(t, ctx, inst.PrivateDNSName)
		if !n.Spec.Unschedulable || !node.HasTaint(n, node.TaintDraining) || !node.Holds(n, node.CauseCapacityBlock) {
			t.Errorf("node %s not cordoned, tainted and held for the block: unschedulable=%v annotation=%s",
				n.Name, n.Spec.Unschedulable, n.Annotations[node.AnnotationOwned])
		}
	}
	if len(drained) != len(s.insts) {
		t.Errorf("invocations for %v, want one for each of the block's %d instances", drained, len(s.insts))
	}
	for _, p := range pods {
		got, err := env.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err == nil && got.UID == p.UID && got.DeletionTimestamp == nil {
			t.Errorf("pod %s of the block's nodes not evicted", p.Name)
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	n := grGetNode(t, ctx, outside.insts[0].PrivateDNSName)
	if n.Spec.Unschedulable || len(n.Annotations[node.AnnotationOwned]) > 0 {
		t.Errorf("node %s outside the block touched: unschedulable=%v annotation=%s", n.Name, n.Spec.Unschedulable, n.Annotations[node.AnnotationOwned])
	}
	for _, p := range stays {
		if got, err := env.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err != nil || got.UID != p.UID || got.DeletionTimestamp != nil {
			t.Errorf("pod %s outside the block went: %v", p.Name, err)
		}
	}
}
