package node

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
)

func kubeletReady(n *corev1.Node) {
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"})
}

// conditionsOf maps the node's conditions' types to status/reason.
func conditionsOf(t *testing.T, c *fake.Clientset) map[corev1.NodeConditionType]string {
	t.Helper()
	out := map[corev1.NodeConditionType]string{}
	for _, cd := range get(t, c, nodeName).Status.Conditions {
		out[cd.Type] = string(cd.Status) + "/" + cd.Reason
	}
	return out
}

// The drain's conditions (KEP-5683's DrainInProgress and Drained) are
// node-drainer's when its mark takes them, are written on the status by a
// strategic-merge patch of the status subresource that leaves the kubelet's
// Ready as it is, and go with node-drainer's last mark on the node.
func TestDrainConditionsOwnedAndRemovedWithTheMarks(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	c := fake.NewClientset(newNode(nodeName, "", kubeletReady))
	clustertest.KeepNodeStatus(c)
	m := drainMark
	m.Conditions = true
	made, err := ApplyTo(ctx, c, get(t, c, nodeName), m, now, false)
	if err != nil || !made.Conditions {
		t.Fatalf("ApplyTo = %+v, %v: want the conditions taken as ours", made, err)
	}
	if s := marksOf(t, c); !s.Owned.Conditions || !s.Causes[CauseTerminate].Wants.Conditions {
		t.Fatalf("marks %+v: want the conditions owned and wanted by the terminate hold", s)
	}
	if err := SetDrainConditions(ctx, c, nodeName, PhaseDraining, CauseTerminate, now, false); err != nil {
		t.Fatal(err)
	}
	want := map[corev1.NodeConditionType]string{corev1.NodeReady: "True/KubeletReady", ConditionDrainInProgress: "True/" + ReasonDraining, ConditionDrained: "False/" + ReasonDraining}
	if got := conditionsOf(t, c); !equalMaps(got, want) {
		t.Fatalf("draining: conditions %v, want %v", got, want)
	}
	if !InPhase(get(t, c, nodeName), PhaseDraining) || InPhase(get(t, c, nodeName), PhaseDrained) {
		t.Fatal("InPhase does not tell the phase the node shows")
	}
	if err := SetDrainConditions(ctx, c, nodeName, PhaseDrained, CauseTerminate, now.Add(time.Minute), false); err != nil {
		t.Fatal(err)
	}
	want[ConditionDrainInProgress], want[ConditionDrained] = "False/"+ReasonDrained, "True/"+ReasonDrained
	if got := conditionsOf(t, c); !equalMaps(got, want) {
		t.Fatalf("drained: conditions %v, want %v", got, want)
	}
	for _, a := range c.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetSubresource() != "status" {
			t.Errorf("a patch of the node's %q, want its status subresource", p.GetSubresource())
		}
	}
	undone, err := Release(ctx, c, nodeName, CauseTerminate, now.Add(2*time.Minute), false)
	if err != nil || !undone.Conditions {
		t.Fatalf("Release = %+v, %v: want the conditions undone", undone, err)
	}
	if got := conditionsOf(t, c); !equalMaps(got, map[corev1.NodeConditionType]string{corev1.NodeReady: "True/KubeletReady"}) {
		t.Fatalf("released: conditions %v, want the kubelet's Ready alone", got)
	}
}

// Another writer's drain condition (kubectl drain's, under KEP-5683) is
// not node-drainer's: not taken, not removed with node-drainer's marks.
func TestDrainConditionsOfAnotherWriterStay(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	theirs := func(n *corev1.Node) {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: ConditionDrainInProgress, Status: corev1.ConditionTrue, Reason: "KubectlDrain"})
	}
	c := fake.NewClientset(newNode(nodeName, "", kubeletReady, theirs))
	m := drainMark
	m.Conditions = true
	made, err := ApplyTo(ctx, c, get(t, c, nodeName), m, now, false)
	if err != nil || made.Conditions {
		t.Fatalf("ApplyTo = %+v, %v: another writer's condition taken as ours", made, err)
	}
	undone, err := Release(ctx, c, nodeName, CauseTerminate, now, false)
	if err != nil || undone.Conditions {
		t.Fatalf("Release = %+v, %v", undone, err)
	}
	if got := conditionsOf(t, c)[ConditionDrainInProgress]; got != "True/KubectlDrain" {
		t.Fatalf("another writer's DrainInProgress is %q after our release, want it as it was", got)
	}
}

