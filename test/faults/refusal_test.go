package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
)

// refusalScenarios: rules 13, 15 and 16 on the hook's own path (admission
// refusals, late-bound pods, the hand-over).
func refusalScenarios() []scenario {
	return []scenario{
		// 13: a refusal is not a verdict
		{"admission-422-eviction", admission422Eviction},
		{"admission-403-eviction", admission403Eviction},
		{"webhook-500-eviction", webhook500Eviction},
		{"eviction-timeout", evictionTimeout},
		// 15: done means read again
		{"late-bound-pod", lateBoundPod},
		// 16: the hand-over is part of the budget
		{"api-down-across-handover", apiDownAcrossHandover},
		{"lease-timeout-no-lease-action", leaseTimeoutNoLeaseAction},
	}
}

// ---- 13: admission refusals of one pod's eviction ----

// refusedPod places web (2 pods, no PDB) on the target and returns the pod
// whose eviction the scene refuses (the first by name).
func (x *X) refusedPod() corev1.Pod {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, -1)
	pods := x.podsOn(x.target.PrivateDNSName)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	if len(pods) == 0 {
		x.t.Fatalf("setup: no pod on the target")
	}
	return pods[0]
}

// refuseEviction refuses the eviction of pod in the scene's namespace with
// a ValidatingAdmissionPolicy (harness.Env.RefuseEviction) with reason
// (Invalid: 422, Forbidden: 403). It waits until a dry-run eviction of the
// pod is refused with that code and returns what lifts the refusal (also
// run at cleanup).
func (x *X) refuseEviction(pod string, reason metav1.StatusReason, code int32) (lift func()) {
	x.t.Helper()
	l, err := env.RefuseEviction(x.ctx, "refuse-eviction-"+x.name, x.ns, pod, reason,
		"pod "+pod+" may not be evicted now (fault scene "+x.name+")")
	x.must(err)
	return x.liftable(l, pod, code)
}

// refuseEvictionWebhook refuses the eviction of pod in the scene's
// namespace with a webhook whose endpoint is down
// (harness.Env.RefuseEvictionByWebhook): the apiserver answers 500.
func (x *X) refuseEvictionWebhook(pod string) (lift func()) {
	x.t.Helper()
	l, err := env.RefuseEvictionByWebhook(x.ctx, "refuse-eviction-"+x.name, x.ns, pod)
	x.must(err)
	return x.liftable(l, pod, http.StatusInternalServerError)
}

// liftable waits until the refusal of pod's eviction with code is in force
// and returns what lifts it, also run at cleanup.
func (x *X) liftable(l func(context.Context) error, pod string, code int32) (lift func()) {
	lift = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := l(ctx); err != nil {
			x.t.Logf("lifting the refusal: %v", err)
		}
	}
	x.t.Cleanup(lift)
	x.waitRefused(pod, code)
	return lift
}

// waitRefused waits until a dry-run eviction of pod (as the admin) is
// refused with code: the refusal is in force.
func (x *X) waitRefused(pod string, code int32) {
	x.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(x.ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = env.Client.PolicyV1().Evictions(x.ns).Evict(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Namespace: x.ns, Name: pod},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}},
		})
		var st apierrors.APIStatus
		if last != nil && errors.As(last, &st) && st.Status().Code == code {
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		x.t.Fatalf("setup: the eviction of %s is not refused with %d (last answer: %v)", pod, code, last)
	}
	x.t.Logf("eviction of %s refused with %d: %v", pod, code, last)
}

// refusalFunction is the admission scenes' function: 60 s timeout,
// DRAIN_TIMEOUT 3 min, DEADLINE_MARGIN 10 s, continuations on, the failure
// result ABANDON (not the default CONTINUE, so that a completion as failed
// tells itself from one as drained).
func (x *X) refusalFunction(apiEnv string) *lambdart.Runtime {
	return x.function(60*time.Second, apiEnv, "DRAIN_TIMEOUT=3m", "DEADLINE_MARGIN=10s",
		"CONTINUE_LONG_DRAINS=true", "LIFECYCLE_RESULT_ON_FAILURE=ABANDON")
}

