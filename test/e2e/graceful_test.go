package e2e

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-drainer/node-drainer/internal/metrics"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// Integration tests of the graceful path's edges on the real harness: what
// node-drainer must complete, what it must leave alone, and what it must
// refuse. Scene names start with "gr-" so they never meet other tests'.

// grBareScene is a scene whose instances have no node in the cluster yet.
func grBareScene(t *testing.T, ctx context.Context, name string, size int) *scene {
	t.Helper()
	insts, err := env.CreateASG(ctx, harness.ASGSpec{Name: name, Size: size, Hooks: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Namespace(ctx, name); err != nil {
		t.Fatal(err)
	}
	return &scene{t: t, name: name, asg: name, insts: insts, ns: name}
}

// grLifecycleCalls returns every lifecycle call (complete or heartbeat, ok or
// not) that names the instance or the scene's ASG.
func (s *scene) grLifecycleCalls(ctx context.Context, instance string) []moto.LifecycleCall {
	s.t.Helper()
	calls, err := env.AWS.LifecycleCalls(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	var mine []moto.LifecycleCall
	for _, c := range calls {
		if c.Params["InstanceId"] == instance || c.Params["AutoScalingGroupName"] == s.asg {
			mine = append(mine, c)
		}
	}
	return mine
}

func (s *scene) grNoLifecycleCalls(ctx context.Context, instance string) {
	s.t.Helper()
	if calls := s.grLifecycleCalls(ctx, instance); len(calls) != 0 {
		s.t.Errorf("want no lifecycle call for %s / %s, got %+v", s.asg, instance, calls)
	}
}

// grDrainerEvents returns the Events node-drainer wrote on the node.
func grDrainerEvents(t *testing.T, ctx context.Context, nodeName string) []corev1.Event {
	t.Helper()
	list, err := env.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + nodeName,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.Source.Component == "node-drainer" || strings.HasPrefix(e.Reason, "NodeDrainer") {
			out = append(out, e)
		}
	}
	return out
}

// grSnapshot is what node-drainer could change on a node and its pods.
type grSnapshot struct {
	spec        corev1.NodeSpec
	labels      map[string]string
	annotations map[string]string
	pods        map[string]types.UID // namespace/name -> UID, pods of the node
	events      int                  // node-drainer's Events on the node
}

// grControllerAnnotations are set on nodes by the controller-manager on its
// own schedule; they are no evidence of node-drainer's doing.
var grControllerAnnotations = []string{"node.alpha.kubernetes.io/ttl"}

// grControllerTaints are added and removed by the node lifecycle controller
// on its own schedule: the unschedulable taint mirrors spec.unschedulable
// (compared on its own) and lags a cordon or uncordon by the scenes' own
// placement; the condition taints follow the node's Ready condition. They
// are no evidence of node-drainer's doing (its own taints, such as
// out-of-service, are still compared).
var grControllerTaints = []string{corev1.TaintNodeUnschedulable, corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable}

func grTakeSnapshot(t *testing.T, ctx context.Context, nodeName string) grSnapshot {
	t.Helper()
	n, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ann := maps.Clone(n.Annotations)
	for _, k := range grControllerAnnotations {
		delete(ann, k)
	}
	pods, err := env.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		t.Fatal(err)
	}
	spec := *n.Spec.DeepCopy()
	spec.Taints = slices.DeleteFunc(spec.Taints, func(t corev1.Taint) bool { return slices.Contains(grControllerTaints, t.Key) })
	if len(spec.Taints) == 0 {
		spec.Taints = nil
	}
	snap := grSnapshot{spec: spec, labels: n.Labels, annotations: ann, pods: map[string]types.UID{}, events: len(grDrainerEvents(t, ctx, nodeName))}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			snap.pods[p.Namespace+"/"+p.Name] = p.UID
		}
	}
	return snap
}

