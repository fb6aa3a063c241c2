package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/metrics"
	"github.com/node-drainer/node-drainer/internal/outcome"
)

// TestOutcomeEvents: every outcome worth a person's attention gives its
// events, each valid by the published schema, and nothing else gives one.
func TestOutcomeEvents(t *testing.T) {
	t0 := time.Date(2026, 11, 18, 14, 0, 0, 0, time.UTC)
	hook := &event.LifecycleAction{AutoScalingGroupName: "workers", HookName: "node-drainer-terminate", InstanceID: "i-1"}
	drainFailed := &Failure{Kind: ErrDrainFailed}
	type tc struct {
		out        Outcome
		lifecycle  *event.LifecycleAction
		started    time.Time // the drain's first invocation (t0 when zero)
		rep        reportSnapshot
		dryRun     bool
		want       []outcome.DetailType
		checkFirst func(t *testing.T, d outcome.Detail)
	}
	base := Outcome{Event: event.KindTerminate, Instance: "i-1", Node: "ip-10-0-0-1"}
	with := func(f func(*Outcome)) Outcome { o := base; f(&o); return o }
	now := func(d time.Duration) reportSnapshot { return reportSnapshot{begun: t0, now: t0.Add(d)} }
	completed := func(s reportSnapshot, result, reason string) reportSnapshot {
		s.hookResult, s.hookReason, s.drainEnded, s.drainLength = result, reason, true, s.now.Sub(t0)
		return s
	}
	left := func(s reportSnapshot, why string) reportSnapshot {
		s.drainLeft, s.leftWhy = true, why
		return s
	}
	cases := map[string]tc{
		"drained, hook completed": {
			out:       with(func(o *Outcome) { o.Action, o.Evicted = ActionDrained, []string{"a/p"} }),
			lifecycle: hook, rep: completed(now(40*time.Second), "CONTINUE", "drained"),
			want: []outcome.DetailType{outcome.NodeDrained, outcome.LifecycleActionCompleted},
			checkFirst: func(t *testing.T, d outcome.Detail) {
				if d.DrainSeconds != 40 || d.AutoScalingGroup != "workers" || !slices.Equal(d.Evicted, []string{"a/p"}) {
					t.Errorf("drained detail: %+v", d)
				}
			},
		},
		"drained by a spot warning, no hook": {
			out:  with(func(o *Outcome) { o.Event, o.Action = event.KindSpotInterruption, ActionDrained }),
			rep:  completed(now(time.Minute), "", ""),
			want: []outcome.DetailType{outcome.NodeDrained},
		},
		"drain failed at its deadline": {
			out: with(func(o *Outcome) {
				o.Action, o.Detail, o.err = ActionFailed, "drain timed out", drainFailed
				o.Remaining = []string{"data/kafka-2: PodDisruptionBudget data/kafka"}
			}),
			lifecycle: hook, rep: completed(now(30*time.Minute), "ABANDON", "at-deadline"),
			want: []outcome.DetailType{outcome.NodeDrainFailed, outcome.LifecycleActionCompleted},
			checkFirst: func(t *testing.T, d outcome.Detail) {
				if len(d.Remaining) != 1 || d.Remaining[0] != (outcome.Held{Pod: "data/kafka-2", HeldBy: "PodDisruptionBudget data/kafka"}) {
					t.Errorf("remaining: %+v", d.Remaining)
				}
			},
		},
		"another failure (no lease) is not a drain's": {
			out:       with(func(o *Outcome) { o.Action, o.err = ActionFailed, &Failure{Kind: ErrNoLease, Cause: errors.New("x")} }),
			lifecycle: hook, rep: now(time.Second),
		},
		"continued, passing the blocked mark in this invocation": {
			out:       with(func(o *Outcome) { o.Action, o.Remaining = ActionContinued, []string{"a/p: PodDisruptionBudget a/pdb"} }),
			lifecycle: hook, rep: now(14 * time.Minute),
			want: []outcome.DetailType{outcome.NodeDrainBlocked},
		},
		"continued, before the blocked mark": {
			out:       with(func(o *Outcome) { o.Action, o.Remaining = ActionContinued, []string{"a/p: x"} }),
			lifecycle: hook, rep: now(4 * time.Minute),
		},
		"continued again, the mark passed in an earlier invocation": {
			out:       with(func(o *Outcome) { o.Action, o.Remaining, o.Attempt = ActionContinued, []string{"a/p: x"}, 2 }),
			lifecycle: hook, started: t0.Add(-14 * time.Minute), rep: now(14 * time.Minute),
		},
		"handed over after the apiserver failed, no pods known": {
			out:       with(func(o *Outcome) { o.Action = ActionContinued }),
			lifecycle: hook, rep: left(now(6*time.Minute), "listing pods: the server is currently unable to handle the request"),
			want: []outcome.DetailType{outcome.NodeDrainBlocked},
			checkFirst: func(t *testing.T, d outcome.Detail) {
				if d.Remaining != nil || !strings.Contains(d.Reason, "unable to handle") {
					t.Errorf("blocked detail: %+v", d)
				}
			},
		},
		"the hand-over failed": {
			out: with(func(o *Outcome) {
				o.Action, o.Detail, o.err = ActionFailed, "could not hand over: throttled", &Failure{Kind: ErrHandOver}
				o.Remaining = []string{"a/p: PodDisruptionBudget a/pdb"}
			}),
			lifecycle: hook, rep: left(now(6*time.Minute), ""),
			want: []outcome.DetailType{outcome.NodeDrainBlocked},
			checkFirst: func(t *testing.T, d outcome.Detail) {
				if len(d.Remaining) != 1 || !strings.Contains(d.Reason, "could not hand over") {
					t.Errorf("blocked detail: %+v", d)
				}
			},
		},
		"an advisory drain left with pods": {
			out: with(func(o *Outcome) {
				o.Event, o.Action, o.Remaining = event.KindScheduledChange, ActionDrained, []string{"a/p: x"}
			}),
			rep:  left(now(6*time.Minute), ""),
			want: []outcome.DetailType{outcome.NodeDrainBlocked},
		},
		"an advisory drain left before the blocked mark": {
			out: with(func(o *Outcome) {
				o.Event, o.Action, o.Remaining = event.KindScheduledChange, ActionDrained, []string{"a/p: x"}
			}),
			rep: left(now(time.Minute), ""),
		},
		"left, its hook found completed elsewhere": {
			out:       with(func(o *Outcome) { o.Action = ActionCompleted }),
			lifecycle: hook, rep: left(now(6*time.Minute), ""),
		},
		"released with EC2's evidence": {
			out: with(func(o *Outcome) {
				o.Event, o.Action, o.Evidence = event.KindStateChange, ActionReleased, "stopped"
				o.PodsDeleted, o.AttachmentsDeleted = []string{"a/db-0"}, []string{"csi-1"}
			}),
			rep: now(2 * time.Second), want: []outcome.DetailType{outcome.NodeReleased},
		},
		"released, nothing to force": {
			out: with(func(o *Outcome) { o.Event, o.Action, o.Evidence = event.KindStateChange, ActionReleased, "stopped" }),
			rep: now(time.Second),
		},
		"not forced": {
			out: with(func(o *Outcome) { o.Event, o.Action = event.KindStateChange, ActionNotForced }),
			rep: now(time.Second),
		},
		"ignored": {out: with(func(o *Outcome) { o.Action = ActionIgnored }), rep: now(0)},
		"dry run says so": {
			out:       with(func(o *Outcome) { o.Action = ActionDrained }),
			lifecycle: hook, dryRun: true, rep: completed(now(time.Second), "CONTINUE", "dry-run"),
			want: []outcome.DetailType{outcome.NodeDrained, outcome.LifecycleActionCompleted},
			checkFirst: func(t *testing.T, d outcome.Detail) {
				if !d.DryRun {
					t.Error("a dry run's event must say dryRun: true")
				}
			},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := config.Config{ClusterName: "prod", FunctionName: "node-drainer", OutcomeBlockedAfter: 5 * time.Minute, DryRun: c.dryRun}
			started := c.started
			if started.IsZero() {
				started = t0
			}
			r := &invocation{h: &Handler{cfg: cfg}, ev: event.Event{Kind: c.out.Event, Lifecycle: c.lifecycle}, started: started, out: c.out}
			events := outcomeEvents(r, c.rep)
			var got []outcome.DetailType
			for _, e := range events {
				got = append(got, e.Type)
				e.Detail.SchemaVersion = outcome.SchemaVersion // Put sets it
				if err := outcome.Validate(e.Type, e.Detail); err != nil {
					t.Errorf("%s breaks the schema: %v", e.Type, err)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("events %v, want %v", got, c.want)
			}
			if c.checkFirst != nil {
				c.checkFirst(t, events[0].Detail)
			}
		})
	}
}

