package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// deadScenarios: rule 16 and the abrupt path's readings (a NotReady node
// whose kubelet Lease is fresh, a hibernated stop, an orphaned attachment
// whose instance came back, a listed group's foreign launch).
func deadScenarios() []scenario {
	return []scenario{
		{"notready-fresh-lease", notReadyFreshLease},
		{"hibernated-stop", hibernatedStop},
		{"orphan-instance-back", orphanInstanceBack},
		{"launch-listed-asg-foreign", launchListedASGForeign},
		{"kubelet-back-in-dead-window", kubeletBackInDeadWindow},
	}
}

// kubeletBackInDeadWindow: the target's kubelet looks dead (its node
// NotReady, its Lease a minute old and no longer renewed) and a terminate
// hook comes: the dead-node shortcut evicts and would complete the hook at
// the end of DEAD_NODE_EVICTION_WINDOW (30 s). But the kubelet is back 10 s
// into the window (Ready, its Lease renewed) and its pods run: a PDB holds
// one of them until 60 s. The node is read again before the hook is
// completed (found by the simulation, issue 29): the drain goes on as a live
// node's, and the hook is completed, CONTINUE, only after the held pod is
// evicted. (The pods stay Ready all along, as the node controller leaves
// them when the kubelet itself reports NotReady.)
func kubeletBackInDeadWindow(x *X) {
	x.scene(sceneOpts{nodes: 2})
	name := x.target.PrivateDNSName
	x.web("web", 3, 1, -1)  // floor 2
	x.web("held", 1, -1, 1) // minAvailable 1 of 1: held until the PDB goes
	x.kubeletNotReady(name)
	x.staleKubeletLease(name, time.Minute)
	rt := x.function(90*time.Second, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=5s", "DEAD_NODE_EVICTION_WINDOW=30s", "NODE_LEASE_STALE_AFTER=15s")
	x.observe(map[string]int{"app=web": 2})
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	x.began = time.Now()
	go func() {
		select {
		case <-x.ctx.Done():
		case <-time.After(10 * time.Second):
			x.kubeletReadyAgain(name)
			// kwok makes the Lease again, renewed from now on
			_ = env.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	}()
	lifted := x.deletePDBAfter("held", 60*time.Second)
	got := x.drainThenComplete(rt, payload, 2*time.Minute)
	if got != nil && got.Time.Sub(x.began) < 55*time.Second {
		x.violate("hook completed at %.1fs with the held pod's PDB standing until 60s: the kubelet was back within the dead-node window, its pods running", got.Time.Sub(x.began).Seconds())
	}
	<-lifted
	x.expect(time.Since(x.leaseRenewed(name)) < 30*time.Second, "the kubelet Lease of %s was not renewed again after the scene gave it back: the scene proves nothing", name)
}

// deletePDBAfter deletes the scene's PDB name after d (the held pod may go
// from then on); the channel closes once it is deleted, or the scene ends.
func (x *X) deletePDBAfter(name string, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-x.ctx.Done():
			return
		case <-time.After(d):
		}
		_ = env.Client.PolicyV1().PodDisruptionBudgets(x.ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	}()
	return done
}

// staleKubeletLease takes the node's kubelet Lease from kwok (a day-long
// duration, so kwok does not take it back) with its last renewal age ago:
// the kubelet looks dead to whoever reads the Lease, while kwok goes on
// playing its pods. Deleting the Lease gives it back.
func (x *X) staleKubeletLease(name string, age time.Duration) {
	leases := env.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	l, err := leases.Get(x.ctx, name, metav1.GetOptions{})
	x.must(err)
	holder, day := "testenv-dead-kubelet", int32(86400)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &holder, &day
	then := metav1.NewMicroTime(time.Now().Add(-age))
	l.Spec.RenewTime = &then
	_, err = leases.Update(x.ctx, l, metav1.UpdateOptions{})
	x.must(err)
}

// ---- rule 16: a NotReady node whose kubelet is alive ----

// notReadyFreshLease: the target's kubelet reports Ready=False for a while
// (as a real one does when its runtime's health check lags: "PLEG is not
// healthy") and keeps renewing its Lease in kube-node-lease all along. A
// terminate hook comes meanwhile. One read of Ready is not a verdict (rule
// 16): the kubelet is alive, so the drain is the ordinary one — no
// dead-node shortcut. A PDB holds one pod for 60 s: the hook is completed,
// CONTINUE, only after it is evicted (the node drained), and the other
// PDB's floor holds.
func notReadyFreshLease(x *X) {
	x.scene(sceneOpts{nodes: 2})
	name := x.target.PrivateDNSName
	x.web("web", 3, 1, -1)  // floor 2
	x.web("held", 1, -1, 1) // minAvailable 1 of 1: held until the PDB goes
	renewedBefore := x.leaseRenewed(name)
	x.kubeletNotReady(name)
	rt := x.function(90*time.Second, "DRAIN_TIMEOUT=5m", "DEADLINE_MARGIN=5s", "DEAD_NODE_EVICTION_WINDOW=10s", "NODE_LEASE_STALE_AFTER=30s")
	x.observe(map[string]int{"app=web": 2})
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	x.began = time.Now()
	lifted := x.deletePDBAfter("held", 60*time.Second)
	// the kubelet recovers its Ready condition after 30 s; its Lease was
	// fresh all along
	go func() {
		select {
		case <-x.ctx.Done():
		case <-time.After(30 * time.Second):
			x.kubeletReadyAgain(name)
		}
	}()
	got := x.drainThenComplete(rt, payload, 2*time.Minute)
	if got != nil && got.Time.Sub(x.began) < 55*time.Second {
		x.violate("hook completed at %.1fs with the held pod's PDB standing until 60s: a NotReady read with a fresh kubelet Lease was taken for a dead kubelet", got.Time.Sub(x.began).Seconds())
	}
	<-lifted
	// the scene held: the Lease was renewed while the node read NotReady
	x.expect(x.leaseRenewed(name).After(renewedBefore), "the kubelet Lease of %s was not renewed during the scene: the scene proves nothing", name)
}

// leaseRenewed is the node's kubelet Lease renewTime.
func (x *X) leaseRenewed(name string) time.Time {
	l, err := env.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(x.ctx, name, metav1.GetOptions{})
	x.must(err)
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// kubeletNotReady makes the node's kubelet report Ready=False while its
// Lease heartbeat goes on: kwok plays the kubelet and would write Ready=True
// back at once, so a ValidatingAdmissionPolicy refuses every write of the
// node's status but the scene's own (kwok's Lease renewals are not status
// writes: they go on). kubeletReadyAgain undoes it.
func (x *X) kubeletNotReady(name string) {
	ssr, err := env.Client.AuthenticationV1().SelfSubjectReviews().Create(x.ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	x.must(err)
	me := ssr.Status.UserInfo.Username
	policy := "freeze-status-" + x.name
	fail := admissionv1.Fail
	_, err = env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(x.ctx, &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policy},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes/status"}},
				},
			}}},
			MatchConditions: []admissionv1.MatchCondition{{Name: "target-not-scene",
				Expression: fmt.Sprintf("request.name == %q && request.userInfo.username != %q", name, me)}},
			Validations: []admissionv1.Validation{{Expression: "false", Message: "the scene holds this kubelet's Ready condition False"}},
		},
	}, metav1.CreateOptions{})
	x.must(err)
	_, err = env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(x.ctx, &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}, metav1.CreateOptions{})
	x.must(err)
	x.t.Cleanup(func() { x.unfreezeStatus(policy) })
	// the policy takes effect once the apiserver has loaded it: write
	// Ready=False until it stays
	err = wait.PollUntilContextTimeout(x.ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		x.must(x.setReady(ctx, name, corev1.ConditionFalse))
		time.Sleep(2 * time.Second)
		n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && !node.Ready(n), nil
	})
	x.must(err)
	x.t.Logf("node %s reads NotReady (kubelet Lease renewed %s ago)", name, time.Since(x.leaseRenewed(name)).Round(time.Second))
}

