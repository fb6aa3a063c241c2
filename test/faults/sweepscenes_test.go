package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// sweepScenarios: rules 14 and 16 on the sweep's and the abrupt path's side
// (other tools' hooks, hooks of unknown age, dead kubelets, hibernation,
// orphaned attachments).
func sweepScenarios() []scenario {
	return []scenario{
		{"other-tools-hooks-sweep", otherToolsHooksSweep},
		{"sweep-hook-unknown-age-held", sweepHookUnknownAgeHeld},
		{"sweep-40-stuck-hooks", sweep40StuckHooks},
		{"shared-group-tag-two-deployments", sharedTagTwoDeployments},
		{"shared-group-tag-other-hook-names", sharedTagOtherHookNames},
	}
}

// sharedTagOtherHookNames: two deployments choose groups by one tag and use
// different hook names. Cluster A's group names its cluster in its own tags
// (kubernetes.io/cluster/testenv, as terraform-aws-eks and eksctl tag
// theirs). Both sweep: B (cluster staging, hooks staging-*) must put no
// hook on A's group — it would have no owner there, and every scale-in
// would wait its whole heartbeat timeout — and A puts its own. A scale-in
// then waits on A's hook alone, which A drains and completes once.
func sharedTagOtherHookNames(x *X) {
	groupTag := "node-drainer.io/" + x.name // this scene's alone: the sweeps put hooks on every group carrying it
	x.scene(sceneOpts{nodes: 2, groupTags: map[string]string{groupTag: "true"}, noHooks: true})
	x.web("web", 2, -1, -1)
	x.observe(nil)
	byTag := "ASG_TAG_KEY=" + groupTag
	b := x.function(60*time.Second, byTag, "CLUSTER_NAME=staging", "CLUSTER_TAG_KEY=kubernetes.io/cluster/staging",
		"TERMINATE_HOOK_NAME=staging-terminate", "LAUNCH_HOOK_NAME=staging-launch")
	a := x.function(60*time.Second, byTag)
	for _, rt := range []*lambdart.Runtime{b, a} {
		if out, ok := x.sweep(rt); ok {
			x.t.Logf("sweep: hooks put %v, notes %v", out.Sweep.HooksPut, out.Sweep.Notes)
		}
	}
	out, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).DescribeLifecycleHooks(x.ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(x.asg)})
	x.must(err)
	var names []string
	for _, h := range out.LifecycleHooks {
		names = append(names, aws.ToString(h.LifecycleHookName))
	}
	slices.Sort(names)
	x.expect(slices.Equal(names, []string{harness.TerminateHook}), "the group's hooks %v: want A's %s alone, none of B's", names, harness.TerminateHook)
	x.hookAfterDrain = true
	x.drainThenComplete(a, x.terminating("token-"+x.name), 60*time.Second)
}

// sharedTagTwoDeployments: two clusters in one account and region, each with
// node-drainer deployed with the templates' defaults: their groups carry
// node-drainer.io/enabled=true and their hooks the same names, so each
// deployment receives the other's lifecycle events and sweeps the other's
// groups. Deployment B (CLUSTER_TAG_KEY kubernetes.io/cluster/staging) gets
// the terminate event of cluster A's instance first, then sweeps while it
// waits: it must leave it (no completion, no heartbeat, nothing evicted or
// marked). A then drains the node and completes the hook, once.
func sharedTagTwoDeployments(x *X) {
	const groupTag = "node-drainer.io/enabled"
	x.scene(sceneOpts{nodes: 2, groupTags: map[string]string{groupTag: "true"}})
	x.web("web", 2, -1, -1)
	x.observe(nil)
	before := x.podsOn(x.target.PrivateDNSName)
	byTag := "ASG_TAG_KEY=" + groupTag
	b := x.function(60*time.Second, byTag, "CLUSTER_TAG_KEY=kubernetes.io/cluster/staging")
	payload := x.terminating("token-" + x.name)
	out, err := x.invoke(b, payload)
	x.expect(err == nil && out.Action == handler.ActionIgnored && strings.Contains(out.Detail, "another cluster's"),
		"the other deployment's outcome: %s %q (%v), want it ignored as another cluster's", out.Action, out.Detail, err)
	if out, ok := x.sweep(b); ok {
		x.t.Logf("the other deployment's sweep: %s", out.Detail)
	}
	x.idle(b)
	x.untouchedCheck(before, "the other deployment's event and sweep")
	_, all := x.completions()
	beats := x.lifecycleCalls("RecordLifecycleActionHeartbeat")
	x.expect(len(all)+len(beats) == 0, "the other deployment called Auto Scaling on this cluster's hook: %d completions, %d heartbeats", len(all), len(beats))
	x.hookAfterDrain = true
	x.drainThenComplete(x.function(60*time.Second, byTag), payload, 60*time.Second)
}

