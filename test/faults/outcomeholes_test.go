package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/internal/outcome"
	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
)

// outcomeHoleScenarios: the outcome events the people on call did not get
// (issue 56, C7 and C8), each read back from a queue behind the bus.
func outcomeHoleScenarios() []scenario {
	return []scenario{
		{"outcome-bus-refuses-once", outcomeBusRefusesOnce},
		{"outcome-dead-kubelet-drained", outcomeDeadKubeletDrained},
		{"outcome-health-two-instances", outcomeHealthTwoInstances},
		{"outcome-blocked-api-failing", outcomeBlockedAPIFailing},
		{"outcome-2000-pods-long-names", outcome2000PodsLongNames},
	}
}

// eventsWait bounds the wait for an event to reach the queue: a put is
// made at the invocation's end, and the emulator's rule forwards it; on a
// busy machine that can take a while.
const eventsWait = 90 * time.Second

// outcomeQueue is the scene's bus (OUTCOME_EVENT_BUS) with a rule sending
// every node-drainer event on it to a queue, as a user routes them to a
// person; each event read is held to the published schema (outcome.Validate).
type outcomeQueue struct {
	x        *X
	bus, url string
	q        *sqs.Client
	mu       sync.Mutex
	got      map[outcome.DetailType][]outcome.Detail
	// biggest is the size of the largest event read, biggestKind its type
	biggest     int
	biggestKind string
}

func (x *X) outcomeQueue() *outcomeQueue {
	x.t.Helper()
	bus := "nd-" + x.name
	url, arn, err := env.BusAndQueue(x.ctx, bus)
	x.must(err)
	cfg := env.AWS.AWSConfig()
	eb := eventbridge.NewFromConfig(cfg)
	_, err = eb.PutRule(x.ctx, &eventbridge.PutRuleInput{Name: aws.String(bus), EventBusName: aws.String(bus),
		EventPattern: aws.String(`{"source":["` + outcome.Source + `"]}`)})
	x.must(err)
	_, err = eb.PutTargets(x.ctx, &eventbridge.PutTargetsInput{Rule: aws.String(bus), EventBusName: aws.String(bus),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(arn)}}})
	x.must(err)
	return &outcomeQueue{x: x, bus: bus, url: url, q: sqs.NewFromConfig(cfg), got: map[outcome.DetailType][]outcome.Detail{}}
}

// read takes what reached the queue since the last read into got.
func (oq *outcomeQueue) read() {
	x := oq.x
	for {
		msgs, err := oq.q.ReceiveMessage(x.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(oq.url), MaxNumberOfMessages: 10})
		x.must(err)
		if len(msgs.Messages) == 0 {
			return
		}
		for _, m := range msgs.Messages {
			var ev struct {
				DetailType string          `json:"detail-type"`
				Source     string          `json:"source"`
				Detail     json.RawMessage `json:"detail"`
			}
			x.must(json.Unmarshal([]byte(aws.ToString(m.Body)), &ev))
			var d outcome.Detail
			dec := json.NewDecoder(bytes.NewReader(ev.Detail))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&d); x.expect(err == nil, "%s detail: %v", ev.DetailType, err) {
				err = outcome.Validate(outcome.DetailType(ev.DetailType), d)
				x.expect(err == nil && ev.Source == outcome.Source, "%s from %s: %v", ev.DetailType, ev.Source, err)
			}
			x.t.Logf("event read back: %s instance=%s node=%s result=%s reason=%q", ev.DetailType, d.Instance, d.Node, d.Result, d.Reason)
			oq.mu.Lock()
			oq.got[outcome.DetailType(ev.DetailType)] = append(oq.got[outcome.DetailType(ev.DetailType)], d)
			if n := len(aws.ToString(m.Body)); n > oq.biggest {
				oq.biggest, oq.biggestKind = n, ev.DetailType
			}
			oq.mu.Unlock()
			_, err := oq.q.DeleteMessage(x.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(oq.url), ReceiptHandle: m.ReceiptHandle})
			x.must(err)
		}
	}
}