func (x *X) unfreezeStatus(policy string) {
	ctx := context.Background()
	_ = env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, policy, metav1.DeleteOptions{})
	_ = env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, policy, metav1.DeleteOptions{})
}

// kubeletReadyAgain: the kubelet reports Ready again, and kwok has its
// node's status back.
func (x *X) kubeletReadyAgain(name string) {
	ctx := context.Background()
	if err := x.setReady(ctx, name, corev1.ConditionTrue); err != nil {
		x.t.Logf("kubelet Ready again: %v", err)
	}
	x.unfreezeStatus("freeze-status-" + x.name)
	x.t.Logf("node %s Ready again", name)
}

// setReady writes the node's Ready condition as its kubelet would.
func (x *X) setReady(ctx context.Context, name string, status corev1.ConditionStatus) error {
	reason, msg := "KubeletReady", "kubelet is posting ready status"
	if status != corev1.ConditionTrue {
		reason, msg = "KubeletNotReady", "PLEG is not healthy: pleg was last seen active 3m5s ago; threshold is 3m0s"
	}
	now := metav1.Now()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}}}})
	if err != nil {
		return err
	}
	_, err = env.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// ---- hibernation: a stopped instance that resumes ----

// hibernatedStop: the target instance (hibernation configured) is stopped
// with hibernation — EC2 reports it `stopped`, StateReason
// Client.UserInitiatedHibernate — and its kubelet is silent (NotReady, Lease
// stale). Its RAM comes back with its volumes when it starts: it is not
// down for forcing. The `stopped` event forces nothing (db-0 not
// force-deleted, its VolumeAttachment kept, no out-of-service taint; a
// cordon may be placed) and the function records that it did not force.
// The instance then runs again: the `running` event leaves no mark of ours.
func hibernatedStop(x *X) {
	x.scene(sceneOpts{nodes: 2})
	hib, err := env.AddHibernatableInstance(x.ctx, x.asg)
	x.must(err)
	x.must(env.AddNodeFor(x.ctx, hib, map[string]string{"pool": x.name}))
	x.insts, x.target = append(x.insts, hib), hib
	name := hib.PrivateDNSName
	pv := x.statefulSet()
	before := x.podsOn(name)
	rt := x.function(60*time.Second, "NODE_LEASE_STALE_AFTER=5s", "STOPPING_WAIT_TIMEOUT=20s")
	x.must(env.Hibernate(x.ctx, hib.ID))
	x.killKubelet(name)
	out, err := x.invoke(rt, x.stateEvent(hib.ID, "stopped", time.Now()))
	x.expect(err == nil, "invocation failed: %v", err)
	x.checkNotForced(name, pv, before, "hibernated")
	x.expect(out.Action == handler.ActionNotForced, "outcome %q for a hibernated stop, want %q (the function records that it did not force)", out.Action, handler.ActionNotForced)
	x.expect(x.nodeEvent(name, node.ReasonNotForced), "no %s Event on node %s: the function did not record that it did not force", node.ReasonNotForced, name)

	// it resumes: instance running, kubelet back
	x.must(env.SetInstanceState(x.ctx, hib.ID, "running"))
	x.must(env.StartKubelet(x.ctx, name))
	x.must(env.WaitNodeReady(x.ctx, name, true, time.Minute))
	_, err = x.invoke(rt, x.stateEvent(hib.ID, "running", time.Now()))
	x.expect(err == nil, "running: invocation failed: %v", err)
	n := x.getNode(name)
	_, held := node.Marks(n)
	x.expect(!n.Spec.Unschedulable && len(ourMarks(n)) == 0 && !held, "marks left on a resumed instance's node: unschedulable=%v %v annotation=%q",
		n.Spec.Unschedulable, ourMarks(n), n.Annotations[node.AnnotationOwned])
	x.mu.Lock()
	clean := len(x.violations) == 0
	x.mu.Unlock()
	if clean {
		// db-0 lives on where it was: its machine resumed with it
		x.checkNotForced(name, pv, before, "resumed")
	}
}