// ---- the sweep's scenes: helpers ----

// Each sweep scene is a cluster of its own as the sweep sees it: its ASG
// carries the cluster tag swTag(name) and the function is told that tag and
// the ASG (ASG_NAMES, as the templates always set it), so a sweep never acts
// on another scene's instances.

func (x *X) swTag() string { return "kubernetes.io/cluster/" + x.name }

// sweepFunction starts the function as the scene's own cluster sees it.
func (x *X) sweepFunction(timeout time.Duration, extra ...string) *lambdart.Runtime {
	x.t.Helper()
	return x.function(timeout, append([]string{"CLUSTER_TAG_KEY=" + x.swTag(), "ASG_NAMES=" + x.asg}, extra...)...)
}

// sweep invokes the scheduled sweep once (events/sweep.json) and returns its
// outcome; a function error or an outcome that is not a sweep's is recorded
// as not held.
func (x *X) sweep(rt *lambdart.Runtime) (handler.Outcome, bool) {
	payload, err := harness.EventFile("sweep.json", nil)
	x.must(err)
	out, err := x.invoke(rt, payload)
	ok := x.expect(err == nil, "sweep invocation failed: %v", err) &&
		x.expect(out.Action == handler.ActionSwept && out.Sweep != nil, "sweep outcome %s %q: want swept with a summary", out.Action, out.Detail)
	return out, ok
}

// callsFor returns the lifecycle calls of operation op for an instance.
func (x *X) callsFor(id, op string) []moto.LifecycleCall {
	calls, err := env.AWS.LifecycleCalls(x.ctx)
	x.must(err)
	var out []moto.LifecycleCall
	for _, c := range calls {
		if c.Operation == op && c.Params["InstanceId"] == id {
			out = append(out, c)
		}
	}
	return out
}

func okCalls(calls []moto.LifecycleCall) []moto.LifecycleCall {
	var out []moto.LifecycleCall
	for _, c := range calls {
		if c.OK() {
			out = append(out, c)
		}
	}
	return out
}

// lostInvokes stands for Lambda's Invoke API behind which every
// asynchronous invocation is accepted (202) and then lost, as one throttled
// until its event age ran out, or failed through its retries into the DLQ:
// the function's continuations are recorded and never run. The sweep is
// then what carries a hook whose continuation went missing, as it carries a
// hook whose event went missing (ARCHITECTURE.md §10).
type lostInvokes struct {
	srv      *httptest.Server
	mu       sync.Mutex
	payloads [][]byte
}

// loseContinuations starts the lost Invoke API; pass its env entry to the
// function (AWS_ENDPOINT_URL_LAMBDA, which wins over the runtime's own).
func (x *X) loseContinuations() (*lostInvokes, string) {
	l := &lostInvokes{}
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		l.mu.Lock()
		l.payloads = append(l.payloads, b)
		n := len(l.payloads)
		l.mu.Unlock()
		w.Header().Set("X-Amzn-Requestid", fmt.Sprintf("lost-%d", n))
		w.WriteHeader(http.StatusAccepted)
	}))
	x.t.Cleanup(l.srv.Close)
	return l, "AWS_ENDPOINT_URL_LAMBDA=" + l.srv.URL
}

