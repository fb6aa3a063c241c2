package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
)

// ---- 4: UID preconditions ----

// replaceDB force-deletes db-0 as someone else would and waits until the
// StatefulSet has created its replacement (same name, new UID); it returns
// the replacement's UID.
func (x *X) replaceDB() types.UID {
	pods := env.Client.CoreV1().Pods(x.ns)
	old, err := pods.Get(x.ctx, "db-0", metav1.GetOptions{})
	if err != nil {
		x.t.Logf("replaceDB: %v", err)
		return ""
	}
	zero := int64(0)
	_ = pods.Delete(x.ctx, "db-0", metav1.DeleteOptions{GracePeriodSeconds: &zero})
	var uid types.UID
	_ = wait.PollUntilContextTimeout(x.ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, "db-0", metav1.GetOptions{})
		if err == nil && p.UID != old.UID {
			uid = p.UID
			return true, nil
		}
		return false, nil
	})
	x.t.Logf("db-0 replaced: %s -> %s", old.UID, uid)
	return uid
}

// replacementUntouched: the replacement with uid is still there, not deleting.
func (x *X) replacementUntouched(uid types.UID) {
	if !x.expect(uid != "", "the StatefulSet did not replace db-0: the scenario proves nothing") {
		return
	}
	p, err := env.Client.CoreV1().Pods(x.ns).Get(x.ctx, "db-0", metav1.GetOptions{})
	var now string
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		x.must(err) // the harness could not read: the scene proves nothing
		return
	case err != nil:
		now = "gone"
	case p.UID != uid:
		now = "replaced again, by uid " + string(p.UID)
	case p.DeletionTimestamp != nil:
		now = "deleting"
	default:
		return
	}
	x.violate("the replacement db-0 (uid %s), which reused the name, was evicted or deleted: %s", uid, now)
	x.podHistory("db-0")
}

// podHistory logs the Events of the namespace's pods of that name (who
// created, scheduled, evicted or deleted them), to tell a violation's cause.
func (x *X) podHistory(name string) {
	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": name}.AsSelector().String()
	list, err := env.Client.CoreV1().Events(x.ns).List(x.ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		x.t.Logf("events of %s: %v", name, err)
		return
	}
	for _, e := range list.Items {
		x.t.Logf("event %s %s uid=%s %s/%s: %s", e.EventTime.Format(time.StampMicro), e.FirstTimestamp.Format(time.StampMilli), e.InvolvedObject.UID, e.Source.Component+e.ReportingController, e.Reason, e.Message)
	}
}

type deleteBody struct {
	Preconditions *metav1.Preconditions `json:"preconditions"`
	// evictions carry the options inside
	DeleteOptions *struct {
		Preconditions *metav1.Preconditions `json:"preconditions"`
	} `json:"deleteOptions"`
}

// preconditions reads the preconditions of a delete or eviction body (JSON,
// or protobuf as client-go sends core deletes).
func preconditions(body []byte) *metav1.Preconditions {
	if magic := []byte("k8s\x00"); bytes.HasPrefix(body, magic) {
		var u runtime.Unknown
		var o metav1.DeleteOptions
		if u.Unmarshal(body[len(magic):]) != nil || o.Unmarshal(u.Raw) != nil {
			return nil
		}
		return o.Preconditions
	}
	var b deleteBody
	if json.Unmarshal(body, &b) != nil {
		return nil
	}
	if b.DeleteOptions != nil {
		return b.DeleteOptions.Preconditions
	}
	return b.Preconditions
}