// busAPI is an EventBridge that records what it is given and, at that
// moment, how many lifecycle actions were completed; fail makes it refuse.
type busAPI struct {
	mu        sync.Mutex
	asg       *fakeASG
	entries   []string // detail-types put
	details   []outcome.Detail
	completed []int // completions made when each call came
	fail      error
	delay     time.Duration // each call's answer takes it (its context may end first)
}

func (b *busAPI) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	if b.delay > 0 {
		select {
		case <-time.After(b.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.completed = append(b.completed, len(b.asg.results()))
	for _, e := range in.Entries {
		b.entries = append(b.entries, aws.ToString(e.DetailType))
		var d outcome.Detail
		if err := json.Unmarshal([]byte(aws.ToString(e.Detail)), &d); err != nil {
			return nil, err
		}
		b.details = append(b.details, d)
	}
	if b.fail != nil {
		return nil, b.fail
	}
	return &eventbridge.PutEventsOutput{}, nil
}

// TestOutcomeEventsPut: a drain's events are put once its hook is
// completed (nothing of the drain waits on them; its start's, while it
// goes on), and a bus that refuses,
// or an invocation with less time left than the put's bound, changes
// nothing of the drain: the events lost are counted in the metrics line,
// by why.
func TestOutcomeEventsPut(t *testing.T) {
	cases := []struct {
		name       string
		fail       error
		bound      time.Duration // the put's; the invocation has 5 s
		wantCalls  []int         // completions made when each call came
		wantPut    float64
		wantReason string // "" when all put
	}{
		{"put", nil, time.Second, []int{0, 1}, 3, ""},
		// refused: no cooldown, the second call is made
		{"refused", errors.New("AccessDeniedException: not authorized to perform events:PutEvents"), time.Second, []int{0, 1}, 0, outcome.LostRefused},
		{"no time left for the put's bound", nil, 10 * time.Second, nil, 0, outcome.LostNoTime},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(aNode()...)
			e.ec2.readings[idA] = []reading{running}
			var metricsLine bytes.Buffer
			e.metrics = &metricsLine
			bus := &busAPI{asg: e.asg, fail: tc.fail}
			h := e.handler()
			WithOutcomes(outcome.NewPublisher(bus, "on-call", tc.bound))(h)
			out, err := e.handleWith(h, terminateEvent(idA), 5*time.Second)
			if err != nil || out.Action != ActionDrained || !slices.Equal(e.asg.results(), []lifecycle.Result{lifecycle.Continue}) {
				t.Fatalf("drain: %v %+v, results %v", err, out, e.asg.results())
			}
			want := []string{string(outcome.NodeDrainStarted), string(outcome.NodeDrained), string(outcome.LifecycleActionCompleted)}
			if tc.wantCalls == nil {
				want = nil
			}
			if !slices.Equal(bus.entries, want) || !slices.Equal(bus.completed, tc.wantCalls) {
				t.Fatalf("put %v with %v completions at each call, want %v with %v", bus.entries, bus.completed, want, tc.wantCalls)
			}
			var line map[string]any
			if err := json.Unmarshal(metricsLine.Bytes(), &line); err != nil {
				t.Fatalf("metrics line: %v\n%s", err, metricsLine.String())
			}
			if err := metrics.CheckCatalog(metricsLine.Bytes()); err != nil {
				t.Error(err)
			}
			if line[metrics.OutcomeEventsPut] != tc.wantPut || line[metrics.OutcomeEventsFailed] != 3-tc.wantPut {
				t.Errorf("metrics put %v failed %v, want %v and %v", line[metrics.OutcomeEventsPut], line[metrics.OutcomeEventsFailed], tc.wantPut, 3-tc.wantPut)
			}
			if tc.wantReason != "" && line[metrics.OutcomeEventsFailedFor+tc.wantReason] != 3.0 {
				t.Errorf("metrics %s%s = %v, want 3", metrics.OutcomeEventsFailedFor, tc.wantReason, line[metrics.OutcomeEventsFailedFor+tc.wantReason])
			}
		})
	}
}