// continuationsFor counts the continuations handed over for an instance.
func (l *lostInvokes) continuationsFor(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, p := range l.payloads {
		if strings.Contains(string(p), id) {
			n++
		}
	}
	return n
}

// ---- rule 14: only our hooks, on the sweep's path too ----

// otherToolsHooksSweep: with the templates' defaults (HOOK_NAMES empty;
// the hooks node-drainer creates are node-drainer-terminate and
// node-drainer-launch), an ASG whose only hooks are another tool's —
// app-warmup on launch, flush-logs on terminate — has one instance waiting
// in Pending:Wait on app-warmup (its node Ready) and one in
// Terminating:Wait on flush-logs (pods on its node). A sweep must leave
// both alone: no CompleteLifecycleAction, no heartbeat, nothing evicted,
// the node not cordoned nor marked.
func otherToolsHooksSweep(x *X) {
	const warmup, flush = "app-warmup", "flush-logs"
	insts, err := env.CreateASG(x.ctx, harness.ASGSpec{Name: x.asg, Size: 2, ClusterTag: x.swTag()})
	x.must(err)
	x.insts, x.target = insts, insts[0]
	launching := insts[1]
	for _, in := range insts {
		x.must(env.AddNodeFor(x.ctx, in, map[string]string{"pool": x.name}))
	}
	x.must(env.Namespace(x.ctx, x.ns))
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	for hook, transition := range map[string]string{warmup: "autoscaling:EC2_INSTANCE_LAUNCHING", flush: "autoscaling:EC2_INSTANCE_TERMINATING"} {
		_, err := asc.PutLifecycleHook(x.ctx, &autoscaling.PutLifecycleHookInput{
			AutoScalingGroupName: aws.String(x.asg), LifecycleHookName: aws.String(hook),
			LifecycleTransition: aws.String(transition), HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE"),
		})
		x.must(err)
	}
	x.web("web", 2, -1, -1)
	before := x.podsOn(x.target.PrivateDNSName)
	x.must(env.AWS.RegisterLifecycleAction(x.ctx, moto.LifecycleAction{ASG: x.asg, Hook: flush, InstanceID: x.target.ID, Token: "token-flush-logs"}))
	x.must(env.AWS.RegisterLifecycleAction(x.ctx, moto.LifecycleAction{ASG: x.asg, Hook: warmup, InstanceID: launching.ID, Token: "token-app-warmup",
		Transition: "autoscaling:EC2_INSTANCE_LAUNCHING"}))
	x.must(env.WaitNodeReady(x.ctx, launching.PrivateDNSName, true, 30*time.Second))

	rt := x.sweepFunction(60 * time.Second)
	out, ok := x.sweep(rt)
	x.idle(rt)
	if ok {
		x.expect(!slices.Contains(out.Sweep.Hooks, x.target.ID) && !slices.Contains(out.Sweep.Hooks, launching.ID),
			"the sweep handled another tool's hooks: hooks %v (%s on %s, %s on %s)", out.Sweep.Hooks, flush, x.target.ID, warmup, launching.ID)
	}
	for _, c := range []struct{ id, hook string }{{x.target.ID, flush}, {launching.ID, warmup}} {
		done := x.callsFor(c.id, "CompleteLifecycleAction")
		beats := x.callsFor(c.id, "RecordLifecycleActionHeartbeat")
		if len(done) > 0 {
			x.violate("another tool's hook %s on %s was completed: %d CompleteLifecycleAction calls, first at %s with %s",
				c.hook, c.id, len(done), firstTime(done, x.began), firstResult(done))
		}
		if len(beats) > 0 {
			x.violate("another tool's hook %s on %s was heartbeated: %d RecordLifecycleActionHeartbeat calls", c.hook, c.id, len(beats))
		}
	}
	x.untouchedCheck(before, "another tool's terminate hook")
}