// evictionAnswers counts the proxy's eviction requests for pod with their
// status, before and from at.
func evictionAnswers(api *fp.Proxy, pod string, at time.Time) (before, after map[int]int) {
	before, after = map[int]int{}, map[int]int{}
	for _, r := range evictions(api)[pod] {
		if at.IsZero() || r.Time.Before(at) {
			before[r.Status]++
		} else {
			after[r.Status]++
		}
	}
	return before, after
}

func accepted(counts map[int]int) int {
	n := 0
	for s, c := range counts {
		if s/100 == 2 {
			n += c
		}
	}
	return n
}

// invocationsAtMost: rule 13, invocations per hook bounded by time, not by
// a loop.
func (x *X) invocationsAtMost(rt *lambdart.Runtime, most int) {
	invs := rt.Invocations()
	var at []string
	for _, in := range invs {
		at = append(at, fmt.Sprintf("%.1fs", in.Queued.Sub(x.began).Seconds()))
	}
	x.t.Logf("%d invocations, queued at %s", len(invs), strings.Join(at, " "))
	x.expect(len(invs) <= most, "%d invocations of the function for one hook (queued at %s), want at most %d (about one a minute)",
		len(invs), strings.Join(at, " "), most)
}

// admission422Eviction: a ValidatingAdmissionPolicy refuses one pod's
// eviction (422) for the whole scene. Rule 13: the refusal is retried with
// backoff until DRAIN_TIMEOUT (3 min), in at most one invocation a minute;
// then the hook is completed once, with the failure result (ABANDON); the
// refused pod is never evicted.
func admission422Eviction(x *X) {
	pod := x.refusedPod()
	x.refuseEviction(pod.Name, metav1.StatusReasonInvalid, http.StatusUnprocessableEntity)
	api, apiEnv := x.apiProxy(fp.Options{})
	rt := x.refusalFunction(apiEnv)
	x.observe(nil)
	_, err := x.invoke(rt, x.terminating("token-"+x.name))
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(3*time.Minute+40*time.Second, rt)
	x.setDrained()
	x.checkHook("ABANDON", got)
	if got != nil {
		at := got.Time.Sub(x.began)
		// the deadline less DEADLINE_MARGIN, less 5 s of slack
		if at < 3*time.Minute-15*time.Second {
			x.violate("hook completed at %.1fs, before DRAIN_TIMEOUT (3m, margin 10s), while one pod's eviction was refused by admission", at.Seconds())
		}
		x.expect(at <= 3*time.Minute+20*time.Second, "hook completed at %.1fs, want ~3m (DRAIN_TIMEOUT)", at.Seconds())
	}
	x.invocationsAtMost(rt, 6)
	refused, _ := evictionAnswers(api, pod.Name, time.Time{})
	x.expect(refused[http.StatusUnprocessableEntity] > 0, "no eviction of %s was refused with 422 (%v): the scene proves nothing", pod.Name, refused)
	x.expect(accepted(refused) == 0, "pod %s was evicted though admission refused it (%v): the scene proves nothing", pod.Name, refused)
	if t := x.touched([]corev1.Pod{pod}); len(t) > 0 {
		x.violate("the refused pod was deleted: %v", t)
	}
}