// unchanged fails the test when the node or its pods differ from before.
func grUnchanged(t *testing.T, ctx context.Context, nodeName string, before grSnapshot) {
	t.Helper()
	after := grTakeSnapshot(t, ctx, nodeName)
	if !reflect.DeepEqual(before.spec, after.spec) {
		t.Errorf("node %s spec changed:\nbefore %+v\nafter  %+v", nodeName, before.spec, after.spec)
	}
	if !maps.Equal(before.labels, after.labels) {
		t.Errorf("node %s labels changed:\nbefore %v\nafter  %v", nodeName, before.labels, after.labels)
	}
	if !maps.Equal(before.annotations, after.annotations) {
		t.Errorf("node %s annotations changed:\nbefore %v\nafter  %v", nodeName, before.annotations, after.annotations)
	}
	if !maps.Equal(before.pods, after.pods) {
		t.Errorf("pods of node %s changed (evicted, deleted or terminating):\nbefore %v\nafter  %v", nodeName, before.pods, after.pods)
	}
	if after.events != before.events {
		t.Errorf("node-drainer recorded %d Events on node %s", after.events-before.events, nodeName)
	}
}

// grPlacePods runs a Deployment of replicas pods on target and returns them.
func (s *scene) grPlacePods(ctx context.Context, target harness.Instance, name string, replicas int) []corev1.Pod {
	s.t.Helper()
	var pods []corev1.Pod
	s.onlyOn(ctx, target, func() {
		if _, err := env.Deployment(ctx, s.workload(name, int32(replicas)), false); err != nil {
			s.t.Fatal(err)
		}
		var err error
		if pods, err = env.WaitPodsRunning(ctx, s.ns, "app="+name, replicas, time.Minute); err != nil {
			s.t.Fatal(err)
		}
	})
	for _, p := range pods {
		if p.Spec.NodeName != target.PrivateDNSName {
			s.t.Fatalf("pod %s landed on %s, not on %s", p.Name, p.Spec.NodeName, target.PrivateDNSName)
		}
	}
	return pods
}

// grEventWithout is a sample event fitted with detail, less the detail fields drop.
func grEventWithout(t *testing.T, name string, detail map[string]string, drop ...string) []byte {
	t.Helper()
	b, err := harness.EventFile(name, detail)
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	d := ev["detail"].(map[string]any)
	for _, k := range drop {
		if _, ok := d[k]; !ok {
			t.Fatalf("sample %s has no detail field %s to drop", name, k)
		}
		delete(d, k)
	}
	if b, err = json.Marshal(ev); err != nil {
		t.Fatal(err)
	}
	return b
}

func grGetNode(t *testing.T, ctx context.Context, name string) *corev1.Node {
	t.Helper()
	n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestGracefulNodeNotFound: the hook of an instance with no node in the
// cluster is completed at once with CONTINUE.
func TestGracefulNodeNotFound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := grBareScene(t, ctx, "gr-nonode", 1)
	target := s.insts[0]
	payload, err := env.StartTerminating(ctx, s.asg, target, "token-nonode-1")
	if err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute)
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome: %+v", out)
	if out.Action != "node-not-found" || out.LifecycleResult != "CONTINUE" || out.Node != "" {
		t.Errorf("outcome %+v: want node-not-found, CONTINUE, no node", out)
	}
	ok, failed := s.completions(ctx, target.ID)
	if len(ok) != 1 || ok[0].Params["LifecycleActionResult"] != "CONTINUE" || ok[0].Params["LifecycleActionToken"] != "token-nonode-1" {
		t.Errorf("want exactly one successful CONTINUE with the event's token, got %+v", ok)
	}
	if len(failed) != 0 {
		t.Errorf("failed completions: %+v", failed)
	}
}

