package handler

import (
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/node"
)

const (
	blockCR = "cr-0d4b8f2a6c1e9e357" // the Capacity Block that ends
	otherCR = "cr-0aaaaaaaaaaaaaaaa" // another reservation
	idC     = "i-0c0ffee0000000001"
	idD     = "i-0d15ea5e000000001"
)

func capacityInterruptionEvent(id string, at, terminates time.Time) []byte {
	detail := map[string]string{"instance-id": id, "instance-action": "terminate", "azId": "use1-az4"}
	if !terminates.IsZero() {
		detail["instance-termination-time"] = terminates.UTC().Format(time.RFC3339)
	}
	return envelope("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning", at, detail)
}

func capacityBlockEvent(cr string, at time.Time) []byte {
	return envelope("aws.ec2", "Capacity Block Expiration Warning", at, map[string]string{
		"capacity-reservation-id": cr, "end-date": at.Add(40 * time.Minute).UTC().Format(time.RFC3339)})
}

// inBlock is a running instance of this cluster in the Capacity Block.
var inBlock = reading{state: instance.StateRunning, tagged: true, cr: blockCR}

// An interruptible Capacity Reservation's warning drains the node as a spot
// warning does, for its own cause, and touches no hook; an instance of
// another cluster is left alone, one already down is released.
func TestCapacityInterruption(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ec2     reading
		action  Action
		evicted int
		cordon  bool
	}{
		{"drained", running, ActionDrained, 2, true},
		{"foreign instance", foreign, ActionIgnored, 0, false},
		{"instance already terminated: released", terminated, ActionReleased, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(aNode()...)
			e.ec2.readings[idA] = []reading{tc.ec2}
			out, err := e.handle(t, capacityInterruptionEvent(idA, time.Now(), time.Now().Add(2*time.Minute)), 2*time.Second)
			if err != nil || out.Action != tc.action || out.Event != event.KindCapacityInterruption {
				t.Fatalf("outcome %+v, error %v: want %s", out, err, tc.action)
			}
			n := e.node(t, idA)
			if len(e.evicted) != tc.evicted || n.Spec.Unschedulable != tc.cordon {
				t.Errorf("evicted %v, cordoned %v: want %d evicted, cordoned %v", e.evicted, n.Spec.Unschedulable, tc.evicted, tc.cordon)
			}
			if tc.action == ActionDrained && (!node.Holds(n, node.CauseCapacityInterruption) || !strings.Contains(out.Detail, "EC2 takes the instance at")) {
				t.Errorf("annotation %s, detail %q: want the node held for the capacity reservation's warning, the detail saying when EC2 takes it",
					n.Annotations[node.AnnotationOwned], out.Detail)
			}
			if len(e.asg.completed) != 0 || e.asg.heartbeats != 0 {
				t.Errorf("a capacity warning touched a hook: %v, %d heartbeats", e.asg.results(), e.asg.heartbeats)
			}
		})
	}
}

// The interruption's drain ends before EC2's termination time, by what
// SPOT_DRAIN_TIMEOUT leaves of the two-minute notice: a drain blocked by a
// PDB gives up then, not at its invocation's end.
func TestCapacityInterruptionDeadlineFromTerminationTime(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.ec2.readings[idA] = []reading{running}
		e.blocked = []string{"db-0"}
		now := time.Now()
		e.now = now
		// 100 s of SPOT_DRAIN_TIMEOUT leave 20 s of the notice: the drain ends 1 s from now
		terminates := now.Add(21 * time.Second)
		start := time.Now()
		out, err := e.handle(t, capacityInterruptionEvent(idA, now, terminates), 6*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("drain took %s: its deadline was not the termination time less 20 s", took)
		}
		if len(out.Remaining) != 1 || !strings.Contains(out.Detail, "drained until "+terminates.Add(-20*time.Second).UTC().Format(time.RFC3339)) {
			t.Errorf("remaining %v, detail %q: want db-0 left, the deadline 20 s before the termination", out.Remaining, out.Detail)
		}
	})
}

