package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
)

// simScenarios: the classes of bugs the simulation (test/sim, issue 29)
// found in the recovery paths, each staged once on the real harness: the
// simulation is the fast, exhaustive level, these scenes the truthful one.
// Each fails with its fix reverted (docs/testing.md, the teeth table).
func simScenarios() []scenario {
	return []scenario{
		{"heartbeat-lost-short-timeout", heartbeatLostShortTimeout},
		{"continuation-ec2-unreadable", continuationEC2Unreadable},
		{"completion-throttled-past-sdk", completionThrottledPastSDK},
		{"stale-cache-pod-list", staleCachePodList},
		{"hook-gone-ends-drain", hookGoneEndsDrain},
	}
}

// sdkAttempts is how many times the function's AWS retryer (standard, 8
// attempts, backoff up to 5 s: functions/node-drainer/main.go) sends one
// call before it gives up.
const sdkAttempts = 8

// heartbeatTimeout sets the scene's terminate hook's heartbeat timeout (s).
func (x *X) heartbeatTimeout(secs int32) {
	_, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).PutLifecycleHook(x.ctx, &autoscaling.PutLifecycleHookInput{
		AutoScalingGroupName: aws.String(x.asg), LifecycleHookName: aws.String(harness.TerminateHook),
		LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(secs), DefaultResult: aws.String("CONTINUE"),
	})
	x.must(err)
}