// TestGracefulForeignInstance: instances of another cluster (cluster tag) or
// of an ASG not in ASG_NAMES are ignored without side effects.
func TestGracefulForeignInstance(t *testing.T) {
	t.Run("other cluster's tag", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		s := newScene(t, ctx, "gr-foreign", 1, harness.ASGSpec{ClusterTag: "kubernetes.io/cluster/other"})
		target := s.insts[0]
		s.grPlacePods(ctx, target, "web", 2)
		before := grTakeSnapshot(t, ctx, target.PrivateDNSName)
		if len(before.pods) != 2 {
			t.Fatalf("want 2 pods on the node before, got %v", before.pods)
		}
		payload, err := env.StartTerminating(ctx, s.asg, target, "token-foreign-1")
		if err != nil {
			t.Fatal(err)
		}
		rt := s.function(ctx, time.Minute)
		out, err := harness.Invoke(ctx, rt, payload)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("outcome: %+v", out)
		if out.Action != "ignored" || out.LifecycleResult != "" || len(out.Evicted) != 0 {
			t.Errorf("outcome %+v: want ignored, no lifecycle result, nothing evicted", out)
		}
		s.grNoLifecycleCalls(ctx, target.ID)
		grUnchanged(t, ctx, target.PrivateDNSName, before)
		n := grGetNode(t, ctx, target.PrivateDNSName)
		if n.Spec.Unschedulable || node.HasTaint(n, node.TaintDraining) || node.HasTaint(n, node.TaintOutOfService) {
			t.Errorf("foreign node marked: unschedulable=%v taints=%v", n.Spec.Unschedulable, n.Spec.Taints)
		}
		if _, ok := n.Annotations[node.AnnotationOwned]; ok {
			t.Errorf("foreign node annotated %s", node.AnnotationOwned)
		}
	})
	t.Run("ASG not in ASG_NAMES", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		s := newScene(t, ctx, "gr-unlisted", 1, harness.ASGSpec{})
		target := s.insts[0]
		s.grPlacePods(ctx, target, "web", 2)
		before := grTakeSnapshot(t, ctx, target.PrivateDNSName)
		payload, err := env.StartTerminating(ctx, s.asg, target, "token-unlisted-1")
		if err != nil {
			t.Fatal(err)
		}
		rt := s.function(ctx, time.Minute, "ASG_NAMES=someother")
		out, err := harness.Invoke(ctx, rt, payload)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("outcome: %+v", out)
		if out.Action != "ignored" || out.LifecycleResult != "" || len(out.Evicted) != 0 {
			t.Errorf("outcome %+v: want ignored, no lifecycle result, nothing evicted", out)
		}
		s.grNoLifecycleCalls(ctx, target.ID)
		grUnchanged(t, ctx, target.PrivateDNSName, before)
	})
}

