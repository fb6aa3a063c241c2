package e2e

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/node-drainer/node-drainer/internal/drain"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
)

// TestPodPolicy: with POD_POLICY=honor, a pod annotated
// karpenter.sh/do-not-disrupt is not evicted by a rebalance recommendation's
// drain (voluntary): the node is cordoned, its other pod evicted, and the
// drain is reported blocked by that pod (the outcome, the Node's Event).
// Then the terminate hook (forced) evicts it last, through the eviction API:
// at DRAIN_TIMEOUT less its grace period (20 s) and 3 s after the drain
// began, its own grace period not cut short, and the hook is completed
// once, CONTINUE; another such pod that ends on its own before its turn is
// never sent an eviction.
func TestPodPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "pp", 2, harness.ASGSpec{})
	target := s.insts[0]
	s.grPlacePods(ctx, target, "web", 1)
	batch := s.ppProtectedPod(ctx, target, "batch", 20)
	job := s.ppProtectedPod(ctx, target, "job", 20) // ends on its own during the forced drain

	s.ppDryRuns(ctx, target, batch)

	api := recordingProxy(t)
	const drainTimeout = 60 * time.Second
	rt := s.function(ctx, 2*time.Minute, "CLUSTER_ENDPOINT="+api.URL, "POD_POLICY=honor", "REBALANCE_ACTION=drain", "DRAIN_TIMEOUT=60s")

	// voluntary: a rebalance recommendation's drain
	payload, err := harness.EventFile("rebalance-recommendation.json", map[string]string{"instance-id": target.ID})
	if err != nil {
		t.Fatal(err)
	}
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rebalance outcome: %+v", out)
	batchName := batch.Namespace + "/" + batch.Name
	if len(out.Evicted) != 1 || !strings.HasPrefix(out.Evicted[0], s.ns+"/web-") {
		t.Errorf("evicted %v: want the web pod alone", out.Evicted)
	}
	if len(out.Remaining) != 2 || !slices.ContainsFunc(out.Remaining, func(r string) bool {
		return strings.HasPrefix(r, batchName+": blocked by pod policy: karpenter.sh/do-not-disrupt=true")
	}) {
		t.Errorf("remaining %v: want %s (and the job's pod) blocked by the pod policy", out.Remaining, batchName)
	}
	if got, err := env.Client.CoreV1().Pods(batch.Namespace).Get(ctx, batch.Name, metav1.GetOptions{}); err != nil || got.UID != batch.UID || got.DeletionTimestamp != nil {
		t.Errorf("the protected pod is not there as it was: %v", err)
	}
	if n := grGetNode(t, ctx, target.PrivateDNSName); !n.Spec.Unschedulable || !node.Holds(n, node.CauseRebalance) {
		t.Errorf("node not cordoned for the rebalance: unschedulable=%v annotation=%s", n.Spec.Unschedulable, n.Annotations[node.AnnotationOwned])
	}
	blocked := s.nodeEvents(ctx, target.PrivateDNSName, node.ReasonDrainBlocked)
	if len(blocked) != 1 || !strings.Contains(blocked[0].Message, batchName) || !strings.Contains(blocked[0].Message, "pod policy") {
		t.Errorf("%s Events %v: want one naming %s and the pod policy", node.ReasonDrainBlocked, blocked, batchName)
	}
	if at := slices.Concat(ppEvictions(api, batch), ppEvictions(api, job)); len(at) != 0 {
		t.Errorf("a voluntary drain sent %d evictions for the protected pods", len(at))
	}

	// forced: the terminate hook
	payload, err = env.StartTerminating(ctx, s.asg, target, "token-pp-1")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	ended := make(chan error, 1)
	go func() { // the job's pod ends on its own, well before its turn (37 s)
		time.Sleep(5 * time.Second)
		ended <- env.Client.CoreV1().Pods(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &job.UID}})
	}()
	out, err = harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("terminate outcome: %+v (%s)", out, time.Since(began).Round(time.Millisecond))
	if out.Action != "drained" || !slices.Contains(out.Evicted, batchName) || len(out.Remaining) != 0 {
		t.Errorf("outcome %+v: want drained, %s evicted, nothing remaining", out, batchName)
	}
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
	if at := ppEvictions(api, job); len(at) != 0 {
		t.Errorf("the job's pod, gone on its own before its turn, was sent %d evictions", len(at))
	}
	at := ppEvictions(api, batch)
	if len(at) == 0 {
		t.Fatal("the protected pod was never sent an eviction")
	}
	// its turn: the deadline (60 s from the drain's start) less 20 s and 3 s
	turn := drainTimeout - 23*time.Second
	if first := at[0].Sub(began); first < turn-2*time.Second || first > turn+5*time.Second {
		t.Errorf("the protected pod's eviction was sent %s after the hook's event: want about %s (its grace period whole before the deadline)", first.Round(time.Millisecond), turn)
	}
	for _, r := range api.Requests() {
		if r.Method == http.MethodDelete && strings.Contains(r.Path, "/pods/") {
			t.Errorf("a pod was deleted, not evicted: %s %s", r.Method, r.Path)
		}
		if body := string(r.Body); r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/pods/"+batch.Name+"/eviction") &&
			strings.Contains(body, `"gracePeriodSeconds"`) && !strings.Contains(body, `"gracePeriodSeconds":20`) {
			t.Errorf("eviction %s: want its own grace period, 20 s, whole", body)
		}
	}
	if _, err := env.Client.CoreV1().Pods(batch.Namespace).Get(ctx, batch.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the protected pod is still there after the forced drain: %v", err)
	}
	ok, failed := s.completions(ctx, target.ID)
	if len(ok) != 1 || len(failed) != 0 || ok[0].Params["LifecycleActionResult"] != "CONTINUE" {
		t.Errorf("completions %v (failed %v): want one, CONTINUE", ok, failed)
	}
}