// idle waits (bounded) until the function has nothing left to run.
func (x *X) idle(rt *lambdart.Runtime) {
	ctx, cancel := context.WithTimeout(x.ctx, 2*time.Minute)
	defer cancel()
	_ = rt.WaitIdle(ctx)
}

func firstTime(calls []moto.LifecycleCall, from time.Time) string {
	if len(calls) == 0 {
		return "never"
	}
	return fmtSince(calls[0].Time, from)
}

func firstResult(calls []moto.LifecycleCall) string {
	if len(calls) == 0 {
		return "-"
	}
	return calls[0].Params["LifecycleActionResult"] + " (" + calls[0].Outcome + ")"
}

// ---- rule 16: a hook of unknown age, taken by the sweep ----

const (
	// unknownAgeDrainTimeout is the scene's DRAIN_TIMEOUT.
	unknownAgeDrainTimeout = 90 * time.Second
	// unknownAgeSweepEvery is the scene's sweep schedule.
	unknownAgeSweepEvery = 35 * time.Second
	// unknownAgeSlack is how long after DRAIN_TIMEOUT (counted from the
	// first sweep that took the hook) the failure result may come: the first
	// sweep at or after the drain's deadline comes at most one schedule
	// period after it and completes the hook at once (its reading and the
	// completion take a few seconds: 15 s allowed); a sweep whose drain is
	// still running at the deadline completes it at the deadline.
	unknownAgeSlack = unknownAgeSweepEvery + 15*time.Second
	// heartbeatAtOnce is how soon after a sweep begins the hook it takes must
	// be heartbeated: the sweep's reading and the instance's own reads
	// (EC2, the lease) take a second or two.
	heartbeatAtOnce = 5 * time.Second
)

