package faults

import (
	"bytes"
	"net/http"
	"time"

	"github.com/node-drainer/node-drainer/internal/outcome"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
)

// outcomeScenarios: the outcome events (issue 47) never delay or endanger
// a drain (rules 3 and 16: the hook's completion waits for nothing but the
// drain).
func outcomeScenarios() []scenario {
	return append([]scenario{
		{"outcome-bus-hangs", outcomeBusHangs},
	}, outcomeHoleScenarios()...)
}

// busHang is how long the bus holds each put unanswered: far past the
// publisher's bound (outcome.DefaultTimeout), and past what is left of the
// invocation after the drain, so that a put that waited for it would show.
const busHang = 45 * time.Second

// outcomeBusHangs: OUTCOME_EVENT_BUS is set, and EventBridge accepts every
// PutEvents connection and never answers it (a proxy holding each request
// busHang). The drain drains with its PDB floor kept, the hook is completed
// once, CONTINUE, after the drain and before any put was tried but Node
// Drain Started's (put aside at the first eviction, waited for by
// nothing); the invocation ends without waiting for the bus: the put is given up within
// its bound, the invocation not failed.
func outcomeBusHangs(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 3, 1, -1) // floor 2
	bus := "nd-" + x.name
	if _, _, err := env.BusAndQueue(x.ctx, bus); err != nil {
		x.must(err)
	}
	hang := func(r *http.Request, _ []byte) {
		select {
		case <-r.Context().Done():
		case <-time.After(busHang):
		}
	}
	proxy, err := fp.Start(fp.Options{Upstream: env.AWS.URL(), Flavor: fp.AWSQuery, Record: true, Rules: []fp.Rule{{
		Name: "bus hangs", Match: func(r *http.Request) bool { return r.Header.Get("X-Amz-Target") == "AWSEvents.PutEvents" },
		Fault: fp.Pass, Before: hang,
	}}})
	x.must(err)
	x.t.Cleanup(func() { _ = proxy.Stop() })
	rt := x.function(60*time.Second, "OUTCOME_EVENT_BUS="+bus, "AWS_ENDPOINT_URL_EVENTBRIDGE="+proxy.URL, "DRAIN_TIMEOUT=5m")
	x.observe(map[string]int{"app=web": 2})
	x.hookAfterDrain = true
	got := x.drainThenComplete(rt, x.terminating("token-"+x.name), 2*time.Minute)
	var puts []time.Time
	for _, r := range proxy.Requests() {
		if r.Header.Get("X-Amz-Target") != "AWSEvents.PutEvents" {
			continue
		}
		puts = append(puts, r.Time)
		// before the completion only Node Drain Started may be put: it is
		// put aside, at the first eviction, and nothing waits for it
		if got != nil && r.Time.Before(got.Time) {
			all, started := bytes.Count(r.Body, []byte(`"DetailType":"`)), bytes.Count(r.Body, []byte(`"DetailType":"`+string(outcome.NodeDrainStarted)+`"`))
			x.expect(all == started, "a put of %d events, %d of them not Node Drain Started, %.1fs before the hook's completion: the completion waited on the bus", all, all-started, got.Time.Sub(r.Time).Seconds())
		}
	}
	if !x.expect(len(puts) > 0, "no PutEvents reached the bus: the scene proves nothing") || got == nil {
		return
	}
	invs := rt.Invocations()
	if !x.expect(len(invs) == 1 && !invs[0].End.IsZero(), "%d invocations, want one that ended", len(invs)) {
		return
	}
	held := invs[0].End.Sub(puts[0])
	x.expect(held < busHang, "the invocation ended %.1fs after the first put: it waited for the hanging bus", held.Seconds())
	x.expect(invs[0].ErrorType == "", "the invocation failed (%s) on the bus's account", invs[0].ErrorType)
	x.t.Logf("%d PutEvents tried; the invocation ended %.1fs after the first (bound %s)", len(puts), held.Seconds(), outcome.DefaultTimeout)
}