// The pods evicted on an interruption warning get at most
// SPOT_GRACE_PERIOD_CAP: the two-minute notice is the spot one.
func TestCapacityInterruptionCapsGrace(t *testing.T) {
	objs := aNode()
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(600))
		}
	}
	e := newEnv(objs...)
	e.cfg.SpotGracePeriodCap = 30 * time.Second
	e.ec2.readings[idA] = []reading{running}
	var mu sync.Mutex
	grace := map[string]int64{}
	e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if ev, ok := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction); ok && ev.DeleteOptions != nil {
			mu.Lock()
			grace[ev.Name] = ptr.Deref(ev.DeleteOptions.GracePeriodSeconds, -1)
			mu.Unlock()
		}
		return false, nil, nil
	})
	if out, err := e.handle(t, capacityInterruptionEvent(idA, time.Now(), time.Time{}), 2*time.Second); err != nil || out.Action != ActionDrained {
		t.Fatalf("outcome %+v, error %v: want drained", out, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(grace) != 2 {
		t.Fatalf("evictions %v: want both pods'", grace)
	}
	for name, g := range grace {
		if g < 1 || g > 30 {
			t.Errorf("%s evicted with a grace of %d s: want at most SPOT_GRACE_PERIOD_CAP (30 s)", name, g)
		}
	}
}

// graceCap: a warning's drain fits its notice; a hook's gives the pods'
// own grace.
func TestGraceCap(t *testing.T) {
	cfg := config.Config{SpotGracePeriodCap: 90 * time.Second}
	for cause, want := range map[node.Cause]time.Duration{
		node.CauseSpot:                 90 * time.Second,
		node.CauseCapacityInterruption: 90 * time.Second,
		node.CauseCapacityBlock:        9 * time.Minute,
		node.CauseTerminate:            0,
		node.CauseRebalance:            0,
		node.CauseScheduled:            0,
	} {
		if got := graceCap(cfg, cause); got != want {
			t.Errorf("graceCap(%s) = %s, want %s", cause, got, want)
		}
	}
}

// Each advisory drain's deadline: from the warning for the warnings (EC2's
// termination time for an interruption that gives it; the first
// terminations less a minute for a Capacity Block), from the drain's start
// for the others.
func TestDrainDeadline(t *testing.T) {
	warnedAt := time.Date(2026, 11, 21, 11, 20, 0, 0, time.UTC)
	started := warnedAt.Add(3 * time.Second)
	timeout := 100 * time.Second
	block := func(end time.Time) event.Event {
		return event.Event{Kind: event.KindCapacityBlockExpiry, Time: warnedAt, CapacityBlock: &event.CapacityBlockExpiry{ReservationID: blockCR, EndDate: end}}
	}
	for _, tc := range []struct {
		name string
		ev   event.Event
		want time.Time
	}{
		{"spot: from the warning", event.Event{Kind: event.KindSpotInterruption, Time: warnedAt}, warnedAt.Add(timeout)},
		{"spot warned ahead of our clock: from our start", event.Event{Kind: event.KindSpotInterruption, Time: started.Add(time.Minute)}, started.Add(timeout)},
		{"capacity interruption with its termination time: 20 s before it",
			event.Event{Kind: event.KindCapacityInterruption, Time: warnedAt, Capacity: &event.CapacityInterruption{TerminationTime: warnedAt.Add(5 * time.Minute)}},
			warnedAt.Add(5*time.Minute - 20*time.Second)},
		{"capacity interruption without: from the warning",
			event.Event{Kind: event.KindCapacityInterruption, Time: warnedAt, Capacity: &event.CapacityInterruption{}}, warnedAt.Add(timeout)},
		{"capacity block: 10 minutes after the warning, less a minute", block(warnedAt.Add(40 * time.Minute)), warnedAt.Add(9 * time.Minute)},
		{"capacity block without its end", block(time.Time{}), warnedAt.Add(9 * time.Minute)},
		{"capacity block warned late: 30 minutes before its end, less a minute", block(warnedAt.Add(35 * time.Minute)), warnedAt.Add(4 * time.Minute)},
		{"rebalance: from the drain's start", event.Event{Kind: event.KindRebalance, Time: warnedAt}, started.Add(timeout)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &advisory{&invocation{ev: tc.ev, started: started}}
			if got := r.drainDeadline(timeout); !got.Equal(tc.want) {
				t.Errorf("drainDeadline = %s, want %s", got, tc.want)
			}
		})
	}
}