// TestGracefulPDBNeverAllows: a PDB that never allows a disruption holds
// the drain until DRAIN_TIMEOUT; the hook is then completed once with the
// configured failure result, the blocking pod is named in an Event on the
// node, and the pod was never deleted.
func TestGracefulPDBNeverAllows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "gr-pdb", 1, harness.ASGSpec{})
	target := s.insts[0]
	pods := s.grPlacePods(ctx, target, "solo", 1)
	if _, err := env.PDB(ctx, s.workload("solo", 1), -1, 1); err != nil {
		t.Fatal(err)
	}
	pod := pods[0]
	payload, err := env.StartTerminating(ctx, s.asg, target, "token-pdb-1")
	if err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute, "DRAIN_TIMEOUT=6s", "LIFECYCLE_RESULT_ON_FAILURE=ABANDON", "CONTINUE_LONG_DRAINS=false")
	began := time.Now()
	out, err := harness.Invoke(ctx, rt, payload)
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome after %s: %+v", took.Round(time.Millisecond), out)
	if out.Action != "failed" || out.LifecycleResult != "ABANDON" {
		t.Errorf("outcome %+v: want failed, ABANDON", out)
	}
	if took < 5*time.Second || took > 40*time.Second {
		t.Errorf("invocation took %s: want about DRAIN_TIMEOUT (6s)", took)
	}
	podName := pod.Namespace + "/" + pod.Name
	if !slices.ContainsFunc(out.Remaining, func(r string) bool { return strings.HasPrefix(r, podName) }) {
		t.Errorf("outcome's remaining pods %v do not name %s", out.Remaining, podName)
	}
	ok, failed := s.completions(ctx, target.ID)
	if len(ok) != 1 || ok[0].Params["LifecycleActionResult"] != "ABANDON" || ok[0].Params["LifecycleActionToken"] != "token-pdb-1" {
		t.Errorf("want exactly one successful ABANDON with the event's token, got %+v", ok)
	}
	if len(failed) != 0 {
		t.Errorf("failed completions: %+v", failed)
	}
	blocked := s.nodeEvents(ctx, target.PrivateDNSName, node.ReasonDrainBlocked)
	if len(blocked) == 0 {
		t.Errorf("no %s Event on the node", node.ReasonDrainBlocked)
	} else if !strings.Contains(blocked[0].Message, podName) || blocked[0].Type != corev1.EventTypeWarning {
		t.Errorf("%s Event %q (%s) does not name the blocking pod %s as a warning", node.ReasonDrainBlocked, blocked[0].Message, blocked[0].Type, podName)
	}
	got, err := env.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the PDB-protected pod is gone: %v", err)
	}
	if got.UID != pod.UID || got.DeletionTimestamp != nil || got.Status.Phase != corev1.PodRunning || got.Spec.NodeName != target.PrivateDNSName {
		t.Errorf("the PDB-protected pod was disturbed: uid %s (was %s), deleting=%v, phase %s, node %s",
			got.UID, pod.UID, got.DeletionTimestamp != nil, got.Status.Phase, got.Spec.NodeName)
	}
}

// TestGracefulMalformedEvents: events that do not parse make the
// invocation fail (so EventBridge retries, then dead-letters them) and touch
// nothing: no lifecycle call, the node and its pods as they were.
func TestGracefulMalformedEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "gr-bad", 1, harness.ASGSpec{})
	target := s.insts[0]
	s.grPlacePods(ctx, target, "web", 2)
	// an active action a mistaken completion by instance id would complete
	if err := env.AWS.RegisterLifecycleAction(ctx, moto.LifecycleAction{ASG: s.asg, Hook: harness.TerminateHook, InstanceID: target.ID, Token: "token-bad-1"}); err != nil {
		t.Fatal(err)
	}
	terminate := map[string]string{"AutoScalingGroupName": s.asg, "LifecycleHookName": harness.TerminateHook, "EC2InstanceId": target.ID, "LifecycleActionToken": "token-bad-1"}
	valid, err := harness.EventFile("asg-terminate.json", terminate)
	if err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute)
	before := grTakeSnapshot(t, ctx, target.PrivateDNSName)
	for _, tc := range []struct {
		name    string
		payload []byte
		want    string // in the function error; "" when the runtime may refuse it first
	}{
		{"state-change without state", grEventWithout(t, "state-change-stopped.json", map[string]string{"instance-id": target.ID}, "state"), "state is missing"},
		{"truncated JSON", valid[:len(valid)/2], ""},
		{"lifecycle action without token", grEventWithout(t, "asg-terminate.json", terminate, "LifecycleActionToken"), "LifecycleActionToken is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := harness.Invoke(ctx, rt, tc.payload)
			if err == nil {
				t.Fatalf("want a function error, got outcome %+v", out)
			}
			t.Logf("error: %v", err)
			if tc.want != "" && (!strings.Contains(err.Error(), "malformed event") || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("error %q: want a malformed event error naming %q", err, tc.want)
			}
			s.grNoLifecycleCalls(ctx, target.ID)
			grUnchanged(t, ctx, target.PrivateDNSName, before)
		})
	}
}

