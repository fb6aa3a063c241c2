package handler

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
)

// heldLease is a lease of that name another live invocation holds.
func heldLease(name string) *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "node-drainer", Labels: map[string]string{"app.kubernetes.io/name": "node-drainer"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("another-invocation"), LeaseDurationSeconds: ptr.To(int32(60)),
			AcquireTime: &now, RenewTime: &now},
	}
}

// A spot warning delivered twice while its drain runs is drained once: the
// copy finds the warning's lease held and does nothing.
func TestSpotWarningDuplicateWhileDraining(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(append(aNode(), heldLease(lease.AdvisoryName(string(event.KindSpotInterruption), idA)))...)
		e.ec2.readings[idA] = []reading{running}
		out, err := e.handle(t, spotEvent(idA, time.Now()), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if out.Action != ActionIgnored || len(e.evicted) != 0 {
			t.Errorf("outcome %+v, evicted %v: want the copy ignored, nothing evicted", out, e.evicted)
		}
	})
}

// A spot warning drained to the end records its event as done: a late copy
// of it does nothing, and the lease is free for the next warning.
func TestSpotWarningDoneOnce(t *testing.T) {
	e := newEnv(aNode()...)
	e.ec2.readings[idA] = []reading{running}
	payload := spotEvent(idA, time.Now())
	if out, err := e.handle(t, payload, 2*time.Second); err != nil || out.Action != ActionDrained {
		t.Fatalf("outcome %+v, error %v: want drained", out, err)
	}
	l, err := e.kube.CoordinationV1().Leases("node-drainer").Get(context.Background(), lease.AdvisoryName(string(event.KindSpotInterruption), idA), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity != nil || l.Annotations[lease.AnnotationDone] != "ev-1" {
		t.Errorf("lease holder %v, annotations %v: want released, ev-1 done", ptr.Deref(l.Spec.HolderIdentity, ""), l.Annotations)
	}
	evicted := len(e.evicted)
	out, err := e.handle(t, payload, 2*time.Second)
	if err != nil || out.Action != ActionIgnored || len(e.evicted) != evicted {
		t.Errorf("late copy: outcome %+v, error %v, evicted %v: want ignored, nothing more evicted", out, err, e.evicted)
	}
}

// The terminate hook that follows a spot warning (or a rebalance drain) is
// not taken for a duplicate while the warning's drain holds its lease: it
// drains and completes the hook.
func TestTerminateWhileAdvisoryDrainHolds(t *testing.T) {
	e := newEnv(append(aNode(),
		heldLease(lease.AdvisoryName(string(event.KindSpotInterruption), idA)),
		heldLease(lease.AdvisoryName(string(event.KindRebalance), idA)))...)
	e.ec2.readings[idA] = []reading{running}
	out, err := e.handle(t, terminateEvent(idA), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out.Action != ActionDrained || out.LifecycleResult != string(lifecycle.Continue) || len(e.evicted) != 2 {
		t.Errorf("outcome %+v, evicted %v: want drained and completed", out, e.evicted)
	}
	if r := e.asg.results(); len(r) != 1 || r[0] != lifecycle.Continue {
		t.Errorf("hook results %v: want CONTINUE", r)
	}
}

// A spot warning arriving while a rebalance recommendation's drain holds
// the instance is not a duplicate: it drains, within its own notice.
func TestSpotWarningDuringRebalanceDrain(t *testing.T) {
	e := newEnv(append(aNode(), heldLease(lease.AdvisoryName(string(event.KindRebalance), idA)))...)
	e.ec2.readings[idA] = []reading{running}
	out, err := e.handle(t, spotEvent(idA, time.Now()), 2*time.Second)
	if err != nil || out.Action != ActionDrained || len(e.evicted) != 2 {
		t.Errorf("outcome %+v, error %v, evicted %v: want drained", out, err, e.evicted)
	}
}

// An advisory drain that ends at its deadline with pods left says so: its
// outcome is drain-unfinished, with what remains, never "drained".
func TestAdvisoryDrainUnfinishedIsNotDrained(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload func() []byte
	}{
		{"spot warning", func() []byte { return spotEvent(idA, time.Now()) }},
		{"capacity reservation warning", func() []byte {
			return capacityInterruptionEvent(idA, time.Now(), time.Now().Add(2*time.Minute))
		}},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv(aNode()...)
			e.ec2.readings[idA] = []reading{running}
			e.blocked = []string{"db-0"}
			out, err := e.handle(t, tc.payload(), 3*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if out.Action != ActionUnfinished || len(out.Remaining) != 1 {
				t.Errorf("outcome %s, remaining %v (%s): want %s, db-0 left", out.Action, out.Remaining, out.Detail, ActionUnfinished)
			}
		}))
	}
}