// blockEnv is a cluster with four instances: A and B of this cluster in
// the Capacity Block, C in it but another cluster's, D of this cluster in
// another reservation. Each has a node and a pod.
func blockEnv() *env {
	e := newEnv(append(aNode(), newNode(idB), pod(idB, "apps", "web-2"), newNode(idC), pod(idC, "apps", "web-3"),
		newNode(idD), pod(idD, "apps", "web-4"))...)
	e.ec2.readings[idA] = []reading{inBlock}
	e.ec2.readings[idB] = []reading{inBlock}
	e.ec2.readings[idC] = []reading{{state: instance.StateRunning, cr: blockCR}}
	e.ec2.readings[idD] = []reading{{state: instance.StateRunning, tagged: true, cr: otherCR}}
	return e
}

// checkBlockDrained: A's and B's nodes are drained for the block, C's and
// D's untouched.
func checkBlockDrained(t *testing.T, e *env) {
	t.Helper()
	for _, id := range []string{idA, idB} {
		if n := e.node(t, id); !n.Spec.Unschedulable || !node.Holds(n, node.CauseCapacityBlock) {
			t.Errorf("node of %s: unschedulable %v, annotation %s; want cordoned, held for the block", id, n.Spec.Unschedulable, n.Annotations[node.AnnotationOwned])
		}
	}
	for _, id := range []string{idC, idD} {
		if n := e.node(t, id); n.Spec.Unschedulable || len(n.Annotations) > 0 {
			t.Errorf("node of %s (not this cluster's in the block) touched: %+v", id, n)
		}
	}
	if got := sorted(e.evicted); strings.Join(got, ",") != "apps/web-1,apps/web-2,db/db-0" {
		t.Errorf("evicted %v: want A's and B's pods only", got)
	}
}

// A Capacity Block's warning drains the block's instances of this cluster,
// found by the reservation (here in this invocation: it cannot invoke
// itself), and no other.
func TestCapacityBlockInThisInvocation(t *testing.T) {
	e := blockEnv()
	e.lam = nil
	out, err := e.handle(t, capacityBlockEvent(blockCR, time.Now()), 3*time.Second)
	if err != nil || out.Action != ActionPerInstance || len(out.Instances) != 2 {
		t.Fatalf("outcome %+v, error %v: want A and B handled", out, err)
	}
	for i, id := range []string{idA, idB} {
		if o := out.Instances[i]; o.Instance != id || o.Action != ActionDrained || !strings.Contains(o.Detail, "instances begin to terminate at") {
			t.Errorf("instance %d: %+v; want %s drained, the detail saying when the block's instances go", i, o, id)
		}
	}
	if !strings.Contains(out.Detail, blockCR) {
		t.Errorf("detail %q: want the reservation named", out.Detail)
	}
	checkBlockDrained(t, e)
}