// TestGracefulTestNotification: the hook's test notification is ignored.
func TestGracefulTestNotification(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "gr-testnote", 1, harness.ASGSpec{})
	target := s.insts[0]
	s.grPlacePods(ctx, target, "web", 1)
	before := grTakeSnapshot(t, ctx, target.PrivateDNSName)
	payload, err := harness.EventFile("asg-test-notification.json", map[string]string{"AutoScalingGroupName": s.asg})
	if err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute)
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome: %+v", out)
	if out.Action != "ignored" || out.Event != "test-notification" || out.LifecycleResult != "" {
		t.Errorf("outcome %+v: want test-notification ignored", out)
	}
	s.grNoLifecycleCalls(ctx, target.ID)
	grUnchanged(t, ctx, target.PrivateDNSName, before)
}

// TestGracefulDryRun: with DRY_RUN a terminate hook is completed with
// CONTINUE within 5 s, the function sends no write to the apiserver but
// server-side dry-run evictions (every request counted at a recording proxy
// in front of the apiserver), and its plan, in the outcome and in the log,
// names the PDB that would block and the pods it would evict.
func TestGracefulDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "gr-dryrun", 1, harness.ASGSpec{})
	target := s.insts[0]
	pods := s.grPlacePods(ctx, target, "web", 2)
	if _, err := env.PDB(ctx, s.workload("web", 2), 0, 0); err != nil { // maxUnavailable 0: no eviction allowed
		t.Fatal(err)
	}
	before := grTakeSnapshot(t, ctx, target.PrivateDNSName)
	payload, err := env.StartTerminating(ctx, s.asg, target, "token-dryrun-1")
	if err != nil {
		t.Fatal(err)
	}
	api := recordingProxy(t)
	var logs harness.LogBuffer
	rt, err := env.StartFunction(ctx, harness.FunctionOptions{Bootstrap: bootstrap, Timeout: time.Minute,
		Env: []string{"DRY_RUN=true", "CLUSTER_ENDPOINT=" + api.URL}, Log: io.MultiWriter(testWriter{t}, &logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop() })

	began := time.Now()
	out, err := harness.Invoke(ctx, rt, payload)
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome in %s: %+v", took.Round(time.Millisecond), out)
	ok, failed := s.completions(ctx, target.ID)
	if len(ok) != 1 || ok[0].Params["LifecycleActionResult"] != "CONTINUE" || len(failed) != 0 {
		t.Errorf("want exactly one CONTINUE completion, got %+v (failed %+v)", ok, failed)
	}
	if took > 5*time.Second {
		t.Errorf("hook completed after %s: want within 5 s", took)
	}
	if !out.DryRun || len(out.Evicted) != 0 || out.Plan == nil || out.LifecycleResult != "CONTINUE" {
		t.Fatalf("outcome %+v: want a dry run with a plan that evicted nothing and completed with CONTINUE", out)
	}
	pdbName := s.ns + "/web"
	if !slices.Contains(out.Plan.WouldBlock, pdbName) {
		t.Errorf("plan %+v: want %s named as blocking", out.Plan, pdbName)
	}
	for _, p := range pods {
		name := p.Namespace + "/" + p.Name
		if !slices.ContainsFunc(out.Plan.Evict, func(e string) bool { return strings.HasPrefix(e, name+": dry run: eviction refused now by "+pdbName) }) {
			t.Errorf("plan does not say %s's eviction is refused now by %s: %v", name, pdbName, out.Plan.Evict)
		}
	}
	if !strings.Contains(logs.String(), `"message":"dry run plan"`) || !strings.Contains(logs.String(), pdbName) {
		t.Errorf("no dry run plan naming %s in the log", pdbName)
	}
	// the real bootstrap's metrics: one EMF line for the invocation
	var emf []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"_aws"`) {
			emf = append(emf, line)
		}
	}
	if len(emf) != 1 {
		t.Errorf("want one EMF line on the function's output, got %d", len(emf))
	}
	for _, line := range emf {
		if err := metrics.Validate([]byte(line)); err != nil {
			t.Errorf("metrics line is not EMF: %v\n%s", err, line)
		}
		if !strings.Contains(line, `"HooksCompleted":1`) || !strings.Contains(line, `"CompletionReason":"dry-run"`) {
			t.Errorf("metrics line %s: want the hook completed in a dry run", line)
		}
	}

	var writes []string
	dryEvictions := 0
	for _, r := range api.Requests() {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			continue
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/eviction") && strings.Contains(string(r.Body), `"dryRun":["All"]`) {
			dryEvictions++
			continue
		}
		writes = append(writes, r.Method+" "+r.Path)
	}
	t.Logf("apiserver requests: %d, dry-run evictions %d, writes %v", len(api.Requests()), dryEvictions, writes)
	if len(writes) != 0 {
		t.Errorf("dry run sent %d writes to the apiserver: %v", len(writes), writes)
	}
	if dryEvictions < len(pods) {
		t.Errorf("%d server-side dry-run evictions seen, want one per pod (%d): the proxy saw the function's traffic?", dryEvictions, len(pods))
	}
	grUnchanged(t, ctx, target.PrivateDNSName, before)
}

// TestGracefulLaunchHook: the launch hook is completed with CONTINUE only
// once the instance's node has joined and is Ready.
func TestGracefulLaunchHook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := grBareScene(t, ctx, "gr-launch", 1)
	inst := s.insts[0]
	err := env.AWS.RegisterLifecycleAction(ctx, moto.LifecycleAction{
		ASG: s.asg, Hook: harness.LaunchHook, InstanceID: inst.ID, Token: "token-launch-1",
		Transition: "autoscaling:EC2_INSTANCE_LAUNCHING",
	})
	if err != nil {
		t.Fatal(err)
	}
	payload, err := harness.EventFile("asg-launch.json", map[string]string{
		"AutoScalingGroupName": s.asg, "LifecycleHookName": harness.LaunchHook, "EC2InstanceId": inst.ID, "LifecycleActionToken": "token-launch-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute)

	type joined struct {
		early []moto.LifecycleCall // lifecycle calls before the node existed
		added time.Time            // when the node was created
		err   error
	}
	done := make(chan joined, 1)
	go func() {
		time.Sleep(2 * time.Second)
		var j joined
		calls, err := env.AWS.LifecycleCalls(ctx)
		if err != nil {
			j.err = err
			done <- j
			return
		}
		for _, c := range calls {
			if c.Params["InstanceId"] == inst.ID {
				j.early = append(j.early, c)
			}
		}
		j.added = time.Now()
		j.err = env.AddNodeFor(ctx, inst, map[string]string{"pool": s.name})
		done <- j
	}()
	out, err := harness.Invoke(ctx, rt, payload)
	j := <-done
	if j.err != nil {
		t.Fatal(j.err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome: %+v", out)
	if len(j.early) != 0 {
		t.Errorf("lifecycle calls before the node joined: %+v", j.early)
	}
	if out.Action != "node-joined" || out.LifecycleResult != "CONTINUE" || out.Node != inst.PrivateDNSName {
		t.Errorf("outcome %+v: want node-joined, CONTINUE, node %s", out, inst.PrivateDNSName)
	}
	ok, failed := s.completions(ctx, inst.ID)
	if len(ok) != 1 || ok[0].Params["LifecycleActionResult"] != "CONTINUE" ||
		ok[0].Params["LifecycleActionToken"] != "token-launch-1" || ok[0].Params["LifecycleHookName"] != harness.LaunchHook {
		t.Fatalf("want exactly one successful CONTINUE of the launch hook with the event's token, got %+v", ok)
	}
	if len(failed) != 0 {
		t.Errorf("failed completions: %+v", failed)
	}
	if !ok[0].Time.After(j.added) {
		t.Errorf("launch hook completed at %s, before the node was created at %s", ok[0].Time, j.added)
	}
	n := grGetNode(t, ctx, inst.PrivateDNSName)
	var readySince time.Time
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			readySince = c.LastTransitionTime.Time // whole seconds: a lower bound
		}
	}
	if readySince.IsZero() {
		t.Fatalf("node %s not Ready: %+v", n.Name, n.Status.Conditions)
	}
	if ok[0].Time.Before(readySince) {
		t.Errorf("launch hook completed at %s, before the node became Ready at %s", ok[0].Time, readySince)
	}
}

// TestGracefulSpotInterruption: a spot warning drains the node (no hook to
// complete); the pods move elsewhere.
func TestGracefulSpotInterruption(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "gr-spot", 2, harness.ASGSpec{})
	target := s.insts[0]
	pods := s.grPlacePods(ctx, target, "web", 2)
	payload, err := harness.EventFile("spot-interruption.json", map[string]string{"instance-id": target.ID})
	if err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute)
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome: %+v", out)
	if out.Action != "drained" || out.Node != target.PrivateDNSName || len(out.Remaining) != 0 {
		t.Errorf("outcome %+v: want drained, node %s, nothing remaining", out, target.PrivateDNSName)
	}
	for _, p := range pods {
		if !slices.Contains(out.Evicted, p.Namespace+"/"+p.Name) {
			t.Errorf("outcome does not list %s/%s as evicted: %v", p.Namespace, p.Name, out.Evicted)
		}
		got, err := env.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err == nil && got.UID == p.UID {
			t.Errorf("pod %s still exists (deleting=%v)", p.Name, got.DeletionTimestamp != nil)
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	n := grGetNode(t, ctx, target.PrivateDNSName)
	if !n.Spec.Unschedulable || !node.HasTaint(n, node.TaintDraining) {
		t.Errorf("node not cordoned and tainted: unschedulable=%v taints=%v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	s.grNoLifecycleCalls(ctx, target.ID)
	moved, err := env.WaitPodsRunning(ctx, s.ns, "app=web", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range moved {
		if p.Spec.NodeName == target.PrivateDNSName {
			t.Errorf("replacement pod %s scheduled on the drained node", p.Name)
		}
	}
}

// TestGracefulRebalanceCordons: with the default REBALANCE_ACTION (cordon), a
// rebalance recommendation cordons the node and leaves its pods.
func TestGracefulRebalanceCordons(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "gr-rebal", 1, harness.ASGSpec{})
	target := s.insts[0]
	s.grPlacePods(ctx, target, "web", 2)
	before := grTakeSnapshot(t, ctx, target.PrivateDNSName)
	payload, err := harness.EventFile("rebalance-recommendation.json", map[string]string{"instance-id": target.ID})
	if err != nil {
		t.Fatal(err)
	}
	rt := s.function(ctx, time.Minute)
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome: %+v", out)
	if out.Action != "cordoned" || out.Node != target.PrivateDNSName || len(out.Evicted) != 0 {
		t.Errorf("outcome %+v: want cordoned, node %s, nothing evicted", out, target.PrivateDNSName)
	}
	after := grTakeSnapshot(t, ctx, target.PrivateDNSName)
	if !maps.Equal(before.pods, after.pods) {
		t.Errorf("pods changed on a cordon:\nbefore %v\nafter  %v", before.pods, after.pods)
	}
	n := grGetNode(t, ctx, target.PrivateDNSName)
	if !n.Spec.Unschedulable {
		t.Error("node not cordoned")
	}
	if node.HasTaint(n, node.TaintDraining) || n.Labels[node.LabelExcludeLB] != "" {
		t.Errorf("a cordon must not drain-mark the node: taints=%v labels=%v", n.Spec.Taints, n.Labels)
	}
	if marks, ok := node.Marks(n); !ok || !marks.Owned.Cordoned || !node.Holds(n, node.CauseRebalance) {
		t.Errorf("cordon not recorded as node-drainer's, for the rebalance: %+v (ok=%v)", marks, ok)
	}
	if len(s.nodeEvents(ctx, target.PrivateDNSName, node.ReasonCordoned)) != 1 {
		t.Errorf("want one %s Event on the node", node.ReasonCordoned)
	}
	s.grNoLifecycleCalls(ctx, target.ID)
}