// liftedRefusal is the common scene of a refusal lifted after 40 s: web (2
// pods) on the target, refuse installs the refusal of one pod's eviction
// (answered with code) and returns what lifts it. Rule 13: the refused
// eviction is retried until it goes through; the hook is completed once,
// with CONTINUE, after the drain, never while the refusal stood; one
// invocation (three at most).
func liftedRefusal(x *X, code int, refuse func(pod string, api *fp.Proxy) (lift func())) {
	pod := x.refusedPod()
	api, apiEnv := x.apiProxy(fp.Options{})
	lift := refuse(pod.Name, api)
	rt := x.refusalFunction(apiEnv)
	x.observe(nil)
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	x.began = time.Now()
	liftedAt := make(chan time.Time, 1)
	go func() {
		select {
		case <-x.ctx.Done():
			liftedAt <- time.Time{}
		case <-time.After(40 * time.Second):
			lift()
			x.t.Logf("refusal lifted at %.1fs", time.Since(x.began).Seconds())
			liftedAt <- time.Now()
		}
	}()
	_, err := x.invoke(rt, payload)
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(3*time.Minute, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	x.expect(x.drained == "yes", "node not drained")
	lifted := <-liftedAt
	if got != nil && !lifted.IsZero() && got.Time.Before(lifted) {
		x.violate("hook completed at %.1fs (%s) while pod %s's eviction was refused (lifted at %.1fs)",
			got.Time.Sub(x.began).Seconds(), got.Params["LifecycleActionResult"], pod.Name, lifted.Sub(x.began).Seconds())
	}
	before, after := evictionAnswers(api, pod.Name, lifted)
	x.t.Logf("evictions of %s: before the lift %v, after %v", pod.Name, before, after)
	if code != 0 {
		x.expect(before[code] > 0, "no eviction of %s was refused with %d (%v): the scene proves nothing", pod.Name, code, before)
	} else {
		x.expect(len(evictions(api)[pod.Name]) > 0, "no eviction of %s was tried: the scene proves nothing", pod.Name)
	}
	x.expect(accepted(before) == 0, "pod %s was evicted while its eviction was to be refused (%v): the scene proves nothing", pod.Name, before)
	x.expect(accepted(after) > 0, "pod %s was not evicted once its refusal was lifted (%v)", pod.Name, after)
	x.invocationsAtMost(rt, 3)
	x.noEarlyHandOver(rt, 60*time.Second, 10*time.Second)
}

// noEarlyHandOver: rule 13, no hand-over without having waited its share:
// every invocation but the last ran to its budget (timeout less margin), 5 s
// of slack, before it handed over.
func (x *X) noEarlyHandOver(rt *lambdart.Runtime, timeout, margin time.Duration) {
	invs := rt.Invocations()
	var early []string
	for i, in := range invs {
		if i == len(invs)-1 || !in.Done() {
			break
		}
		if ran := in.End.Sub(in.Start); ran < timeout-margin-5*time.Second {
			early = append(early, fmt.Sprintf("#%d after %.1fs", i+1, ran.Seconds()))
		}
	}
	if len(early) > 3 {
		early = append(early[:3], "...")
	}
	x.expect(len(early) == 0, "invocations handed over before their budget (%s less %s): %s", timeout, margin, strings.Join(early, ", "))
}

// admission403Eviction: the policy's reason is Forbidden (403); it is
// removed after 40 s.
func admission403Eviction(x *X) {
	liftedRefusal(x, http.StatusForbidden, func(pod string, _ *fp.Proxy) func() {
		return x.refuseEviction(pod, metav1.StatusReasonForbidden, http.StatusForbidden)
	})
}

// webhook500Eviction: a validating webhook that is down (failurePolicy
// Fail) makes the apiserver answer 500 to one pod's eviction; it is removed
// after 40 s.
func webhook500Eviction(x *X) {
	liftedRefusal(x, http.StatusInternalServerError, func(pod string, _ *fp.Proxy) func() { return x.refuseEvictionWebhook(pod) })
}

// evictionTimeout: one pod's eviction requests get no answer (held by the
// apiserver proxy, as a hung webhook or apiserver would) until the client
// gives up, for the first 40 s: each times out on the function's side (its
// 30 s per-request limit). Rule 13 as for a refusal (and 16: a timeout is
// not a verdict): the eviction is tried again, no invocation hands over
// before its budget, and the hook is completed with CONTINUE once the pod
// is evicted.
func evictionTimeout(x *X) {
	liftedRefusal(x, 0, func(pod string, api *fp.Proxy) func() {
		hole := api.Add(fp.Rule{Name: "eviction blackhole", Method: "POST", Path: regexp.MustCompile(`/pods/` + regexp.QuoteMeta(pod) + `/eviction$`), Fault: fp.Pass,
			Before: func(r *http.Request, _ []byte) {
				select {
				case <-r.Context().Done(): // the client gave up: forwarded cancelled, never applied
				case <-time.After(3 * time.Minute):
				}
			}})
		return hole.End // requests held at the lift stay held: the next ones pass
	})
}

// ---- 15: done means read again ----

// lateBoundPod: web (2 pods) on the target under a PDB minAvailable 2 holds
// the drain; once the drain has planned, a bare pod (EVICT_UNMANAGED_PODS)
// is created with spec.nodeName = the target, past the scheduler and the
// cordon; the PDB is deleted 15 s later. Rule 15: the late pod is evicted
// too, and the hook is completed with CONTINUE only after it is gone.
func lateBoundPod(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, 2)
	api, apiEnv := x.apiProxy(fp.Options{})
	rt := x.function(60*time.Second, apiEnv, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=10s", "EVICT_UNMANAGED_PODS=true")
	x.observe(nil)
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	x.began = time.Now()
	late := make(chan string, 1)
	go func() {
		defer close(late)
		ctx := x.ctx
		if wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return x.logged(`"drain plan"`), nil
		}) != nil {
			x.t.Errorf("setup: the drain never planned")
			return
		}
		p, err := env.BarePod(ctx, x.workload("late", 1), x.target.PrivateDNSName)
		if err != nil {
			x.t.Errorf("setup: late pod: %v", err)
			return
		}
		x.t.Logf("late pod %s bound to %s at %.1fs", p.Name, x.target.PrivateDNSName, time.Since(x.began).Seconds())
		late <- p.Name
		if _, err := env.WaitPodsRunning(ctx, x.ns, "app=late", 1, time.Minute); err != nil {
			x.t.Logf("late pod not running: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(15 * time.Second):
		}
		if err := env.Client.PolicyV1().PodDisruptionBudgets(x.ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			x.t.Errorf("setup: deleting the PDB: %v", err)
		}
		x.t.Logf("PDB web deleted at %.1fs", time.Since(x.began).Seconds())
	}()
	_, err := x.invoke(rt, payload)
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(3*time.Minute, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	name := <-late
	if !x.expect(name != "", "no late pod was created: the scene proves nothing") {
		return
	}
	all, _ := evictionAnswers(api, name, time.Time{}) // no moment: every answer counts as before it
	x.expect(accepted(all) > 0, "the late-bound pod %s was never evicted (eviction answers %v)", name, all)
	x.expect(x.drained == "yes", "node not drained: the late-bound pod %s is still on it", name)
}

// ---- 16: the hand-over is part of the budget ----

// functionAsync starts the function with Lambda's asynchronous retries (as
// EventBridge invokes it: a failed invocation is run again).
func (x *X) functionAsync(timeout time.Duration, extra ...string) *lambdart.Runtime {
	x.t.Helper()
	e, err := env.DrainerEnv(x.ctx, extra...)
	x.must(err)
	rt, err := lambdart.Start(x.ctx, lambdart.Options{Bootstrap: bootstrap, Env: e, Timeout: timeout,
		FunctionName: "node-drainer", MemoryMB: 256, Log: logWriter{x}, AsyncRetries: lambdart.DefaultAsyncRetries})
	x.must(err)
	x.t.Cleanup(func() { _ = rt.Stop() })
	return rt
}

// apiDownAcrossHandover: a PDB (minAvailable 2 of 2) holds the drain; the
// function's budget is 40 s - 10 s; the apiserver is unreachable from 4 s
// before the budget's end for 35 s, across the moment the drain must be
// handed over; the PDB is deleted at +100 s. Rule 16: the hand-over is not
// lost and the hook is not completed early with the failure result; the
// drain goes on (a continuation, or Lambda's retry) and the hook is
// completed with CONTINUE after the node is drained.
func apiDownAcrossHandover(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, 2)
	api, apiEnv := x.apiProxy(fp.Options{})
	rt := x.functionAsync(40*time.Second, apiEnv, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=10s",
		"CONTINUE_LONG_DRAINS=true", "LIFECYCLE_RESULT_ON_FAILURE=ABANDON")
	x.observe(nil)
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	x.began = time.Now()
	_, err := rt.InvokeAsync(payload)
	x.must(err)
	// the first invocation's start: its budget ends 30 s later
	var start time.Time
	_ = wait.PollUntilContextTimeout(x.ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if invs := rt.Invocations(); len(invs) > 0 && !invs[0].Start.IsZero() {
			start = invs[0].Start
			return true, nil
		}
		return false, nil
	})
	if start.IsZero() {
		x.t.Fatalf("setup: the first invocation did not start")
	}
	time.Sleep(time.Until(start.Add(26 * time.Second)))
	api.Down(35 * time.Second)
	x.t.Logf("apiserver down at %.1fs for 35s (budget ends at %.1fs)", time.Since(x.began).Seconds(), start.Add(30*time.Second).Sub(x.began).Seconds())
	liftAt := x.began.Add(100 * time.Second)
	go func() {
		select {
		case <-x.ctx.Done():
		case <-time.After(time.Until(liftAt)):
			if err := env.Client.PolicyV1().PodDisruptionBudgets(x.ns).Delete(x.ctx, "web", metav1.DeleteOptions{}); err != nil {
				x.t.Errorf("setup: deleting the PDB: %v", err)
			}
			x.t.Logf("PDB web deleted at %.1fs", time.Since(x.began).Seconds())
		}
	}()
	got := x.waitHook(3*time.Minute+30*time.Second, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	x.expect(x.drained == "yes", "node not drained")
	if got != nil && got.Time.Before(liftAt) {
		x.violate("hook completed at %.1fs (%s), while the PDB still held the drain (lifted at %.1fs)",
			got.Time.Sub(x.began).Seconds(), got.Params["LifecycleActionResult"], liftAt.Sub(x.began).Seconds())
	}
	for _, in := range rt.Invocations() {
		x.t.Logf("invocation %s attempt %d queued %.1fs start %.1fs end %.1fs %s %s", in.RequestID, in.Attempt,
			in.Queued.Sub(x.began).Seconds(), in.Start.Sub(x.began).Seconds(), in.End.Sub(x.began).Seconds(), in.ErrorType, in.Error)
	}
	_, c := api.Counts()
	x.expect(c[fp.Refused] > 0, "no request met the apiserver down: the scene proves nothing (%v)", c)
}

