package faults

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/node-drainer/node-drainer/internal/outcome"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
)

// bigPods is how many pods outcome-2000-pods-long-names puts on the target.
const bigPods = 2000

// putLimit is EventBridge's limit on a PutEvents request, and so on one
// event: 256 KB.
const putLimit = 256 * 1024

// outcome2000PodsLongNames (S4): a terminate hook's drain of 2,000 bare pods
// whose names are 250 characters long, every eviction refused by a PDB
// whose name is 253 characters long (its refusal message names it), past
// OUTCOME_BLOCKED_AFTER (5 s): Node Drain Blocked names the pods left.
// Then the PDB goes, the drain ends in a continuation, and Node Drain
// Started (its first eviction is the continuation's), Node Drained and
// Lifecycle Action Completed follow. Every PutEvents request the function makes is at most
// 256 KB, and so is every event read back from the queue behind the bus;
// the largest of each are logged.
func outcome2000PodsLongNames(x *X) {
	x.scene(sceneOpts{nodes: 2})
	oq := x.outcomeQueue()
	node := x.target.PrivateDNSName
	longName := func(j int) string {
		return fmt.Sprintf("%s-%04d", strings.Repeat("pod-with-a-long-name-", 12)[:245], j)
	}
	x.bigPods(node, longName)
	pdbName := strings.Repeat("a-budget-named-at-length-", 11)[:253]
	zero := intstr.FromInt32(0)
	_, err := env.Client.PolicyV1().PodDisruptionBudgets(x.ns).Create(x.ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: pdbName, Namespace: x.ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "big"}}},
	}, metav1.CreateOptions{})
	x.must(err)
	proxy, err := fp.Start(fp.Options{Upstream: env.AWS.URL(), Flavor: fp.AWSQuery})
	x.must(err)
	x.t.Cleanup(func() { _ = proxy.Stop() })
	var mu sync.Mutex
	var sizes []int64
	proxy.Add(fp.Rule{Name: "puts measured", Fault: fp.Pass,
		Match:  func(r *http.Request) bool { return r.Header.Get("X-Amz-Target") == "AWSEvents.PutEvents" },
		Before: func(_ *http.Request, body []byte) { mu.Lock(); sizes = append(sizes, int64(len(body))); mu.Unlock() }})
	rt := x.function(60*time.Second, "OUTCOME_EVENT_BUS="+oq.bus, "AWS_ENDPOINT_URL_EVENTBRIDGE="+proxy.URL,
		"OUTCOME_BLOCKED_AFTER=5s", "DEADLINE_MARGIN=5s", "DRAIN_TIMEOUT=10m")
	x.observe(map[string]int{})
	_, err = x.invoke(rt, x.terminating("token-"+x.name))
	x.t.Logf("first invocation: %v", err)
	blocked := oq.waitFor(eventsWait, x.target.ID, outcome.NodeDrainBlocked)
	x.expect(blocked, "no Node Drain Blocked for %s within %s with %d pods held by a PDB (read: %s)", x.target.ID, eventsWait, bigPods, oq.kinds())
	for _, d := range oq.of(outcome.NodeDrainBlocked, x.target.ID) {
		x.expect(len(d.Remaining) > 0, "Node Drain Blocked %+v: want the pods left named", d.Reason)
	}
	x.must(env.Client.PolicyV1().PodDisruptionBudgets(x.ns).Delete(x.ctx, pdbName, metav1.DeleteOptions{}))
	got := x.waitHook(8*time.Minute, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	arrived := oq.waitFor(eventsWait, x.target.ID, outcome.NodeDrained, outcome.LifecycleActionCompleted, outcome.NodeDrainStarted)
	x.expect(arrived, "no Node Drain Started, Node Drained and Lifecycle Action Completed for %s within %s (read: %s)", x.target.ID, eventsWait, oq.kinds())
	// the first invocation evicted nothing: the continuation that made the
	// first eviction tells of the start, once
	x.expect(len(oq.of(outcome.NodeDrainStarted, x.target.ID)) == 1, "%d Node Drain Started for one drain, want 1 (read: %s)", len(oq.of(outcome.NodeDrainStarted, x.target.ID)), oq.kinds())
	ctx, cancel := context.WithTimeout(x.ctx, time.Minute)
	_ = rt.WaitIdle(ctx)
	cancel()
	mu.Lock()
	defer mu.Unlock()
	var largestPut int64
	for _, n := range sizes {
		x.expect(n <= putLimit, "a PutEvents request of %d bytes: over the 256 KB limit", n)
		largestPut = max(largestPut, n)
	}
	largestEvent, kind := oq.largest()
	x.expect(largestEvent <= putLimit, "a %s event of %d bytes read back: over the 256 KB limit", kind, largestEvent)
	x.expect(len(sizes) > 0, "no PutEvents request measured: the scene proves nothing")
	x.t.Logf("%d pods with %d-character names, a PDB of a %d-character name: %d PutEvents requests, the largest %d bytes; the largest event read back %d bytes (%s); events read: %s",
		bigPods, len(longName(0)), len(pdbName), len(sizes), largestPut, largestEvent, kind, oq.kinds())
}

// bigPods creates bigPods bare pods named name(j), labelled app=big,
// bound to node, 16 at a time, and waits until kwok runs them all.
func (x *X) bigPods(node string, name func(int) string) {
	x.t.Helper()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for j := range bigPods {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name(j), Namespace: x.ns, Labels: map[string]string{"app": "big"}},
				Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: new(int64),
					Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}},
			}
			if _, err := env.Client.CoreV1().Pods(x.ns).Create(x.ctx, p, metav1.CreateOptions{}); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	x.must(first)
	_, err := env.WaitPodsRunning(x.ctx, x.ns, "app=big", bigPods, 3*time.Minute)
	x.must(err)
}

// largest is the size of the largest event read from the queue, and its
// detail-type.
func (oq *outcomeQueue) largest() (int, string) {
	oq.read()
	oq.mu.Lock()
	defer oq.mu.Unlock()
	return oq.biggest, oq.biggestKind
}