// A batch cordon (BATCH_CORDON) is a cordon alone, held until it expires:
// the release of expired causes (the sweep's, the next event's) lifts it,
// and a terminate hold placed meanwhile keeps the cordon.
func TestBatchCordonLapses(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	for _, drained := range []bool{false, true} {
		c := fake.NewClientset(newNode(nodeName, ""))
		made, err := ApplyTo(ctx, c, get(t, c, nodeName), Mark{Cause: CauseBatch, Cordon: true, Expires: now.Add(time.Hour)}, now, false)
		if err != nil || made != (Changes{Cordoned: true}) {
			t.Fatalf("batch cordon = %+v, %v: want the cordon alone", made, err)
		}
		if drained {
			if _, err := ApplyTo(ctx, c, get(t, c, nodeName), drainMark, now, false); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := Release(ctx, c, nodeName, "", now.Add(30*time.Minute), false); err != nil {
			t.Fatal(err)
		}
		if !get(t, c, nodeName).Spec.Unschedulable || !Holds(get(t, c, nodeName), CauseBatch) {
			t.Fatal("the batch cordon lifted before it expired")
		}
		if _, err := Release(ctx, c, nodeName, "", now.Add(time.Hour), false); err != nil {
			t.Fatal(err)
		}
		if got := get(t, c, nodeName).Spec.Unschedulable; got != drained || Holds(get(t, c, nodeName), CauseBatch) {
			t.Fatalf("drain hold %v: cordoned %v after the batch cordon expired, want %v", drained, got, drained)
		}
	}
}

func equalMaps(a, b map[corev1.NodeConditionType]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A batch cordon (IfSchedulable) writes only a node not cordoned yet: one
// cordoned by another writer between the read and the write (a conflict,
// read again) is left as it is, not written again.
func TestIfSchedulableLeavesACordonedNode(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	c := fake.NewClientset(newNode(nodeName, ""))
	read := get(t, c, nodeName)
	read.ResourceVersion = "1"
	other := read.DeepCopy()
	other.Spec.Unschedulable = true
	if _, err := c.CoreV1().Nodes().Update(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	conflicted := false
	c.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if n := a.(k8stesting.UpdateAction).GetObject().(*corev1.Node); n.ResourceVersion == "1" && !conflicted {
			conflicted = true
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, n.Name, errors.New("changed"))
		}
		return false, nil, nil
	})
	before := writes(c)
	made, err := ApplyTo(ctx, c, read, Mark{Cause: CauseBatch, Cordon: true, Expires: now.Add(time.Hour), IfSchedulable: true}, now, false)
	if err != nil || made.Any() {
		t.Fatalf("ApplyTo = %+v, %v: want nothing made", made, err)
	}
	if w := writes(c) - before; w != 1 || Holds(get(t, c, nodeName), CauseBatch) {
		t.Errorf("%d writes (the one that met the conflict, want it alone); held for the batch: %v", w, Holds(get(t, c, nodeName), CauseBatch))
	}
}

// The drain's conditions go with the marks whatever the apiserver answered
// (found by the simulation's P3, seed 231): an unmark whose update was done
// but whose answer was lost (a timeout, retried: the node read again shows
// no mark, so nothing recorded the conditions as ours any more), and a
// removal of the conditions refused once (the next release finds the
// marks, and the record, still there).
func TestDrainConditionsRemovedWhateverTheAnswer(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	marked := func(t *testing.T) *fake.Clientset {
		ctx := context.Background()
		c := fake.NewClientset(newNode(nodeName, "", kubeletReady))
		m := drainMark
		m.Conditions = true
		if _, err := ApplyTo(ctx, c, get(t, c, nodeName), m, now, false); err != nil {
			t.Fatal(err)
		}
		if err := SetDrainConditions(ctx, c, nodeName, PhaseDrained, CauseTerminate, now, false); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ready := map[corev1.NodeConditionType]string{corev1.NodeReady: "True/KubeletReady"}
	t.Run("the unmark's answer lost", clustertest.InBubble(func(t *testing.T) {
		c := marked(t)
		lost := false
		c.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if lost {
				return false, nil, nil
			}
			lost = true
			if err := c.Tracker().Update(a.GetResource(), a.(k8stesting.UpdateAction).GetObject(), ""); err != nil {
				t.Fatal(err)
			}
			return true, nil, apierrors.NewServerTimeout(schema.GroupResource{Resource: "nodes"}, "update", 1)
		})
		clustertest.KeepNodeStatus(c)
		if _, err := Release(context.Background(), c, nodeName, CauseTerminate, now.Add(time.Minute), false); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if _, ok := Marks(get(t, c, nodeName)); ok {
			t.Fatal("the marks are still there")
		}
		if got := conditionsOf(t, c); !equalMaps(got, ready) {
			t.Fatalf("conditions %v after the marks went, want the kubelet's Ready alone", got)
		}
	}))
	t.Run("the conditions' removal refused once", clustertest.InBubble(func(t *testing.T) {
		c := marked(t)
		refused := false
		c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if refused || a.GetSubresource() != "status" {
				return false, nil, nil
			}
			refused = true
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes/status"}, nodeName, errors.New("denied once"))
		})
		clustertest.KeepNodeStatus(c)
		if _, err := Release(context.Background(), c, nodeName, CauseTerminate, now.Add(time.Minute), false); err == nil {
			t.Fatal("Release refused its conditions' removal: want an error")
		}
		if _, err := Release(context.Background(), c, nodeName, CauseTerminate, now.Add(2*time.Minute), false); err != nil {
			t.Fatalf("Release again: %v", err)
		}
		if _, ok := Marks(get(t, c, nodeName)); ok {
			t.Fatal("the marks are still there")
		}
		if got := conditionsOf(t, c); !equalMaps(got, ready) {
			t.Fatalf("conditions %v after the second release, want the kubelet's Ready alone", got)
		}
	}))
}