// sweepHookUnknownAgeHeld: our terminate hook waits in Terminating:Wait and
// its event never came; the node's drain is held by a PDB that allows no
// disruption. The sweep runs every 35 s (function timeout 30 s,
// DEADLINE_MARGIN 10 s, DRAIN_TIMEOUT 90 s, LIFECYCLE_RESULT_ON_FAILURE
// ABANDON), and every continuation the function hands over is lost (Lambda
// accepts it and never runs it: throttled, or failed into the DLQ), so the
// sweeps alone carry the hook. Rule 16: a hook the sweep takes (its age
// unknown) is heartbeated at once, by each sweep that takes it; its
// DRAIN_TIMEOUT counts from when its drain began, not from each sweep, so
// it is completed once, with ABANDON, no earlier than DRAIN_TIMEOUT and no
// later than DRAIN_TIMEOUT + unknownAgeSlack after the first sweep took it.
func sweepHookUnknownAgeHeld(x *X) {
	x.scene(sceneOpts{nodes: 2, clusterTag: x.swTag()})
	x.web("web", 2, 0, -1) // maxUnavailable 0: every eviction answers 429
	lost, lambdaEnv := x.loseContinuations()
	rt := x.sweepFunction(30*time.Second, lambdaEnv, fmt.Sprintf("DRAIN_TIMEOUT=%s", unknownAgeDrainTimeout),
		"DEADLINE_MARGIN=10s", "LIFECYCLE_RESULT_ON_FAILURE=ABANDON")
	x.observe(map[string]int{"app=web": 2})
	x.terminating("token-never-sent") // its event is never delivered
	completed := func() bool { return len(okCalls(x.callsFor(x.target.ID, "CompleteLifecycleAction"))) > 0 }
	type sweepRun struct {
		at   time.Time
		took bool
	}
	var sweeps []sweepRun
	x.began = time.Now()
	last := x.began.Add(unknownAgeDrainTimeout + unknownAgeSlack)
	for k := 0; ; k++ {
		next := x.began.Add(time.Duration(k) * unknownAgeSweepEvery)
		if !next.Before(last) {
			break
		}
		_ = wait.PollUntilContextTimeout(x.ctx, 500*time.Millisecond, time.Until(next), true, func(context.Context) (bool, error) {
			return completed(), nil
		})
		if completed() || x.ctx.Err() != nil {
			break
		}
		at := time.Now()
		out, ok := x.sweep(rt)
		s := sweepRun{at: at, took: ok && slices.Contains(out.Sweep.Hooks, x.target.ID)}
		sweeps = append(sweeps, s)
		x.t.Logf("sweep %d at %s: took the hook: %v; held %v; notes %v", k+1, fmtSince(at, x.began), s.took, out.Sweep.Held, out.Sweep.Notes)
	}
	_ = wait.PollUntilContextTimeout(x.ctx, 500*time.Millisecond, time.Until(last), true, func(context.Context) (bool, error) {
		return completed(), nil
	})
	x.idle(rt)
	x.setDrained()
	x.checkFloors()

	// heartbeated at once by each sweep that took it
	beats := okCalls(x.callsFor(x.target.ID, "RecordLifecycleActionHeartbeat"))
	x.expect(len(sweeps) > 0 && sweeps[0].took, "the first sweep did not take the waiting hook")
	for i, s := range sweeps {
		if !s.took {
			continue
		}
		first := time.Time{}
		for _, b := range beats {
			if !b.Time.Before(s.at) {
				first = b.Time
				break
			}
		}
		x.expect(!first.IsZero() && first.Sub(s.at) <= heartbeatAtOnce,
			"sweep %d (at %s) took a hook of unknown age without a heartbeat within %s: next heartbeat at %s",
			i+1, fmtSince(s.at, x.began), heartbeatAtOnce, fmtSince(first, x.began))
	}

	// completed once, with the failure result, in its time
	_, all := x.completions()
	ok := okCalls(all)
	x.t.Logf("%d sweeps, %d heartbeats, %d continuations lost, completion calls %d", len(sweeps), len(beats), lost.continuationsFor(x.target.ID), len(all))
	if len(ok) > 1 {
		x.violate("%d successful CompleteLifecycleAction calls for one lifecycle action", len(ok))
	}
	if !x.expect(len(ok) > 0, "hook not completed by %s after the first sweep took it (DRAIN_TIMEOUT %s + %s): its drain timeout restarted at each sweep?",
		unknownAgeDrainTimeout+unknownAgeSlack, unknownAgeDrainTimeout, unknownAgeSlack) {
		return
	}
	at := ok[0].Time.Sub(x.began)
	x.expect(ok[0].Params["LifecycleActionResult"] == "ABANDON", "completed with %s, want the failure result ABANDON (the drain never finished)", ok[0].Params["LifecycleActionResult"])
	x.expect(at >= unknownAgeDrainTimeout-5*time.Second, "completed with %s at %.1fs, before DRAIN_TIMEOUT %s", ok[0].Params["LifecycleActionResult"], at.Seconds(), unknownAgeDrainTimeout)
	x.expect(at <= unknownAgeDrainTimeout+unknownAgeSlack, "completed at %.1fs, later than DRAIN_TIMEOUT %s + %s", at.Seconds(), unknownAgeDrainTimeout, unknownAgeSlack)
}

// ---- rule 16: 40 stuck hooks in one sweep ----

const stuckHooks = 40