// evictionNameReuse: while the function's eviction of db-0 is on its way, db-0
// is replaced by a pod of the same name; the eviction must name the UID it
// means, so the replacement is never evicted.
func evictionNameReuse(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.statefulSet()
	var uid types.UID
	api, apiEnv := x.apiProxy(fp.Options{Rules: []fp.Rule{{Name: "replace db-0", Method: "POST",
		Path: regexp.MustCompile(`/pods/db-0/eviction$`), Fault: fp.Pass, Times: 1,
		Before: func(*http.Request, []byte) { uid = x.replaceDB() }}}})
	rt := x.function(60*time.Second, apiEnv, "DRAIN_TIMEOUT=40s", "DEADLINE_MARGIN=5s")
	x.observe(nil)
	_, err := x.invoke(rt, x.terminating("token-"+x.name))
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(60*time.Second, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	x.replacementUntouched(uid)
	for pod, reqs := range evictions(api) {
		for _, r := range reqs {
			pc := preconditions(r.Body)
			x.expect(pc != nil && pc.UID != nil && *pc.UID != "", "eviction of %s without a UID precondition: %s", pod, r.Body)
		}
	}
}

// forceDeleteNameReuse: the abrupt path's force delete of db-0 meets a
// replacement of the same name; it must name the UID and resourceVersion.
func forceDeleteNameReuse(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.statefulSet()
	var uid types.UID
	api, apiEnv := x.apiProxy(fp.Options{Rules: []fp.Rule{{Name: "replace db-0", Method: "DELETE",
		Path: regexp.MustCompile(`/namespaces/` + x.ns + `/pods/db-0$`), Fault: fp.Pass, Times: 1,
		Before: func(*http.Request, []byte) { uid = x.replaceDB() }}}})
	rt := x.function(60*time.Second, apiEnv, "NODE_LEASE_STALE_AFTER=5s")
	x.must(env.SetInstanceState(x.ctx, x.target.ID, "stopped"))
	x.killKubelet(x.target.PrivateDNSName)
	_, err := x.invoke(rt, x.stateEvent(x.target.ID, "stopped", time.Now()))
	x.expect(err == nil, "invocation failed: %v", err)
	x.expect(hasTaint(x.getNode(x.target.PrivateDNSName), node.TaintOutOfService), "stopped instance's node not released")
	x.replacementUntouched(uid)
	deletes := 0
	for _, r := range api.Requests() {
		if r.Method != "DELETE" || !strings.Contains(r.Path, "/pods/") {
			continue
		}
		deletes++
		pc := preconditions(r.Body)
		x.expect(pc != nil && pc.UID != nil && pc.ResourceVersion != nil, "force delete %s without UID and resourceVersion preconditions: %+v", r.Path, pc)
	}
	x.expect(deletes > 0, "no force delete seen")
}

// ---- 5: the abrupt path reads again ----

// restartBeforeForce: the instance is stopped (kubelet dead, node NotReady);
// right after the function's first DescribeInstances the instance is
// started again. Nothing may be forced on it.
func restartBeforeForce(x *X) {
	x.scene(sceneOpts{nodes: 2})
	pv := x.statefulSet()
	before := x.podsOn(x.target.PrivateDNSName)
	aws, awsEnv := x.awsProxy(fp.Options{Rules: []fp.Rule{{Name: "restart", Body: "Action=DescribeInstances", Fault: fp.Pass, Times: 1,
		Then: func(*http.Request, []byte, int) {
			x.must(env.SetInstanceState(context.Background(), x.target.ID, "running"))
		}}}})
	rt := x.function(60*time.Second, append(awsEnv, "NODE_LEASE_STALE_AFTER=5s")...)
	x.must(env.SetInstanceState(x.ctx, x.target.ID, "stopped"))
	x.killKubelet(x.target.PrivateDNSName)
	_, err := x.invoke(rt, x.stateEvent(x.target.ID, "stopped", time.Now()))
	x.t.Logf("invocation: %v", err)
	x.expect(len(aws.Requests()) > 0, "the function made no EC2 call")
	n := x.getNode(x.target.PrivateDNSName)
	if hasTaint(n, node.TaintOutOfService) {
		x.violate("out-of-service taint on a node whose instance was running again")
	}
	if t := x.touched(before); len(t) > 0 {
		x.violate("pods force-deleted on a running instance: %v", t)
	}
	if !attachmentPresent(x, x.target.PrivateDNSName, pv) {
		x.violate("VolumeAttachment deleted on a running instance")
	}
}

func attachmentPresent(x *X, nodeName, pv string) bool {
	list, err := env.Client.StorageV1().VolumeAttachments().List(x.ctx, metav1.ListOptions{})
	x.must(err)
	for _, va := range list.Items {
		if va.Spec.NodeName == nodeName && va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv && va.DeletionTimestamp == nil {
			return true
		}
	}
	return false
}

// terminatedAfterNameReuse: the instance is terminated and its node deleted;
// a new machine registers a node of the same name (no providerID yet); the
// `terminated` event, older than the new node, arrives: the new node is
// never touched.
func terminatedAfterNameReuse(x *X) {
	x.scene(sceneOpts{nodes: 2})
	name := x.target.PrivateDNSName
	x.must(env.SetInstanceState(x.ctx, x.target.ID, "terminated"))
	eventTime := time.Now()
	x.must(env.Client.CoreV1().Nodes().Delete(x.ctx, name, metav1.DeleteOptions{}))
	_ = wait.PollUntilContextTimeout(x.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
	time.Sleep(2 * time.Second) // the new node is visibly younger than the event
	_, err := env.AddNode(x.ctx, harness.NodeSpec{Name: name, Zone: harness.Zone, NoProviderID: true, Labels: map[string]string{"pool": x.name}})
	x.must(err)
	pod, err := env.BarePod(x.ctx, x.workload("newcomer", 1), name)
	x.must(err)
	_, err = env.WaitPodsRunning(x.ctx, x.ns, "app=newcomer", 1, time.Minute)
	x.must(err)
	rt := x.function(60*time.Second, "NODE_LEASE_STALE_AFTER=5s", "DELETE_TERMINATED_NODES=true")
	_, err = x.invoke(rt, x.stateEvent(x.target.ID, "terminated", eventTime))
	x.t.Logf("invocation: %v", err)
	n, err := env.Client.CoreV1().Nodes().Get(x.ctx, name, metav1.GetOptions{})
	if err != nil {
		x.violate("the new node of the same name was deleted: %v", err)
		return
	}
	if hasTaint(n, node.TaintOutOfService) || n.Spec.Unschedulable {
		x.violate("the new node of the same name was cordoned/tainted: %v", ourMarks(n))
	}
	if t := x.touched([]corev1.Pod{*pod}); len(t) > 0 {
		x.violate("a pod on the new node was force-deleted: %v", t)
	}
}

// providerIDMismatch: the node named after the stopped instance belongs to
// another instance (its providerID), which runs: nothing is forced on it,
// though its kubelet is dead.
func providerIDMismatch(x *X) {
	x.scene(sceneOpts{nodes: 3, noNode: map[int]bool{0: true, 1: true}})
	other := x.insts[1]
	name := x.target.PrivateDNSName
	_, err := env.AddNode(x.ctx, harness.NodeSpec{Name: name, InstanceID: other.ID, Zone: harness.Zone, Labels: map[string]string{"pool": x.name}})
	x.must(err)
	x.web("web", 2, -1, -1)
	before := x.podsOn(name)
	x.must(env.SetInstanceState(x.ctx, x.target.ID, "stopped"))
	x.killKubelet(name)
	rt := x.function(60*time.Second, "NODE_LEASE_STALE_AFTER=5s")
	_, err = x.invoke(rt, x.stateEvent(x.target.ID, "stopped", time.Now()))
	x.t.Logf("invocation: %v", err)
	n := x.getNode(name)
	if hasTaint(n, node.TaintOutOfService) {
		x.violate("out-of-service taint on a node whose providerID names another, running instance")
	}
	if t := x.touched(before); len(t) > 0 {
		x.violate("pods force-deleted on another instance's node: %v", t)
	}
}

// ---- 7: concurrent duplicates ----

// duplicateConcurrent: one terminate hook delivered three times at once (three
// execution environments): one drain, one completion, each pod evicted once.
func duplicateConcurrent(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 3, 1, -1)
	api, apiEnv := x.apiProxy(fp.Options{})
	var rts []*lambdart.Runtime
	for i := 0; i < 3; i++ {
		rts = append(rts, x.function(60*time.Second, apiEnv, "DRAIN_TIMEOUT=5m"))
	}
	x.observe(map[string]int{"app=web": 2})
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	x.began = time.Now()
	var wg sync.WaitGroup
	outs := make([]handler.Outcome, 3)
	for i, rt := range rts {
		wg.Go(func() {
			var err error
			outs[i], err = x.invoke(rt, payload)
			x.expect(err == nil, "invocation %d failed: %v", i, err)
		})
	}
	wg.Wait()
	got := x.waitHook(90*time.Second, rts...)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	x.checkFloors()
	evicted := map[string]int{}
	for _, o := range outs {
		for _, p := range o.Evicted {
			evicted[p]++
		}
	}
	for p, n := range evicted {
		if n > 1 {
			x.violate("pod %s evicted by %d invocations", p, n)
		}
	}
	for pod, reqs := range evictions(api) {
		ok := 0
		for _, r := range reqs {
			if r.Status/100 == 2 {
				ok++
			}
		}
		if ok > 1 {
			x.violate("pod %s evicted %d times", pod, ok)
		}
	}
}

// ---- 8: PDB edge cases ----

// pdbEmptySelector: a PDB with an empty selector (every pod of the namespace)
// and maxUnavailable 0 holds the drain 8 s. The eviction API decides: no pod
// goes while it stands; the retries are paced; the blocker is named.
func pdbEmptySelector(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, -1, -1)
	zero := intstrZero()
	_, err := env.Client.PolicyV1().PodDisruptionBudgets(x.ns).Create(x.ctx, pdb("freeze-all", &metav1.LabelSelector{}, zero), metav1.CreateOptions{})
	x.must(err)
	time.Sleep(2 * time.Second) // the disruption controller computes its status
	api, apiEnv := x.apiProxy(fp.Options{})
	rt := x.function(60*time.Second, apiEnv, "DRAIN_TIMEOUT=5m")
	x.observe(map[string]int{"app=web": 2})
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	x.began = time.Now()
	liftedAt := make(chan time.Time, 1)
	go func() {
		time.Sleep(8 * time.Second)
		x.checkFloors() // nothing may have gone while the PDB stood
		liftedAt <- time.Now()
		_ = env.Client.PolicyV1().PodDisruptionBudgets(x.ns).Delete(context.Background(), "freeze-all", metav1.DeleteOptions{})
	}()
	_, err = x.invoke(rt, payload)
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(time.Minute, rt)
	x.setDrained()
	x.checkHook("CONTINUE", got)
	x.pacedEvictions(api, <-liftedAt)
	x.expect(x.logged("freeze-all"), "the blocking PDB freeze-all is not named in the function's log")
}