// Several instances fan out, one invocation each, narrowed to its
// instance; each drains its node. A continuation naming an instance of
// another reservation drains nothing.
func TestCapacityBlockFansOut(t *testing.T) {
	e := blockEnv()
	payload := capacityBlockEvent(blockCR, time.Now())
	out, err := e.handle(t, payload, 3*time.Second)
	if err != nil || out.Action != ActionFannedOut || len(e.lam.invoked) != 2 {
		t.Fatalf("outcome %+v, error %v, %d invocations: want fanned out to 2", out, err, len(e.lam.invoked))
	}
	if w := e.writes(); len(w) > 0 {
		t.Errorf("the fan-out itself wrote %v", w)
	}
	for i, want := range []string{idA, idB} {
		p := e.lam.invoked[i].Payload
		ev, cont, err := event.ParseInvocation(p)
		if err != nil || cont == nil || ev.Kind != event.KindCapacityBlockExpiry || len(ev.InstanceIDs) != 1 || ev.InstanceIDs[0] != want {
			t.Fatalf("invocation %d: %s %v, %+v, %v; want the block narrowed to %s", i, ev.Kind, ev.InstanceIDs, cont, err, want)
		}
		if out, err := e.handle(t, p, 3*time.Second); err != nil || out.Instance != want || out.Action != ActionDrained {
			t.Errorf("invocation for %s: %+v, %v; want it drained", want, out, err)
		}
	}
	if len(e.lam.invoked) != 2 {
		t.Errorf("a per-instance invocation fanned out again: %d invocations", len(e.lam.invoked))
	}
	checkBlockDrained(t, e)

	stray, err := event.NewContinuationFor(payload, time.Now(), 1, idD)
	if err != nil {
		t.Fatal(err)
	}
	before := len(e.writes())
	if out, err := e.handle(t, stray, 3*time.Second); err != nil || out.Action != ActionIgnored || !strings.Contains(out.Detail, otherCR) {
		t.Errorf("continuation for D: %+v, %v; want it ignored, D being in %s", out, err, otherCR)
	}
	if w := e.writes(); len(w) != before {
		t.Errorf("continuation for D wrote %v", w[before:])
	}
}

// One instance in the block is drained in this invocation; none is
// nothing to do; EC2 unreadable is an error to retry.
func TestCapacityBlockOneNoneUnreadable(t *testing.T) {
	e := newEnv(aNode()...)
	e.ec2.readings[idA] = []reading{inBlock}
	out, err := e.handle(t, capacityBlockEvent(blockCR, time.Now()), 3*time.Second)
	if err != nil || out.Action != ActionDrained || out.Instance != idA || len(e.evicted) != 2 {
		t.Errorf("one instance: %+v, %v, evicted %v; want A drained here", out, err, e.evicted)
	}

	e = newEnv(aNode()...)
	e.ec2.readings[idA] = []reading{{state: instance.StateRunning, tagged: true, cr: otherCR}}
	out, err = e.handle(t, capacityBlockEvent(blockCR, time.Now()), 3*time.Second)
	if err != nil || out.Action != ActionIgnored || len(e.writes()) != 0 {
		t.Errorf("no instance: %+v, %v, writes %v; want ignored, nothing written", out, err, e.writes())
	}

	e = newEnv(aNode()...)
	e.ec2.readings[idA] = []reading{throttled}
	if out, err = e.handle(t, capacityBlockEvent(blockCR, time.Now()), 3*time.Second); err == nil || !strings.Contains(err.Error(), blockCR) {
		t.Errorf("EC2 unreadable: %+v, %v; want an error naming the reservation", out, err)
	}
}

// A dry run of a Capacity Block's warning plans each of its instances'
// drains, says until when, and writes nothing.
func TestCapacityBlockDryRun(t *testing.T) {
	e := blockEnv()
	e.cfg.DryRun = true
	out, err := e.handle(t, capacityBlockEvent(blockCR, time.Now()), 3*time.Second)
	if err != nil || out.Action != ActionPerInstance || len(out.Instances) != 2 || !out.DryRun {
		t.Fatalf("outcome %+v, error %v: want both instances planned", out, err)
	}
	for _, o := range out.Instances {
		if o.Plan == nil || len(o.Plan.Evict) == 0 || !strings.Contains(o.Detail, "drained until") {
			t.Errorf("instance %s: plan %+v, detail %q; want its evictions planned and the deadline said", o.Instance, o.Plan, o.Detail)
		}
	}
	if w := e.writes(); len(w) != 0 || len(e.evicted) != 0 {
		t.Errorf("dry run wrote %v, evicted %v", w, e.evicted)
	}
}
