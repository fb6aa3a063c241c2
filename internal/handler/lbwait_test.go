package handler

import (
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
)

// evictionTimes records when each eviction was asked for (the bubble's
// time), ahead of the env's own reactor; it never waits.
func evictionTimes(e *env) func() []time.Time {
	var mu sync.Mutex
	var at []time.Time
	e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
		}
		return false, nil, nil
	})
	return func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(at)
	}
}

// LB_DRAIN_WAIT: the node is excluded from load balancers with its cordon,
// and its evictions begin that long after; the hook is heartbeated
// meanwhile (its timeout 300 s: every 150 s).
func TestLBDrainWaitBeforeEvictions(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.cfg.LBDrainWait = 200 * time.Second
		e.ec2.readings[idA] = []reading{running}
		evictions := evictionTimes(e)
		start := time.Now()
		out, err := e.handle(t, terminateEvent(idA), 10*time.Minute)
		if err != nil || out.Action != ActionDrained || !slices.Equal(e.asg.results(), []lifecycle.Result{lifecycle.Continue}) {
			t.Fatalf("outcome %s (%s), completions %v, %v: want drained, CONTINUE", out.Action, out.Detail, e.asg.results(), err)
		}
		at := evictions()
		if len(at) != 2 {
			t.Fatalf("%d evictions, want 2", len(at))
		}
		if first := at[0].Sub(start); first < 200*time.Second || first > 205*time.Second {
			t.Errorf("first eviction %s after the start, want LB_DRAIN_WAIT (200s) after it", first)
		}
		if !slices.Contains(steps(out), StepLBWait) || slices.Index(steps(out), StepMarked) > slices.Index(steps(out), StepLBWait) {
			t.Errorf("timeline %v: want marked (the exclusion), then %s", steps(out), StepLBWait)
		}
		beat := false
		for _, b := range e.asg.beats {
			beat = beat || b.at.After(start.Add(100*time.Second)) && b.at.Before(at[0])
		}
		if !beat {
			t.Errorf("heartbeats %+v: want one during the wait", e.asg.beats)
		}
		if n := e.node(t, idA); n.Labels[node.LabelExcludeLB] != "true" {
			t.Errorf("node labels %v: want the load-balancer exclusion", n.Labels)
		}
	})
}

// The wait is spent from the budget: an invocation whose time ends first
// evicts nothing and hands over; the continuation waits only the rest,
// counted from the exclusion (the drain taint's TimeAdded).
func TestLBDrainWaitAcrossAContinuation(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.cfg.LBDrainWait = 5 * time.Minute
		e.ec2.readings[idA] = []reading{running}
		evictions := evictionTimes(e)
		start := time.Now()
		out, err := e.handle(t, terminateEvent(idA), 2*time.Minute)
		if err != nil || out.Action != ActionContinued || len(evictions()) != 0 || len(e.lam.invoked) != 1 {
			t.Fatalf("outcome %s (%s), %d evictions, %d invocations, %v: want handed over, nothing evicted", out.Action, out.Detail, len(evictions()), len(e.lam.invoked), err)
		}
		e.now = time.Now() // a new handler's clock reads from e.now: the bubble's time
		out, err = e.handle(t, e.lam.invoked[0].Payload, 10*time.Minute)
		if err != nil || out.Action != ActionDrained {
			t.Fatalf("continuation: %s (%s), %v: want drained", out.Action, out.Detail, err)
		}
		at := evictions()
		if len(at) != 2 {
			t.Fatalf("%d evictions, want 2", len(at))
		}
		// the taint's TimeAdded is kept to the second
		if first := at[0].Sub(start); first < 299*time.Second || first > 305*time.Second {
			t.Errorf("first eviction %s after the exclusion, want LB_DRAIN_WAIT (5m) after it, not after the continuation's start", first)
		}
	})
}

// A warning's drain waits only as long as still leaves its pods their
// grace period within the notice: 100 s of drain, a 90 s cap, so 10 s.
func TestLBDrainWaitWithinASpotNotice(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.cfg.LBDrainWait, e.cfg.SpotGracePeriodCap = time.Minute, 90*time.Second
		e.ec2.readings[idA] = []reading{running}
		evictions := evictionTimes(e)
		start := time.Now()
		out, err := e.handle(t, spotEvent(idA, start), 2*time.Minute)
		if err != nil || out.Action != ActionDrained {
			t.Fatalf("outcome %s (%s), %v: want drained", out.Action, out.Detail, err)
		}
		if at := evictions(); len(at) == 0 || at[0].Sub(start) < 9*time.Second || at[0].Sub(start) > 12*time.Second {
			t.Errorf("evictions at %v after the warning; want the first 10 s after it", at)
		}
	})
}

// LB_DRAIN_WAIT 0 (the default) waits not at all; a dry run says what the
// wait would be.
func TestLBDrainWaitOffAndDryRun(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.ec2.readings[idA] = []reading{running}
		out, err := e.handle(t, terminateEvent(idA), time.Minute)
		if err != nil || out.Action != ActionDrained || slices.Contains(steps(out), StepLBWait) {
			t.Fatalf("outcome %s, timeline %v, %v: want drained with no wait", out.Action, steps(out), err)
		}
		e = newEnv(aNode()...)
		e.cfg.DryRun, e.cfg.LBDrainWait = true, 45*time.Second
		e.ec2.readings[idA] = []reading{running}
		out, err = e.handle(t, terminateEvent(idA), time.Minute)
		if err != nil || out.Plan == nil || out.Plan.LBWait == "" || len(e.writes()) != 0 {
			t.Fatalf("dry run: plan %+v, writes %v, %v: want the wait said, nothing written", out.Plan, e.writes(), err)
		}
		t.Logf("plan: %s", out.Plan.LBWait)
	})
}
