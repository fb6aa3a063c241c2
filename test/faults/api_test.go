package faults

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
)

// scenarios is the suite, in the order it is printed. Issue 11's cases:
// 1 transient API errors, 2 Health events, 3 owned marks, 4 UID
// preconditions, 5 the abrupt path's readings, 6 time budget, 7 concurrent
// duplicates, 8 PDB edge cases, 9 dead kubelet, 10 continuations and filters.
func scenarios() []scenario {
	return append([]scenario{
		// 1
		{"api-down-20s-at-lookup", apiDownAtLookup},
		{"api-down-60s-mid-eviction", apiDownMidEviction},
		{"api-5xx-50pct-drain", api5xxHalf},
		{"api-429-retry-after", api429RetryAfter},
		{"api-401-once", api401Once},
		{"api-down-whole-budget", apiDownWholeBudget},
		{"daemonset-lookup-5xx", daemonSetLookup5xx},
		{"node-lookup-5xx", nodeLookup5xx},
		{"aws-5xx-throttle", awsFaults},
		{"group-tags-throttled", groupTagsThrottled},
		// 2
		{"health-closed-changes-nothing", healthClosedOnly},
		{"health-closed-undoes", healthClosedUndoes},
		{"health-14d-ahead", healthFarAhead},
		{"health-two-instances-own-budget", healthTwoInstances},
		// 3
		{"rebalance-spot-running-marks", rebalanceSpotRunning},
		{"stop-start-no-oos-taint", stopStart},
		{"stop-rebalance-start-no-oos-taint", stopRebalanceStart},
		{"operator-cordon-kept", operatorCordonKept},
		// 4
		{"eviction-uid-name-reuse", evictionNameReuse},
		{"force-delete-uid-name-reuse", forceDeleteNameReuse},
		// 5
		{"restart-before-force-delete", restartBeforeForce},
		{"terminated-after-name-reuse", terminatedAfterNameReuse},
		{"providerid-mismatch", providerIDMismatch},
		// 6
		{"late-hook-heartbeat", lateHookHeartbeat},
		// 7
		{"duplicate-concurrent-terminate", duplicateConcurrent},
		// 8
		{"pdb-empty-selector", pdbEmptySelector},
		{"pod-under-two-pdbs", podTwoPDBs},
		// 9
		{"dead-kubelet-terminate", deadKubeletTerminate},
		// 10
		{"continuation-future-startedat", continuationFuture},
		{"continuation-attempt-beyond-bound", continuationBeyondBound},
		{"hook-name-not-listed", hookNameNotListed},
		{"listed-asg-untagged-instance", listedASGUntagged},
		{"spot-instance-gone", spotInstanceGone},
	}, slices.Concat(recoveryScenarios(), simScenarios(), warmPoolScenarios(), outcomeScenarios(), siblingScenarios(), uninstallScenarios(), nthScenarios())...)
}

// recoveryScenarios are the scenes of the recovery paths on a bad day
// (ARCHITECTURE.md §4, rules 13-16): a refusal is not a verdict, only our
// hooks, done means read again, the hand-over is part of the budget.
func recoveryScenarios() []scenario {
	return slices.Concat(refusalScenarios(), sweepScenarios(), deadScenarios(), rereadScenarios())
}

var (
	evictionPath = regexp.MustCompile(`/pods/[^/]+/eviction$`)
	nodePath     = regexp.MustCompile(`^/api/v1/nodes(/[^/]+)?$`)
	dsPath       = regexp.MustCompile(`^/apis/apps/v1/namespaces/[^/]+/daemonsets/`)
)