// ppDryRuns: a dry run says what the policy would do with the protected
// pod: left by a rebalance recommendation's drain (voluntary), evicted last
// by a spot warning's (forced); nothing is evicted.
func (s *scene) ppDryRuns(ctx context.Context, target harness.Instance, batch corev1.Pod) {
	s.t.Helper()
	rt := s.function(ctx, time.Minute, "DRY_RUN=true", "POD_POLICY=honor", "REBALANCE_ACTION=drain")
	for _, tc := range []struct{ sample, want string }{
		{"rebalance-recommendation.json", batch.Namespace + "/" + batch.Name + ": dry run: not evicted: blocked by pod policy: karpenter.sh/do-not-disrupt=true"},
		{"spot-interruption.json", batch.Namespace + "/" + batch.Name + ": dry run: would evict last, 23s before the drain's deadline"},
	} {
		payload, err := harness.EventFile(tc.sample, map[string]string{"instance-id": target.ID})
		if err != nil {
			s.t.Fatal(err)
		}
		out, err := harness.Invoke(ctx, rt, payload)
		if err != nil {
			s.t.Fatal(err)
		}
		s.t.Logf("dry run of %s: plan %+v", tc.sample, out.Plan)
		if out.Plan == nil || !slices.ContainsFunc(out.Plan.Evict, func(e string) bool { return strings.HasPrefix(e, tc.want) }) {
			s.t.Errorf("dry run of %s: plan %+v, want %q", tc.sample, out.Plan, tc.want)
		}
	}
	if got, err := env.Client.CoreV1().Pods(batch.Namespace).Get(ctx, batch.Name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
		s.t.Errorf("a dry run touched the protected pod: %v", err)
	}
	if n := grGetNode(s.t, ctx, target.PrivateDNSName); n.Spec.Unschedulable {
		s.t.Error("a dry run cordoned the node")
	}
}

// ppProtectedPod runs one pod of a Deployment on target, annotated
// karpenter.sh/do-not-disrupt: "true", with a grace period of grace
// seconds, and returns it.
func (s *scene) ppProtectedPod(ctx context.Context, target harness.Instance, name string, grace int64) corev1.Pod {
	s.t.Helper()
	w := s.workload(name, 0)
	w.GracePeriod = ptr.To(grace)
	var pods []corev1.Pod
	s.onlyOn(ctx, target, func() {
		d, err := env.Deployment(ctx, w, false)
		if err != nil {
			s.t.Fatal(err)
		}
		d.Spec.Replicas = ptr.To(int32(1))
		d.Spec.Template.Annotations = map[string]string{drain.AnnotationDoNotDisrupt: "true"}
		if _, err := env.Client.AppsV1().Deployments(d.Namespace).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			s.t.Fatal(err)
		}
		if pods, err = env.WaitPodsRunning(ctx, s.ns, "app="+name, 1, time.Minute); err != nil {
			s.t.Fatal(err)
		}
	})
	if pods[0].Spec.NodeName != target.PrivateDNSName || drain.Protected(pods[0]) == "" {
		s.t.Fatalf("pod %s on %s, annotations %v: want it on %s, protected", pods[0].Name, pods[0].Spec.NodeName, pods[0].Annotations, target.PrivateDNSName)
	}
	return pods[0]
}

// ppEvictions are when the recording proxy saw evictions of p sent (not
// server-side dry-run ones).
func ppEvictions(api *fp.Proxy, p corev1.Pod) []time.Time {
	var at []time.Time
	for _, r := range api.Requests() {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/namespaces/"+p.Namespace+"/pods/"+p.Name+"/eviction") && !strings.Contains(string(r.Body), `"dryRun"`) {
			at = append(at, r.Time)
		}
	}
	return at
}