// of returns the events of type t read so far for the instance.
func (oq *outcomeQueue) of(t outcome.DetailType, instance string) []outcome.Detail {
	oq.mu.Lock()
	defer oq.mu.Unlock()
	var out []outcome.Detail
	for _, d := range oq.got[t] {
		if d.Instance == instance {
			out = append(out, d)
		}
	}
	return out
}

// kinds lists what was read, e.g. [Lifecycle Action Completed×1 ...].
func (oq *outcomeQueue) kinds() string {
	oq.mu.Lock()
	defer oq.mu.Unlock()
	var s []string
	for k, v := range oq.got {
		s = append(s, fmt.Sprintf("%s×%d", k, len(v)))
	}
	sort.Strings(s)
	return fmt.Sprint(s)
}

// waitFor reads the queue until each type's event for the instance has
// arrived, at most limit; it says whether they all did.
func (oq *outcomeQueue) waitFor(limit time.Duration, instance string, types ...outcome.DetailType) bool {
	err := wait.PollUntilContextTimeout(oq.x.ctx, time.Second, limit, true, func(context.Context) (bool, error) {
		oq.read()
		for _, t := range types {
			if len(oq.of(t, instance)) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	return err == nil
}

// outcomeBusRefusesOnce (C7): the bus refuses the first PutEvents (a 403,
// as an AccessDenied or an expired token answers) and accepts every one
// after it. A refusal is the request's fault, not the bus's: it must not
// start the one-minute cooldown. The first invocation drains an empty node
// (no eviction, so its one put is the refused one: Node Drained and
// Lifecycle Action Completed); the next, well within the minute, drains the
// second instance, makes its put, and its Node Drained and Lifecycle Action
// Completed reach the queue. (An emulator slow to answer a put that went
// through is a bus fault of its own: the refused put is the only one
// before the second invocation's so that none can start the cooldown.)
func outcomeBusRefusesOnce(x *X) {
	x.scene(sceneOpts{nodes: 2})
	a, b := x.insts[0], x.insts[1]
	oq := x.outcomeQueue()
	proxy, err := fp.Start(fp.Options{Upstream: env.AWS.URL(), Flavor: fp.AWSQuery, Record: true})
	x.must(err)
	x.t.Cleanup(func() { _ = proxy.Stop() })
	isPut := func(r *http.Request) bool { return r.Header.Get("X-Amz-Target") == "AWSEvents.PutEvents" }
	refuse := proxy.Add(fp.Rule{Name: "bus refuses once", Times: 1, Fault: fp.Unauthorized, Match: isPut})
	var mu sync.Mutex
	var took []time.Duration
	var sent time.Time // the function's puts are one at a time
	proxy.Add(fp.Rule{Name: "puts timed", Fault: fp.Pass, Match: isPut,
		Before: func(*http.Request, []byte) { mu.Lock(); sent = time.Now(); mu.Unlock() },
		Then: func(_ *http.Request, _ []byte, status int) {
			mu.Lock()
			d := time.Since(sent)
			took = append(took, d.Round(time.Millisecond))
			mu.Unlock()
			x.t.Logf("PutEvents forwarded: %d in %s", status, d.Round(time.Millisecond))
		}})
	rt := x.function(60*time.Second, "OUTCOME_EVENT_BUS="+oq.bus, "AWS_ENDPOINT_URL_EVENTBRIDGE="+proxy.URL, "DRAIN_TIMEOUT=5m")
	_, err = x.invoke(rt, x.terminating("token-a-"+x.name))
	x.expect(err == nil, "first invocation failed: %v", err)
	x.checkHook("CONTINUE", x.waitHook(2*time.Minute, rt))
	if !x.expect(refuse.Hits() == 1, "the bus refused %d puts in the first invocation, want 1: the scene proves nothing", refuse.Hits()) {
		return
	}
	var refusedAt time.Time
	for _, r := range proxy.Requests() {
		if r.Fault == fp.Unauthorized {
			refusedAt = r.Time
		}
	}
	payload, err := env.StartTerminating(x.ctx, x.asg, b, "token-b-"+x.name)
	x.must(err)
	secondAt := time.Now()
	_, err = x.invoke(rt, payload)
	x.expect(err == nil, "second invocation failed: %v", err)
	// the second invocation must begin within the cooldown the refusal
	// would have started, or it proves nothing
	x.expect(secondAt.Sub(refusedAt) < outcome.Cooldown-10*time.Second, "the second invocation began %.1fs after the refusal: past the cooldown, the scene proves nothing", secondAt.Sub(refusedAt).Seconds())
	ctx, cancel := context.WithTimeout(x.ctx, 2*time.Minute)
	_ = rt.WaitIdle(ctx)
	cancel()
	// the proxy records a request once it has answered it, which may be
	// after the invocation has returned: wait for the record a little
	puts := 0
	_ = wait.PollUntilContextTimeout(x.ctx, 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		puts = 0
		for _, r := range proxy.Requests() {
			if isPutRecord(r) && r.Time.After(secondAt) {
				puts++
			}
		}
		return puts > 0, nil
	})
	x.expect(puts > 0, "the invocation after the refused put made no PutEvents: the refusal started the cooldown")
	arrived := oq.waitFor(eventsWait, b.ID, outcome.NodeDrained, outcome.LifecycleActionCompleted)
	x.expect(arrived, "the invocation after the refused put: no Node Drained and Lifecycle Action Completed for %s within %s (read: %s)", b.ID, eventsWait, oq.kinds())
	mu.Lock()
	defer mu.Unlock()
	x.t.Logf("refused put at %.1fs; the second invocation began %.1fs after it and made %d PutEvents (forwarded puts took %v); read for %s and %s: %s",
		refusedAt.Sub(x.began).Seconds(), secondAt.Sub(refusedAt).Seconds(), puts, took, a.ID, b.ID, oq.kinds())
}

func isPutRecord(r fp.Request) bool { return r.Header.Get("X-Amz-Target") == "AWSEvents.PutEvents" }

// outcomeDeadKubeletDrained (C8): a terminate hook for a node whose kubelet
// is dead (NotReady, its Lease no longer renewed): the dead-node drain
// evicts, waits DEAD_NODE_EVICTION_WINDOW and completes the hook. The
// people on call hear Node Drained, with its DrainSeconds, beside
// Lifecycle Action Completed.
func outcomeDeadKubeletDrained(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 3, -1, -1)
	oq := x.outcomeQueue()
	x.killKubelet(x.target.PrivateDNSName)
	rt := x.function(60*time.Second, "OUTCOME_EVENT_BUS="+oq.bus, "DRAIN_TIMEOUT=5m", "DEAD_NODE_EVICTION_WINDOW=10s", "DEADLINE_MARGIN=5s")
	_, err := x.invoke(rt, x.terminating("token-"+x.name))
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(90*time.Second, rt)
	x.checkHook("CONTINUE", got)
	x.drained = map[bool]string{true: "yes", false: "no"}[got != nil]
	// Completed is put with Node Drained, in the same call: once it is
	// read, Node Drained had to be there too
	if !x.expect(oq.waitFor(eventsWait, x.target.ID, outcome.LifecycleActionCompleted), "no Lifecycle Action Completed for %s within %s (read: %s)", x.target.ID, eventsWait, oq.kinds()) {
		return
	}
	oq.read()
	drained := oq.of(outcome.NodeDrained, x.target.ID)
	if x.expect(len(drained) == 1, "%d Node Drained events for the dead kubelet's drain of %s, want 1 (read: %s)", len(drained), x.target.ID, oq.kinds()) {
		x.expect(drained[0].Node == x.target.PrivateDNSName && drained[0].DrainSeconds > 0, "Node Drained %+v: want node %s and its DrainSeconds", drained[0], x.target.PrivateDNSName)
	}
}

// outcomeHealthTwoInstances (C8): an AWS Health scheduled change names two
// instances, with CONTINUE_LONG_DRAINS=false (no self-invocation: both are
// drained in parallel in the one invocation). Each instance's drain is a
// run of its own and tells of itself: a Node Drained for each.
func outcomeHealthTwoInstances(x *X) {
	x.scene(sceneOpts{nodes: 3})
	a, b := x.insts[0], x.insts[1]
	x.web("wa", 2, -1, -1) // on a
	x.target = b
	x.web("wb", 2, -1, -1) // on b
	x.target = a
	oq := x.outcomeQueue()
	rt := x.function(60*time.Second, "OUTCOME_EVENT_BUS="+oq.bus, "SCHEDULED_CHANGE_ACTION=drain", "CONTINUE_LONG_DRAINS=false", "DEADLINE_MARGIN=5s")
	out, err := x.invoke(rt, x.healthEvent("open", time.Now().Add(-time.Minute), a.ID, b.ID))
	x.expect(err == nil, "invocation failed: %v (%+v)", err, out)
	ctx, cancel := context.WithTimeout(x.ctx, 2*time.Minute)
	_ = rt.WaitIdle(ctx)
	cancel()
	left := len(x.podsOn(a.PrivateDNSName)) + len(x.podsOn(b.PrivateDNSName))
	x.drained = map[bool]string{true: "yes", false: "no"}[left == 0]
	okA := oq.waitFor(eventsWait, a.ID, outcome.NodeDrained)
	okB := oq.waitFor(10*time.Second, b.ID, outcome.NodeDrained)
	x.expect(okA && okB, "Node Drained for %s: %v, for %s: %v, want one each (read: %s)", a.ID, okA, b.ID, okB, oq.kinds())
	for _, in := range []harness.Instance{a, b} {
		for _, d := range oq.of(outcome.NodeDrained, in.ID) {
			x.expect(d.Node == in.PrivateDNSName, "Node Drained for %s names node %s, want %s", in.ID, d.Node, in.PrivateDNSName)
		}
		x.expect(len(oq.of(outcome.NodeDrained, in.ID)) <= 1, "%d Node Drained for %s, want one", len(oq.of(outcome.NodeDrained, in.ID)), in.ID)
	}
}

// podsOfNode matches the drain's list and watch of the target's pods.
var podsOfNode = regexp.MustCompile(`^/api/v1/pods$`)

// outcomeBlockedAPIFailing (C8): a terminate hook's drain begins, and the
// apiserver answers every list of the node's pods 503 from the start, past
// OUTCOME_BLOCKED_AFTER (5 s): nothing is ever listed. The invocation that
// passes the mark hands the drain over and tells of it: Node Drain Blocked
// arrives, its reason saying why (no pods are known). Once the apiserver
// answers again the drain finishes and the hook is completed once, CONTINUE.
func outcomeBlockedAPIFailing(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, -1)
	oq := x.outcomeQueue()
	name := x.target.PrivateDNSName
	proxy, kube := x.apiProxy(fp.Options{})
	failing := proxy.Add(fp.Rule{Name: "pods of the node unlisted", Method: "GET", Path: podsOfNode, Fault: fp.ServerError,
		Match: func(r *http.Request) bool {
			return strings.Contains(r.URL.Query().Get("fieldSelector"), "spec.nodeName="+name)
		}})
	rt := x.function(20*time.Second, kube, "OUTCOME_EVENT_BUS="+oq.bus, "OUTCOME_BLOCKED_AFTER=5s", "DEADLINE_MARGIN=5s", "DRAIN_TIMEOUT=5m")
	x.observe(map[string]int{})
	_, err := x.invoke(rt, x.terminating("token-"+x.name))
	x.t.Logf("first invocation: %v", err)
	blocked := oq.waitFor(eventsWait, x.target.ID, outcome.NodeDrainBlocked)
	x.expect(failing.Hits() > 0, "no list of the node's pods was failed: the scene proves nothing")
	failing.End()
	x.expect(blocked, "no Node Drain Blocked for %s within %s while the apiserver failed every list of its pods (read: %s)", x.target.ID, eventsWait, oq.kinds())
	for _, d := range oq.of(outcome.NodeDrainBlocked, x.target.ID) {
		x.expect(d.Reason != "" && d.BlockedSeconds >= 5, "Node Drain Blocked %+v: want a reason and blockedSeconds >= 5", d)
	}
	got := x.waitHook(3*time.Minute, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	oq.read()
	x.expect(len(oq.of(outcome.NodeDrainBlocked, x.target.ID)) <= 1, "%d Node Drain Blocked for one drain, want one", len(oq.of(outcome.NodeDrainBlocked, x.target.ID)))
	x.t.Logf("pod lists failed: %d; events read: %s", failing.Hits(), oq.kinds())
}