// pacedEvictions: at most 3 eviction attempts a second per pod before until.
func (x *X) pacedEvictions(api *fp.Proxy, until time.Time) {
	if until.IsZero() {
		until = time.Now()
	}
	secs := until.Sub(x.began).Seconds()
	for pod, reqs := range evictions(api) {
		n := 0
		for _, r := range reqs {
			if r.Time.Before(until) {
				n++
			}
		}
		x.expect(float64(n) <= 3*secs+2, "pod %s: %d eviction attempts in %.0f s (a hot loop)", pod, n, secs)
	}
}

// podTwoPDBs: a pod under two PDBs cannot be evicted (the API refuses). The
// pod is never deleted; the hook is completed with the failure result at
// DRAIN_TIMEOUT less the margin; retries are paced; the blockers named.
func podTwoPDBs(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 1, -1, -1)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	one := intstrOne()
	for _, name := range []string{"web-a", "web-b"} {
		_, err := env.Client.PolicyV1().PodDisruptionBudgets(x.ns).Create(x.ctx, pdb(name, sel, one), metav1.CreateOptions{})
		x.must(err)
	}
	before := x.podsOn(x.target.PrivateDNSName)
	api, apiEnv := x.apiProxy(fp.Options{})
	rt := x.function(60*time.Second, apiEnv, "DRAIN_TIMEOUT=25s", "DEADLINE_MARGIN=5s", "LIFECYCLE_RESULT_ON_FAILURE=ABANDON")
	x.observe(nil)
	_, err := x.invoke(rt, x.terminating("token-"+x.name))
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(45*time.Second, rt)
	x.setDrained()
	x.checkHook("ABANDON", got)
	if got != nil && got.Time.Sub(x.began) < 18*time.Second {
		x.violate("hook completed at %.1fs, before DRAIN_TIMEOUT-margin (20s), with the pod still there", got.Time.Sub(x.began).Seconds())
	}
	if t := x.touched(before); len(t) > 0 {
		x.violate("a pod the eviction API refused was deleted: %v", t)
	}
	x.pacedEvictions(api, time.Time{})
	x.expect(x.logged("web-a") || x.logged("web-b"), "the blocking PDBs are not named in the function's log")
}