// notReady makes a node NotReady (its kubelet has no Lease: dead).
func notReady(n *corev1.Node) {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
}

// withBus gives e's handler a bus that records what it is put.
func withBus(e *env) (*Handler, *busAPI) {
	bus := &busAPI{asg: e.asg}
	h := e.handler()
	WithOutcomes(outcome.NewPublisher(bus, "on-call", 100*time.Millisecond))(h)
	return h, bus
}

// A dead kubelet's drain ends in "Node Drained" with its length, whether
// its pods went within DEAD_NODE_EVICTION_WINDOW or not (C8).
func TestDeadKubeletDrainTellsNodeDrained(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprint("pod held past the window=", held), func(t *testing.T) {
			e := newEnv(newNode(idA, notReady), pod(idA, "apps", "web-1"))
			e.ec2.readings[idA] = []reading{running}
			if held {
				e.blocked = []string{"web-1"}
			}
			var metricsLine bytes.Buffer
			e.metrics = &metricsLine
			h, bus := withBus(e)
			out, err := e.handleWith(h, terminateEvent(idA), 5*time.Second)
			if err != nil || out.Action != ActionDrained || !slices.Equal(e.asg.results(), []lifecycle.Result{lifecycle.Continue}) {
				t.Fatalf("drain: %v %+v, results %v", err, out, e.asg.results())
			}
			want := []string{string(outcome.NodeDrained), string(outcome.LifecycleActionCompleted)}
			if !held {
				want = append([]string{string(outcome.NodeDrainStarted)}, want...) // its pod evicted
			}
			if !slices.Equal(bus.entries, want) {
				t.Fatalf("put %v, want %v", bus.entries, want)
			}
			if past := strings.Contains(out.Detail, "DEAD_NODE_EVICTION_WINDOW"); past != held {
				t.Errorf("drained past the window %v, want %v: %s", past, held, out.Detail)
			}
			if d := bus.details[slices.Index(bus.entries, string(outcome.NodeDrained))]; d.DrainSeconds <= 0 {
				t.Errorf("Node Drained without drainSeconds: %+v", d)
			}
			var line map[string]any
			if err := json.Unmarshal(metricsLine.Bytes(), &line); err != nil || line[metrics.DrainSeconds] == nil {
				t.Errorf("metrics line without %s: %v\n%s", metrics.DrainSeconds, err, metricsLine.String())
			}
		})
	}
}