// leasePath matches the per-instance Leases (LEASE_NAMESPACE node-drainer).
var leasePath = regexp.MustCompile(`^/apis/coordination\.k8s\.io/v1/namespaces/node-drainer/leases`)

// leaseTimeoutNoLeaseAction: every request for the function's Leases is
// held by the proxy until the client gives up (a blackhole) for the whole
// first invocation, so that the claim times out. Rule 16: no action without
// a lease after a timeout: no cordon, no eviction in that invocation. Once
// the Leases answer again, the same event invoked again drains the node and
// completes the hook once, with CONTINUE, after the drain.
func leaseTimeoutNoLeaseAction(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, -1)
	released := make(chan struct{})
	api, apiEnv := x.apiProxy(fp.Options{})
	hole := api.Add(fp.Rule{Name: "lease blackhole", Path: leasePath, Fault: fp.Pass,
		Before: func(r *http.Request, _ []byte) {
			select {
			case <-r.Context().Done(): // the client gave up: forwarded cancelled, never applied
			case <-released:
			case <-time.After(3 * time.Minute):
			}
		}})
	rt := x.function(60*time.Second, apiEnv, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=10s")
	x.observe(nil)
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	_, err := x.invoke(rt, payload)
	hole.End()
	close(released)
	x.t.Logf("first invocation (leases blackholed, %d requests held): %v", hole.Hits(), err)
	invs := rt.Invocations()
	if len(invs) == 0 {
		x.t.Fatalf("setup: no invocation recorded")
	}
	first := invs[0]
	x.expect(hole.Hits() > 0, "no Lease request was held: the scene proves nothing")
	x.expect(!x.logged("acting without a lease"), "the function acted without a lease after a timeout (logged \"acting without a lease\")")
	nodePathOf := "/api/v1/nodes/" + x.target.PrivateDNSName
	var acts []string
	for _, r := range api.Requests() {
		if r.Time.Before(first.Start) || r.Time.After(first.End) || (r.Fault != "" && r.Fault != fp.Pass) {
			continue
		}
		switch {
		case r.Method == "POST" && evictionPath.MatchString(r.Path),
			(r.Method == "PATCH" || r.Method == "PUT") && r.Path == nodePathOf:
			acts = append(acts, fmt.Sprintf("%s %s at %.1fs (%d)", r.Method, r.Path, r.Time.Sub(x.began).Seconds(), r.Status))
		}
	}
	if len(acts) > 0 {
		x.violate("the node was cordoned or its pods evicted without a lease, in the invocation whose claim timed out: %s", strings.Join(acts, "; "))
	}
	// the same event again (EventBridge's or Lambda's retry), Leases answering
	_, err = x.invoke(rt, payload)
	x.t.Logf("second invocation: %v", err)
	got := x.waitHook(3*time.Minute, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	x.expect(x.drained == "yes", "node not drained once the Leases answered again")
}