// heartbeatLostShortTimeout: the hook's heartbeat timeout is 90 s (short,
// so the scene is: the templates ask for 180 s at least), so the function
// heartbeats every 45 s; a PDB holds the drain 100 s. The first heartbeat
// is lost: each of the SDK's 8 attempts at it is answered 503 (the SDK
// gives up, after 15 s or so of its backoff). The hook must not time out
// mid-drain: the failed heartbeat is tried again within seconds, not an
// interval later, when the hook would be past 90 s without one. The scene
// reads the heartbeats that reached the emulator and says when Auto
// Scaling would have timed the hook out (no successful heartbeat, nor the
// completion, within 90 s of the hook's start or of the heartbeat before);
// the emulator itself ends the action then, with CONTINUE.
func heartbeatLostShortTimeout(x *X) {
	const ht = 90 * time.Second
	x.scene(sceneOpts{nodes: 2})
	x.heartbeatTimeout(int32(ht / time.Second))
	x.web("web", 3, 1, -1)  // floor 2
	x.web("held", 1, -1, 1) // held until the PDB goes
	lost, awsEnv := x.awsProxy(fp.Options{Rules: []fp.Rule{{Name: "lost heartbeat", Body: "Action=RecordLifecycleActionHeartbeat",
		Fault: fp.ServerError, Times: sdkAttempts}}})
	rt := x.function(150*time.Second, append(awsEnv, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=5s")...)
	x.observe(map[string]int{"app=web": 2})
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	hookAt := time.Now() // the action is registered: the hook's clock runs (later than it did: the check is the kinder for it)
	x.began = hookAt
	lifted := x.deletePDBAfter("held", 100*time.Second)
	got := x.drainThenComplete(rt, payload, 3*time.Minute)
	<-lifted
	faulted := 0
	for _, r := range lost.Requests() {
		if r.Fault == fp.ServerError {
			faulted++
		}
	}
	x.expect(faulted == sdkAttempts, "%d heartbeat attempts answered 503, want %d (one heartbeat lost): the scene proves nothing", faulted, sdkAttempts)
	// the hook's timeline: its start, every heartbeat that reached Auto
	// Scaling, its completion
	marks := []time.Time{hookAt}
	for _, c := range x.lifecycleCalls("RecordLifecycleActionHeartbeat") {
		if c.OK() {
			marks = append(marks, c.Time)
		}
	}
	if got == nil {
		return
	}
	marks = append(marks, got.Time)
	for i := 1; i < len(marks); i++ {
		if gap := marks[i].Sub(marks[i-1]); gap > ht {
			x.violate("the hook timed out at %s (heartbeat timeout %s) mid-drain: no heartbeat from %s to %s, one was lost and not tried again in time",
				fmtSince(marks[i-1].Add(ht), x.began), ht, fmtSince(marks[i-1], x.began), fmtSince(marks[i], x.began))
			break
		}
	}
	x.t.Logf("hook timeline (s): %s", timeline(marks, x.began))
}

func timeline(marks []time.Time, from time.Time) string {
	var s []string
	for _, m := range marks {
		s = append(s, fmt.Sprintf("%.1f", m.Sub(from).Seconds()))
	}
	return strings.Join(s, " ")
}

// continuationEC2Unreadable: a continuation (attempt 2: an earlier
// invocation read the instance as the cluster's, drained 30 s and handed
// over) arrives while EC2 answers every DescribeInstances with 503, and the
// hook's ASG is not in ASG_NAMES. The hook is known to be ours: the drain
// goes on without EC2's view (the node found by providerID, nothing forced)
// and the hook is completed, CONTINUE, after it; not left to Lambda's retry
// a minute later, then two, past a short heartbeat timeout.
func continuationEC2Unreadable(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 3, 1, -1) // floor 2
	aws, awsEnv := x.awsProxy(fp.Options{Rules: []fp.Rule{{Name: "EC2 unreadable", Body: "Action=DescribeInstances", Fault: fp.ServerError}}})
	rt := x.function(120*time.Second, append(awsEnv, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=5s")...)
	x.observe(map[string]int{"app=web": 2})
	x.hookAfterDrain = true
	payload := x.continuation(time.Now().Add(-30*time.Second), 2)
	x.drainThenComplete(rt, payload, 2*time.Minute)
	refused := 0
	for _, r := range aws.Requests() {
		if strings.Contains(string(r.Body), "Action=DescribeInstances") && r.Fault == fp.ServerError {
			refused++
		}
	}
	x.expect(refused > 0, "no DescribeInstances was refused: the scene proves nothing")
	x.expect(!hasTaint(x.getNode(x.target.PrivateDNSName), "node.kubernetes.io/out-of-service"), "out-of-service taint placed without EC2's view")
	x.t.Logf("DescribeInstances answered 503 %d times", refused)
}

// completionThrottledPastSDK: the drain done, CompleteLifecycleAction is
// throttled at each of the SDK's attempts (a throttling storm: the SDK
// gives up). The completion is tried again within the margin kept for it,
// and the hook is completed once, CONTINUE, in this invocation: not left to
// Lambda's retry a minute later.
func completionThrottledPastSDK(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 3, 1, -1) // floor 2
	aws, awsEnv := x.awsProxy(fp.Options{Rules: []fp.Rule{{Name: "throttling storm", Body: "Action=CompleteLifecycleAction", Fault: fp.Throttle, Times: sdkAttempts}}})
	rt := x.function(60*time.Second, append(awsEnv, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=10s")...)
	x.observe(map[string]int{"app=web": 2})
	x.hookAfterDrain = true
	got := x.drainThenComplete(rt, x.terminating("token-"+x.name), 2*time.Minute)
	var throttled []time.Time
	for _, r := range aws.Requests() {
		if strings.Contains(string(r.Body), "Action=CompleteLifecycleAction") && r.Fault == fp.Throttle {
			throttled = append(throttled, r.Time)
		}
	}
	x.expect(len(throttled) == sdkAttempts, "CompleteLifecycleAction throttled %d times, want %d (the SDK gave up once): the scene proves nothing", len(throttled), sdkAttempts)
	if got != nil && len(throttled) > 0 {
		x.t.Logf("completed %.1fs after the first throttled attempt", got.Time.Sub(throttled[0]).Seconds())
	}
	async := 0
	for _, inv := range rt.Invocations() {
		if inv.Async {
			async++
		}
	}
	x.expect(len(rt.Invocations()) == 1 && async == 0, "%d invocations: the hook was completed by a retry, not in its invocation", len(rt.Invocations()))
}

// staleCachePodList: the apiserver's watch cache lags behind etcd: every
// list of the target's pods served from it (resourceVersion=0) answers the
// node as it was before the pod slow was bound to it (no pod; the list's
// real resourceVersion of then), and the first watch of the node's pods is
// answered 30 s late (the cache catching up). slow takes 40 s to stop once
// evicted (its containers' grace period: kwok holds its deletion until the
// scene lets it go), so it stays on the node, Terminating, meanwhile. The
// drain's plan is a quorum read and finds slow; the list that tells when
// the planned pods are gone must be one too: a pod the cache has not seen is
// not gone. The hook is completed, CONTINUE, only after slow is gone.
func staleCachePodList(x *X) {
	const stops = 40 * time.Second
	x.scene(sceneOpts{nodes: 2})
	name := x.target.PrivateDNSName
	// the node as the cache still has it: before slow is bound
	then, err := env.Client.CoreV1().Pods(metav1.NamespaceAll).List(x.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	x.must(err)
	if err := errIfPods(then.Items); err != nil {
		x.must(fmt.Errorf("stale list: %w", err))
	}
	then.Kind, then.APIVersion = "PodList", "v1"
	stale, err := json.Marshal(then)
	x.must(err)
	x.web("slow", 1, -1, -1)
	slow := x.podsOn(name)
	if len(slow) != 1 {
		x.must(fmt.Errorf("%d pods on the target, want slow alone", len(slow)))
	}
	// its deletion is not finished by kwok until the annotation goes
	mark := func(on bool) error {
		v := `"true"`
		if !on {
			v = "null"
		}
		_, err := env.Client.CoreV1().Pods(x.ns).Patch(context.Background(), slow[0].Name, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+harness.KubeletStoppedAnnotation+`":`+v+`}}}`), metav1.PatchOptions{})
		return err
	}
	x.must(mark(true))
	podsPath := regexp.MustCompile(`^/api/v1/pods$`)
	var held atomic.Int32 // watches held
	ofNode := func(r *http.Request) bool { return r.URL.Query().Get("fieldSelector") == "spec.nodeName="+name }
	api, apiEnv := x.apiProxy(fp.Options{Rules: []fp.Rule{
		{Name: "stale cache list", Method: "GET", Path: podsPath, Query: "resourceVersion=0", Match: ofNode, Fault: fp.Answer, Reply: string(stale),
			Before: func(r *http.Request, _ []byte) {
				x.t.Logf("pod list served from the lagging cache: %s", r.URL.RawQuery)
			}},
		{Name: "lagging cache watch", Method: "GET", Path: podsPath, Query: "watch=true", Match: ofNode, Fault: fp.Pass, Times: 1,
			Before: func(*http.Request, []byte) {
				held.Add(1)
				select {
				case <-x.ctx.Done():
				case <-time.After(30 * time.Second):
				}
			}},
	}})
	rt := x.function(120*time.Second, apiEnv, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=10s")
	x.observe(nil)
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	x.began = time.Now()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-x.ctx.Done():
			return
		case <-time.After(stops):
		}
		if err := mark(false); err != nil && !apierrors.IsNotFound(err) {
			x.t.Errorf("setup: letting slow stop: %v", err)
		}
		x.t.Logf("slow's containers stopped at %.1fs", time.Since(x.began).Seconds())
	}()
	got := x.drainThenComplete(rt, payload, 3*time.Minute)
	if got != nil && got.Time.Sub(x.began) < stops-5*time.Second {
		x.violate("hook completed at %.1fs with slow still stopping until %s: a pod list served from a lagging cache counted it as gone", got.Time.Sub(x.began).Seconds(), stops)
	}
	<-stopped
	served := 0
	for _, r := range api.Requests() {
		if r.Fault == fp.Answer {
			served++
		}
	}
	x.t.Logf("pod lists served from the lagging cache: %d; watches held 30 s: %d", served, held.Load())
	x.expect(held.Load() == 1, "%d watches of the node's pods held: the scene proves nothing", held.Load())
	x.expect(len(evictions(api)[slow[0].Name]) > 0, "slow was never evicted: the scene proves nothing")
}

// errIfPods: the stale list must be of an empty node (the scene's target
// has no pod before held).
func errIfPods(pods []corev1.Pod) error {
	if len(pods) > 0 {
		return fmt.Errorf("%d pods on the target already", len(pods))
	}
	return nil
}

// hookGoneEndsDrain: a PDB holds the drain (held, minAvailable 1, deleted
// at 60 s); the hook's heartbeat timeout is 30 s (a heartbeat every 15 s).
// 5 s after the drain planned, the lifecycle action is completed elsewhere
// (an operator's complete-lifecycle-action; a hook timed out reads the
// same): the instance is leaving without the function. The next heartbeat
// answers that no lifecycle action is active: the drain stops there, its
// lease released (done, so a late duplicate does nothing), and nothing is
// evicted after that. Held by the drain until its budget, the lease would
// keep the sweep from releasing the node once the instance is gone.
func hookGoneEndsDrain(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.heartbeatTimeout(30)
	x.web("held", 1, -1, 1)
	held := x.podsOn(x.target.PrivateDNSName)
	rt := x.function(120*time.Second, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=10s")
	x.observe(nil)
	token := "token-" + x.name
	payload := x.terminating(token)
	x.began = time.Now()
	lifted := x.deletePDBAfter("held", 60*time.Second)
	elsewhere := make(chan time.Time, 1)
	go func() {
		defer close(elsewhere)
		for !x.logged(`"drain plan"`) {
			select {
			case <-x.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		time.Sleep(5 * time.Second)
		_, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).CompleteLifecycleAction(context.Background(), &autoscaling.CompleteLifecycleActionInput{
			AutoScalingGroupName: aws.String(x.asg), LifecycleHookName: aws.String(harness.TerminateHook),
			LifecycleActionToken: aws.String(token), InstanceId: aws.String(x.target.ID), LifecycleActionResult: aws.String("CONTINUE"),
		})
		if err != nil {
			x.t.Errorf("setup: completing the action elsewhere: %v", err)
			return
		}
		x.t.Logf("lifecycle action completed elsewhere at %.1fs", time.Since(x.began).Seconds())
		elsewhere <- time.Now()
	}()
	out, err := x.invoke(rt, payload)
	ended := time.Now()
	x.expect(err == nil, "invocation failed: %v", err)
	at, ok := <-elsewhere
	if !x.expect(ok, "the lifecycle action was not completed elsewhere: the scene proves nothing") {
		return
	}
	// the next heartbeat comes within an interval (15 s) of the action's end
	x.expect(ended.Sub(at) < 25*time.Second, "the drain went on %.1fs after its lifecycle action was gone (ended at %.1fs; the action gone at %.1fs)",
		ended.Sub(at).Seconds(), ended.Sub(x.began).Seconds(), at.Sub(x.began).Seconds())
	x.expect(out.Action == handler.ActionIgnored && strings.Contains(out.Detail, "drain stopped"), "outcome %q %q, want the drain stopped (%s)", out.Action, out.Detail, handler.ActionIgnored)
	l, err := env.Client.CoordinationV1().Leases(harness.LeaseNamespace).Get(x.ctx, lease.Name(x.target.ID), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		x.must(err)
	default:
		x.expect(l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "", "the instance's lease still held by %q after the drain stopped", ptr.Deref(l.Spec.HolderIdentity, ""))
		x.expect(l.Annotations[lease.AnnotationDone] == token, "the lease not released done (%s=%q): a late duplicate would drain again", lease.AnnotationDone, l.Annotations[lease.AnnotationDone])
	}
	<-lifted
	// held is left alone once the action was gone, its PDB lifted or not
	time.Sleep(5 * time.Second)
	t := x.touched(held)
	x.drained = map[bool]string{true: "yes", false: "no"}[len(t) > 0]
	x.expect(len(t) == 0, "pods evicted after the lifecycle action was gone: %v", t)
	// the one completion is the one made elsewhere: the function made none
	_, all := x.completions()
	x.expect(len(all) == 1, "%d CompleteLifecycleAction calls, want 1 (made elsewhere): the function went on to complete an action that was gone", len(all))
}