// A Health event's instances handled in parallel in one invocation each
// tell their own outcome: one Node Drained per node, and a metrics line
// per instance (C8).
func TestScheduledInParallelTellsEachNode(t *testing.T) {
	e := newEnv(newNode(idA), pod(idA, "apps", "web-1"), newNode(idB), pod(idB, "apps", "web-2"))
	e.cfg.ContinueLongDrains = false
	e.ec2.readings[idA] = []reading{running}
	e.ec2.readings[idB] = []reading{running}
	var lines bytes.Buffer
	e.metrics = &lines
	h, bus := withBus(e)
	out, err := e.handleWith(h, scheduledEvent(idA, idB), 5*time.Second)
	if err != nil || out.Action != ActionPerInstance || len(out.Instances) != 2 {
		t.Fatalf("outcome %+v, %v; want %s with 2 instances", out, err, ActionPerInstance)
	}
	nodes := map[string]string{}
	for i, d := range bus.details {
		if bus.entries[i] == string(outcome.NodeDrained) {
			nodes[d.Instance] = d.Node
		}
	}
	if !maps.Equal(nodes, map[string]string{idA: nodeName(idA), idB: nodeName(idB)}) {
		t.Errorf("Node Drained for %v (put %v), want one per instance and its node", nodes, bus.entries)
	}
	drained := map[string]bool{}
	for l := range strings.Lines(lines.String()) {
		var line map[string]any
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("metrics line: %v\n%s", err, l)
		}
		if err := metrics.CheckCatalog([]byte(l)); err != nil {
			t.Error(err)
		}
		if line[metrics.DimResult] == string(ActionDrained) {
			drained[line["instance"].(string)] = true
		}
	}
	if !drained[idA] || !drained[idB] {
		t.Errorf("metrics lines of drained instances %v, want both:\n%s", drained, lines.String())
	}
}