// sweep40StuckHooks: 40 instances wait in Terminating:Wait on our hook, none
// of their events came; each node runs one pod under a PDB that allows no
// disruption (minAvailable 1 over a bare pod), so every drain lasts as long
// as it is allowed to. One sweep, function timeout 45 s (DEADLINE_MARGIN
// 20 s: 25 s of budget), continuations lost (recorded, never run). The
// sweep's parallel slots fill with drains that run to the budget; the hooks
// queued behind them must not start after it. Rule 16: no hook acted on
// without a lease ("acting without a lease" never logged), none completed
// (DRAIN_TIMEOUT is 30 min: any completion is early, with the failure
// result), and each hook either handled — heartbeated, its node marked by
// a drain held under its lease — or left for the next sweep, which the
// sweep's outcome notes (its id in a note). The sweep itself ends within
// its deadline with a swept outcome.
func sweep40StuckHooks(x *X) {
	insts, err := env.CreateASG(x.ctx, harness.ASGSpec{Name: x.asg, Size: stuckHooks, Hooks: true, ClusterTag: x.swTag()})
	x.must(err)
	if len(insts) != stuckHooks {
		x.must(fmt.Errorf("the ASG has %d instances, want %d", len(insts), stuckHooks))
	}
	x.insts, x.target = insts, insts[0]
	x.must(env.Namespace(x.ctx, x.ns))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 8)
	)
	for i, in := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			w := x.workload(fmt.Sprintf("stuck-%02d", i), 1)
			err := env.AddNodeFor(x.ctx, in, map[string]string{"pool": x.name})
			if err == nil {
				_, err = env.BarePod(x.ctx, w, in.PrivateDNSName)
			}
			if err == nil {
				_, err = env.PDB(x.ctx, w, -1, 1)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	x.must(errors.Join(errs...))
	_, err = env.WaitPodsRunning(x.ctx, x.ns, "", len(insts), 2*time.Minute)
	x.must(err)
	for _, in := range insts {
		x.must(env.AWS.RegisterLifecycleAction(x.ctx, moto.LifecycleAction{ASG: x.asg, Hook: harness.TerminateHook, InstanceID: in.ID, Token: "token-" + in.ID}))
	}
	lost, lambdaEnv := x.loseContinuations()
	rt := x.sweepFunction(45*time.Second, lambdaEnv)
	out, ok := x.sweep(rt)
	x.idle(rt)
	x.drained = "no"
	for _, inv := range rt.Invocations() {
		x.expect(!inv.TimedOut(), "the sweep ran past its deadline (%s): killed mid-drain", inv.Error)
	}
	if n := x.countLogged("acting without a lease"); n > 0 {
		x.violate("%d hook paths acted without a lease (claimed with an expired context)", n)
	}
	handled, noted := 0, 0
	for _, in := range insts {
		if all := x.callsFor(in.ID, "CompleteLifecycleAction"); len(all) > 0 {
			x.violate("hook of %s completed with %s at %s, its drain held and DRAIN_TIMEOUT 30 min away", in.ID, firstResult(all), firstTime(all, x.began))
		}
		if !ok {
			continue
		}
		note := slices.ContainsFunc(out.Sweep.Notes, func(s string) bool { return strings.Contains(s, in.ID) })
		if !slices.Contains(out.Sweep.Hooks, in.ID) {
			if x.expect(note, "hook of %s neither handled nor noted as left for the next sweep", in.ID) {
				noted++
			}
			continue
		}
		handled++
		beats := okCalls(x.callsFor(in.ID, "RecordLifecycleActionHeartbeat"))
		n := x.getNode(in.PrivateDNSName)
		x.expect(len(beats) > 0 && node.Holds(n, node.CauseTerminate),
			"hook of %s reported handled, but heartbeats %d, node drain mark %v (continuations handed over %d)",
			in.ID, len(beats), node.Holds(n, node.CauseTerminate), lost.continuationsFor(in.ID))
	}
	x.t.Logf("%d hooks handled, %d left for the next sweep, %d continuations handed over", handled, noted, lost.count())
	if ok {
		x.expect(handled > 0, "the sweep handled none of %d waiting hooks", len(insts))
	}
}

// countLogged counts the function's log lines that contain s.
func (x *X) countLogged(s string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return bytes.Count(x.logs.Bytes(), []byte(s))
}

// count is how many invocations were handed over (and lost).
func (l *lostInvokes) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.payloads)
}