// apiTerminate is the common case-1 scene: a target node with web (3 pods,
// PDB maxUnavailable 1) and a DaemonSet pod, the function behind a recording
// apiserver proxy with o; arm runs just before the terminate event is
// invoked. The hook must be completed once, with CONTINUE, after the drain;
// the PDB floor (2) must hold.
func apiTerminate(x *X, o fp.Options, timeout time.Duration, waitMax time.Duration, env []string, arm func(*fp.Proxy)) *fp.Proxy {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 3, 1, -1)
	x.daemonSet(2)
	api, apiEnv := x.apiProxy(o)
	rt := x.function(timeout, append([]string{apiEnv, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=5s"}, env...)...)
	x.observe(map[string]int{"app=web": 2})
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	if arm != nil {
		arm(api)
	}
	x.drainThenComplete(rt, payload, waitMax)
	total, counts := api.Counts()
	x.t.Logf("apiserver proxy: %d requests, faults %v", total, counts)
	return api
}

// apiDownAtLookup: the apiserver is unreachable (connection refused) for the
// first 20 s, while the node is looked up. Rule 8: an error is never "no
// node"; retried until it answers, then drained, then completed.
func apiDownAtLookup(x *X) {
	apiTerminate(x, fp.Options{}, 90*time.Second, 2*time.Minute, nil, func(p *fp.Proxy) { p.Down(20 * time.Second) })
}

// apiDownMidEviction: the first eviction goes through, then the apiserver is
// unreachable for 60 s.
func apiDownMidEviction(x *X) {
	var api *fp.Proxy
	apiTerminate(x, fp.Options{}, 120*time.Second, 3*time.Minute, nil, func(p *fp.Proxy) {
		api = p
		p.Add(fp.Rule{Name: "down after first eviction", Method: "POST", Path: evictionPath, Fault: fp.Pass, Times: 1,
			Then: func(_ *http.Request, _ []byte, _ int) { api.Down(60 * time.Second) }})
	})
}

// api5xxHalf: a fixed half of every apiserver answer is a 503 during the drain.
func api5xxHalf(x *X) {
	apiTerminate(x, fp.Options{Rate: 0.5, Faults: []fp.Fault{fp.ServerError}, Seed: 11}, 90*time.Second, 2*time.Minute, nil, nil)
}

// api429RetryAfter: every request is throttled (429, Retry-After: 2) for the
// first 6 s. The drain waits as told, then finishes.
func api429RetryAfter(x *X) {
	api := apiTerminate(x, fp.Options{}, 90*time.Second, 2*time.Minute, nil, func(p *fp.Proxy) {
		p.Add(fp.Rule{Name: "throttle", Fault: fp.Throttle, RetryAfter: "2", For: 6 * time.Second})
	})
	// Retry-After honoured on the node lookup: the next GET of the same node
	// comes 2 s after a throttled one at the earliest
	reqs := api.Requests()
	for i, r := range reqs {
		if r.Fault != fp.Throttle || r.Method != "GET" || !nodePath.MatchString(r.Path) || r.Path == "/api/v1/nodes" {
			continue
		}
		for _, next := range reqs[i+1:] {
			if next.Method == r.Method && next.Path == r.Path {
				gap := next.Time.Sub(r.Time)
				x.expect(gap >= 1800*time.Millisecond, "GET %s retried %s after a 429 with Retry-After: 2", r.Path, gap.Round(time.Millisecond))
				break
			}
		}
	}
}

// api401Once: the first request is refused with 401 (as an expired token
// is); the token is refreshed and the drain goes on.
func api401Once(x *X) {
	api := apiTerminate(x, fp.Options{Rules: []fp.Rule{{Name: "401", Fault: fp.Unauthorized, Times: 1}}}, 90*time.Second, 2*time.Minute, nil, nil)
	_, c := api.Counts()
	x.expect(c[fp.Unauthorized] == 1, "the 401 was not served (%v)", c)
}

// apiDownWholeBudget: the apiserver never answers. The hook is completed
// with the configured failure result (ABANDON) when DRAIN_TIMEOUT less the
// margin is reached (30 s - 5 s), never before.
func apiDownWholeBudget(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, -1)
	api, apiEnv := x.apiProxy(fp.Options{})
	rt := x.function(60*time.Second, apiEnv, "DRAIN_TIMEOUT=30s", "DEADLINE_MARGIN=5s", "LIFECYCLE_RESULT_ON_FAILURE=ABANDON")
	x.observe(nil)
	payload := x.terminating("token-" + x.name)
	api.Down(10 * time.Minute)
	_, err := x.invoke(rt, payload)
	x.t.Logf("invocation: %v", err)
	got := x.waitHook(50*time.Second, rt)
	x.setDrained()
	x.checkHook("ABANDON", got)
	if got != nil {
		at := got.Time.Sub(x.began)
		if at < 23*time.Second {
			x.violate("hook completed at %.1fs with the apiserver down, before DRAIN_TIMEOUT-margin (25s)", at.Seconds())
		}
		x.expect(at <= 32*time.Second, "hook completed at %.1fs, want ~25s (DRAIN_TIMEOUT-margin)", at.Seconds())
	}
}

// daemonSetLookup5xx: kubectl's pod filter looks up each pod's DaemonSet;
// those GETs answer 503 for 8 s.
func daemonSetLookup5xx(x *X) {
	api := apiTerminate(x, fp.Options{}, 90*time.Second, 2*time.Minute, nil, func(p *fp.Proxy) {
		p.Add(fp.Rule{Name: "ds 503", Method: "GET", Path: dsPath, Fault: fp.ServerError, For: 8 * time.Second})
	})
	_, c := api.Counts()
	x.expect(c[fp.ServerError] > 0, "no DaemonSet lookup was faulted: the scenario proves nothing")
}

// nodeLookup5xx: only the node GET/LIST fail (503) for 6 s.
func nodeLookup5xx(x *X) {
	apiTerminate(x, fp.Options{}, 90*time.Second, 2*time.Minute, nil, func(p *fp.Proxy) {
		p.Add(fp.Rule{Name: "node 503", Method: "GET", Path: nodePath, Fault: fp.ServerError, For: 6 * time.Second})
	})
}

// groupTagsThrottled: a terminate hook of ours in a group chosen by its tag
// alone; Auto Scaling throttles every reading of the group's tags for a
// while. The invocation fails with nothing done but a heartbeat, so that
// Lambda's retry finds the hook alive (as when EC2 is unreadable); the
// retry, once the throttling is over, drains the node and completes the
// hook once.
func groupTagsThrottled(x *X) {
	groupTag := "node-drainer.io/" + x.name
	x.scene(sceneOpts{nodes: 2, groupTags: map[string]string{groupTag: "true"}})
	x.web("web", 2, -1, -1)
	p, awsEnv := x.awsProxy(fp.Options{})
	throttled := p.Add(fp.Rule{Body: "Action=DescribeAutoScalingGroups", Fault: fp.Throttle}) // past the SDK's retries
	rt := x.function(60*time.Second, append(awsEnv, "ASG_TAG_KEY="+groupTag)...)
	x.observe(nil)
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	_, err := x.invoke(rt, payload)
	x.expect(err != nil, "the invocation with the group's tags unreadable did not fail: Lambda would not retry it")
	ok, _ := x.completions()
	x.expect(len(ok) == 0, "the hook was completed with the group's tags unreadable")
	beats := 0
	for _, c := range x.lifecycleCalls("RecordLifecycleActionHeartbeat") {
		if c.OK() {
			beats++
		}
	}
	x.expect(beats > 0, "the hook was not heartbeated for Lambda's retry")
	throttled.End() // Lambda retries a minute later: the throttling is over
	x.drainThenComplete(rt, payload, 2*time.Minute)
}

// awsFaults: EC2 and autoscaling answer 503 and Throttling to their first
// calls (describe, heartbeat/hook reads, the completion itself).
func awsFaults(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 3, 1, -1)
	aws, awsEnv := x.awsProxy(fp.Options{Rules: []fp.Rule{
		{Body: "Action=DescribeInstances", Fault: fp.ServerError, Times: 2},
		{Body: "Action=CompleteLifecycleAction", Fault: fp.Throttle, Times: 2},
		{Fault: fp.Drop, Rate: 0.3},
	}, Seed: 5})
	rt := x.function(90*time.Second, append(awsEnv, "DRAIN_TIMEOUT=5m")...)
	x.observe(map[string]int{"app=web": 2})
	x.hookAfterDrain = true
	_, err := x.invoke(rt, x.terminating("token-"+x.name))
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(2*time.Minute, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	x.checkFloors()
	total, c := aws.Counts()
	x.t.Logf("AWS proxy: %d requests, faults %v", total, c)
	n := 0
	for _, r := range aws.Requests() {
		if strings.Contains(string(r.Body), "Action=CompleteLifecycleAction") && r.Fault == fp.Throttle {
			n++
		}
	}
	x.expect(n == 2, "CompleteLifecycleAction throttled %d times, want 2 (then completed)", n)
}