// ---- 9: dead kubelet under a terminate hook ----

// deadKubeletTerminate: the target's kubelet is dead (NotReady); its
// terminate hook is completed within DEAD_NODE_EVICTION_WINDOW (10 s) plus
// slack, and its pods were evicted: replacements run elsewhere.
func deadKubeletTerminate(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 3, -1, -1)
	x.killKubelet(x.target.PrivateDNSName)
	rt := x.function(60*time.Second, "DRAIN_TIMEOUT=5m", "DEAD_NODE_EVICTION_WINDOW=10s", "DEADLINE_MARGIN=5s")
	_, err := x.invoke(rt, x.terminating("token-"+x.name))
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(40*time.Second, rt)
	x.checkHook("CONTINUE", got)
	if got != nil {
		x.expect(got.Time.Sub(x.began) <= 25*time.Second, "hook completed at %.1fs, want within the 10 s window (+15 s slack)", got.Time.Sub(x.began).Seconds())
	}
	// evicted: Terminating (a dead kubelet never finishes the deletion), or
	// gone (force-deleted)
	alive := 0
	for _, p := range x.podsOn(x.target.PrivateDNSName) {
		if p.DeletionTimestamp == nil && p.Labels["app"] == "web" {
			alive++
		}
	}
	x.drained = map[bool]string{true: "yes", false: "no"}[alive == 0]
	x.expect(alive == 0, "%d of 3 web pods on the dead node not evicted", alive)
	err = wait.PollUntilContextTimeout(x.ctx, 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		n := 0
		for _, p := range x.podsOn(x.insts[1].PrivateDNSName) {
			if harness.PodReady(&p) && p.Labels["app"] == "web" {
				n++
			}
		}
		return n == 3, nil
	})
	x.expect(err == nil, "replacements not running elsewhere")
}

func intstrZero() intstr.IntOrString { return intstr.FromInt32(0) }
func intstrOne() intstr.IntOrString  { return intstr.FromInt32(1) }

func pdb(name string, sel *metav1.LabelSelector, maxUnavailable intstr.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: sel, MaxUnavailable: &maxUnavailable},
	}
}