// The invocation that passes OUTCOME_BLOCKED_AFTER sends Node Drain
// Blocked, with what it knows, whatever kept the drain from finishing: the
// apiserver failing (nothing listed: no pods known, the reason says why),
// a hand-over that failed, an advisory drain left unfinished (C8).
func TestBlockedToldWhateverTheCause(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("etcdserver: request timed out")
	cases := []struct {
		name       string
		payload    func() []byte // made in the bubble, at its clock
		setup      func(e *env)
		wantPods   bool   // the pods left are known
		wantReason string // in the reason
	}{
		{"the apiserver fails listing the node's pods, handed over", func() []byte { return terminateEvent(idA) }, func(e *env) {
			e.fail("list", "pods", unavailable)
		}, false, "request timed out"},
		{"the hand-over fails", func() []byte { return terminateEvent(idA) }, func(e *env) {
			e.blocked = []string{"web-1"}
			e.lam.err = errors.New("TooManyRequestsException: Rate Exceeded")
		}, true, "Rate Exceeded"},
		{"an advisory drain left unfinished", func() []byte { return scheduledEvent(idA) }, func(e *env) {
			e.blocked = []string{"web-1"}
		}, true, "not finished"},
	}
	for _, tc := range cases {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv(newNode(idA), pod(idA, "apps", "web-1"))
			e.ec2.readings[idA] = []reading{running}
			e.cfg.OutcomeBlockedAfter = 300 * time.Millisecond
			e.cfg.DeadlineMargin = time.Second // the put's bound (100 ms) fits after the hand-over
			tc.setup(e)
			h, bus := withBus(e)
			out, _ := e.handleWith(h, tc.payload(), 2500*time.Millisecond)
			i := slices.Index(bus.entries, string(outcome.NodeDrainBlocked))
			if i < 0 {
				t.Fatalf("put %v, want %s (outcome %s: %s)", bus.entries, outcome.NodeDrainBlocked, out.Action, out.Detail)
			}
			d := bus.details[i]
			if err := outcome.Validate(outcome.NodeDrainBlocked, d); err != nil {
				t.Error(err)
			}
			if known := len(d.Remaining) > 0; known != tc.wantPods || !strings.Contains(d.Reason, tc.wantReason) || d.BlockedSeconds <= 0 {
				t.Errorf("blocked detail: remaining %+v (want known: %v), reason %q (want %q in it), blockedSeconds %v",
					d.Remaining, tc.wantPods, d.Reason, tc.wantReason, d.BlockedSeconds)
			}
		}))
	}
}

// A drain tells of its start once, at its first eviction, while it goes
// on (before its end's events; a drain that ends first does not cut the
// put short); a continuation, finding the node marked already, tells of
// none.
func TestDrainStartedToldOnce(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.ec2.readings[idA] = []reading{running}
		bus := &busAPI{asg: e.asg, delay: 1500 * time.Millisecond} // longer than the drain after its first eviction
		h := e.handler()
		WithOutcomes(outcome.NewPublisher(bus, "on-call", 2*time.Second))(h)
		out, err := e.handleWith(h, terminateEvent(idA), 5*time.Second)
		if err != nil || out.Action != ActionDrained {
			t.Fatalf("drain: %v %+v", err, out)
		}
		want := []string{string(outcome.NodeDrainStarted), string(outcome.NodeDrained), string(outcome.LifecycleActionCompleted)}
		if !slices.Equal(bus.entries, want) || len(bus.completed) != 2 {
			t.Fatalf("put %v in %d calls, want %v in 2", bus.entries, len(bus.completed), want)
		}
		d := bus.details[0]
		d.SchemaVersion = outcome.SchemaVersion
		if err := outcome.Validate(outcome.NodeDrainStarted, d); err != nil || d.Node != nodeName(idA) || d.AutoScalingGroup != asgName || !strings.Contains(d.Reason, "/") {
			t.Errorf("started detail %+v: %v", d, err)
		}

		// a continuation of a drain under way: the node is marked already
		e2 := newEnv(aNode()...)
		e2.ec2.readings[idA] = []reading{running}
		e2.blocked = []string{"web-1"}
		h2, bus2 := withBus(e2)
		e2.cfg.DeadlineMargin = time.Second
		if out, err := e2.handleWith(h2, terminateEvent(idA), 2500*time.Millisecond); err != nil || out.Action != ActionContinued {
			t.Fatalf("first invocation: %v %+v, want continued", err, out)
		}
		if n := slices.Index(bus2.entries, string(outcome.NodeDrainStarted)); n < 0 {
			t.Fatalf("first invocation put %v, want %s", bus2.entries, outcome.NodeDrainStarted)
		}
		bus2.entries = nil
		e2.blocked = nil
		cont := continuation(t, terminateEvent(idA), time.Now(), 2)
		if out, err := e2.handleWith(h2, cont, 5*time.Second); err != nil || out.Action != ActionDrained {
			t.Fatalf("continuation: %v %+v, want drained", err, out)
		}
		if slices.Contains(bus2.entries, string(outcome.NodeDrainStarted)) {
			t.Errorf("the continuation put %v: the drain's start told twice", bus2.entries)
		}
	})
}