// checkNotForced: nothing forced on the node: its pods not force-deleted,
// the volume's attachment there, no out-of-service taint.
func (x *X) checkNotForced(name, pv string, before []corev1.Pod, when string) {
	if t := x.touched(before); len(t) > 0 {
		x.violate("%s: pods force-deleted on a hibernated instance: %v", when, t)
	}
	if !attachmentPresent(x, name, pv) {
		x.violate("%s: VolumeAttachment of %s deleted on a hibernated instance", when, pv)
	}
	if hasTaint(x.getNode(name), node.TaintOutOfService) {
		x.violate("%s: out-of-service taint on a hibernated instance's node", when)
	}
}

// nodeEvent reports whether an Event of reason was recorded on the node.
func (x *X) nodeEvent(name string, reason node.Reason) bool {
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": name, "reason": string(reason)}.AsSelector().String()
	list, err := env.Client.CoreV1().Events(metav1.NamespaceAll).List(x.ctx, metav1.ListOptions{FieldSelector: sel})
	x.must(err)
	return len(list.Items) > 0
}

// ---- rule 11 in the sweep: an orphan whose instance came back ----

// orphanInstanceBack: a VolumeAttachment names a node the cluster no longer
// has; EC2, at the sweep's reading (DescribeInstances by that private DNS
// name), reports the instance terminated — an orphan by the sweep's rule.
// Once that reading is answered, and before the function's next call
// (apiserver or AWS) goes on, EC2 reports it running (the emulator starts
// the instance again: what matters is that EC2's answer changed between the
// sweep's reading and its delete). Rule 11: the delete reads EC2 again and
// keeps the attachment of an instance that runs.
func orphanInstanceBack(x *X) {
	tag := "kubernetes.io/cluster/" + x.name // the sweep's own cluster: it acts on nothing of the other scenes
	x.scene(sceneOpts{nodes: 1, clusterTag: tag, noNode: map[int]bool{0: true}})
	va := x.orphanAttachment(x.target.PrivateDNSName)
	x.must(env.SetInstanceState(x.ctx, x.target.ID, "terminated"))
	// the instance runs again once the reading has been answered, and
	// before the function's next call of any kind (apiserver or AWS) goes
	// on: whatever the delete reads next sees it running
	var (
		read, back atomic.Bool
		once       sync.Once
	)
	start := func() {
		once.Do(func() {
			if err := env.SetInstanceState(context.Background(), x.target.ID, "running"); err != nil {
				x.t.Logf("starting %s again: %v", x.target.ID, err)
				return
			}
			back.Store(true)
		})
	}
	next := func(*http.Request, []byte) {
		if read.Load() {
			start()
		}
	}
	aws, awsEnv := x.awsProxy(fp.Options{Rules: []fp.Rule{
		{Name: "the sweep's reading by DNS name", Body: "private-dns-name", Fault: fp.Pass, Times: 1,
			Before: func(*http.Request, []byte) { read.Store(true) },
			Then:   func(*http.Request, []byte, int) { start() }},
		{Name: "instance back before the next AWS call", Fault: fp.Pass, Before: next},
	}})
	_, apiEnv := x.apiProxy(fp.Options{Rules: []fp.Rule{{Name: "instance back before the next apiserver call", Fault: fp.Pass, Before: next}}})
	rt := x.function(60*time.Second, append(awsEnv, apiEnv, "CLUSTER_TAG_KEY="+tag, "ASG_NAMES="+x.asg)...)
	payload, err := harness.EventFile("sweep.json", nil)
	x.must(err)
	out, err := x.invoke(rt, payload)
	x.t.Logf("sweep: %v %+v", err, out.Sweep)
	_ = wait.PollUntilContextTimeout(x.ctx, 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) { return back.Load(), nil })
	if !x.expect(back.Load(), "the sweep never read EC2 by the attachment's node name (%d AWS calls): the scene proves nothing", len(aws.Requests())) {
		return
	}
	cur, err := env.Client.StorageV1().VolumeAttachments().Get(x.ctx, va.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		x.must(err)
	}
	if apierrors.IsNotFound(err) || cur.DeletionTimestamp != nil {
		x.violate("attachment %s deleted though EC2 reported its instance %s running at the moment of deleting (acted on the sweep's reading)", va.Name, x.target.ID)
		return
	}
	if out.Sweep != nil && slices.Contains(out.Sweep.Orphans, va.Name) {
		// not a breach, a false record: Orphans lists the attachments deleted
		x.expect(false, "the sweep's summary lists attachment %s among the orphans deleted, though it was kept", va.Name)
	}
}