// A drain whose first invocation evicted nothing (every eviction refused)
// tells of its start in the continuation that makes its first eviction:
// the hand-over says the start is still to be told. Seen on the harness
// (outcome-2000-pods-long-names): the drain was never told started.
func TestDrainStartedToldByTheContinuationThatEvictsFirst(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(newNode(idA), pod(idA, "apps", "web-1"))
		e.ec2.readings[idA] = []reading{running}
		e.blocked = []string{"web-1"}
		e.cfg.DeadlineMargin = time.Second
		h, bus := withBus(e)
		if out, err := e.handleWith(h, terminateEvent(idA), 2500*time.Millisecond); err != nil || out.Action != ActionContinued {
			t.Fatalf("first invocation: %v %+v, want continued", err, out)
		}
		if slices.Contains(bus.entries, string(outcome.NodeDrainStarted)) {
			t.Fatalf("first invocation put %v: started told with nothing evicted", bus.entries)
		}
		if len(e.lam.invoked) != 1 {
			t.Fatalf("%d invocations sent, want the continuation", len(e.lam.invoked))
		}
		e.blocked = nil
		if out, err := e.handleWith(h, e.lam.invoked[0].Payload, 5*time.Second); err != nil || out.Action != ActionDrained {
			t.Fatalf("continuation: %v %+v, want drained", err, out)
		}
		if n := slices.Index(bus.entries, string(outcome.NodeDrainStarted)); n < 0 {
			t.Errorf("put %v: the drain's first eviction, in the continuation, not told", bus.entries)
		}
	})
}

// A drain whose completion Auto Scaling refuses as no longer active (its
// action ended otherwise: timed out, its hook deleted, completed by someone
// else, possibly while pods were still on the node) is never told
// "drained": its outcome is ended-elsewhere, told as Node Drain Failed with
// why, and no completion is told (issue 54: C1's outcome said drained).
func TestCompletionRefusedIsNotDrained(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.ec2.readings[idA] = []reading{running}
		e.asg.completeErr = notActive()
		h, bus := withBus(e)
		out, err := e.handleWith(h, terminateEvent(idA), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if out.Action != ActionEndedElsewhere || !strings.Contains(out.Detail, "no longer active") {
			t.Errorf("outcome %s %q: want %s, saying the action was no longer active", out.Action, out.Detail, ActionEndedElsewhere)
		}
		if slices.Contains(bus.entries, string(outcome.NodeDrained)) || slices.Contains(bus.entries, string(outcome.LifecycleActionCompleted)) || !slices.Contains(bus.entries, string(outcome.NodeDrainFailed)) {
			t.Errorf("put %v: want Node Drain Failed, neither Node Drained nor Lifecycle Action Completed", bus.entries)
		}
		for i, d := range bus.details {
			if bus.entries[i] == string(outcome.NodeDrainFailed) && (d.Result != string(ActionEndedElsewhere) || !strings.Contains(d.Reason, "no longer active")) {
				t.Errorf("Node Drain Failed detail: result %q, reason %q", d.Result, d.Reason)
			}
		}
	})
}