// orphanAttachment creates an attached VolumeAttachment (the harness's CSI
// attacher stage marks it attached) to nodeName, which has no Node.
func (x *X) orphanAttachment(nodeName string) *storagev1.VolumeAttachment {
	pv := "pv-" + x.name
	va, err := env.Client.StorageV1().VolumeAttachments().Create(x.ctx, &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "va-" + x.name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: harness.CSIDriver, NodeName: nodeName,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
	}, metav1.CreateOptions{})
	x.must(err)
	x.t.Cleanup(func() {
		_ = env.Client.StorageV1().VolumeAttachments().Delete(context.Background(), va.Name, metav1.DeleteOptions{})
	})
	return va
}

// ---- a listed group's launch hook for a foreign instance ----

// launchListedASGForeign: ASG_NAMES lists the scene's group; its instance
// lacks this cluster's tag (and has no node). Its launch lifecycle action
// (Pending:Wait) is ours by configuration and nobody else completes it: it
// is completed once, CONTINUE, at once — not left to time out.
func launchListedASGForeign(x *X) {
	x.scene(sceneOpts{nodes: 1, clusterTag: "kubernetes.io/cluster/another", noNode: map[int]bool{0: true}})
	token := "token-" + x.name
	x.must(env.AWS.RegisterLifecycleAction(x.ctx, moto.LifecycleAction{ASG: x.asg, Hook: harness.LaunchHook, InstanceID: x.target.ID,
		Token: token, Transition: "autoscaling:EC2_INSTANCE_LAUNCHING"}))
	rt := x.function(30*time.Second, "ASG_NAMES="+x.asg)
	_, err := x.invoke(rt, x.event("asg-launch.json", map[string]any{"AutoScalingGroupName": x.asg, "LifecycleHookName": harness.LaunchHook,
		"EC2InstanceId": x.target.ID, "LifecycleActionToken": token}, map[string]any{"time": time.Now().UTC().Format(time.RFC3339)}))
	x.expect(err == nil, "invocation failed: %v", err)
	got := x.waitHook(20*time.Second, rt)
	x.checkHook("CONTINUE", got)
	if got != nil {
		x.expect(got.Time.Sub(x.began) <= 10*time.Second, "launch hook completed at %.1fs, want at once (within 10 s)", got.Time.Sub(x.began).Seconds())
		x.expect(got.Params["LifecycleHookName"] == harness.LaunchHook, "completed hook %q, want %q", got.Params["LifecycleHookName"], harness.LaunchHook)
	}
}
