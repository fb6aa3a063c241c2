package conformance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
	"github.com/node-drainer/node-drainer/test/harness"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
)

// Behaviour is one claim the world makes, asserted the same way on both
// sides: nil is the side doing what the real system does.
type Behaviour struct {
	Name string
	Run  func(ctx context.Context, s Side, ns string) error
}

// Behaviours are the suite, in the order they run (a namespace each).
var Behaviours = []Behaviour{
	{"pods/field-selector spec.nodeName served", podsByNode},
	{"pods/field-selector status.phase served", podsByPhase},
	{"pods/field-selector on an unindexed field refused 400", podsUnknownField},
	{"nodes/field-selector metadata.name served", nodesByName},
	{"nodes/field-selector spec.unschedulable served", nodesByUnschedulable},
	{"volumeattachments/field-selector spec.nodeName refused 400", vaByNode},
	{"volumeattachments/field-selector metadata.name served", vaByName},
	{"volumeattachments/attached by the attacher, a deleted one stays until it detaches (finalizer), then gone", vaDetachFinalizer},
	{"create gives a UID, a creationTimestamp and a resourceVersion", createStamps},
	{"update at an old resourceVersion 409", updateOldRV},
	{"delete with a UID precondition that fails 409, the object kept", deleteUIDPrecondition},
	{"delete with a resourceVersion precondition that fails 409", deleteRVPrecondition},
	{"graceful deletion: deletionTimestamp and grace period set, then gone", gracefulDeletion},
	{"delete with grace 0 removes at once", forceDeletion},
	{"list limit/continue pages in key order with remainingItemCount", listPages},
	{"list continue token served right after etcd compacts past it (the watch cache's snapshot)", continueAfterCompaction},
	{"watch from a list's resourceVersion sees every later write in order", watchFromRV},
	{"watch from an early resourceVersion the history holds replays every write since", watchOldRV},
	{"watch with a field selector sees only what it selects", watchFieldSelector},
	{"eviction of a pod no PDB covers accepted, pod deleted gracefully", evictAllowed},
	{"eviction its PDB forbids 429 with the budget's cause", evictForbidden},
	{"eviction with a UID precondition that fails 409, pod kept", evictUIDMismatch},
	{"eviction dry run accepted and changes nothing", evictDryRun},
	{"eviction dry run its PDB forbids 429", evictDryRunForbidden},
	{"eviction of a pending pod skips its PDB", evictPendingSkipsPDB},
	{"eviction writes status.disruptedPods and spends the budget", evictDisruptedPods},
	{"eviction of a pod under two PDBs 500 naming more than one PodDisruptionBudget, pod kept", evictTwoPDBs},
	{"eviction an admission policy refuses 422 Invalid, pod kept, accepted once lifted", evictRefusedBy(http.StatusUnprocessableEntity)},
	{"eviction an admission policy refuses 403 Forbidden, pod kept, accepted once lifted", evictRefusedBy(http.StatusForbidden)},
	{"eviction a webhook that cannot be called refuses 500, pod kept, accepted once lifted", evictRefusedBy(http.StatusInternalServerError)},
	{"PDB status from its spec: expected, desired, healthy, allowed", pdbStatus},
	{"PDB maxUnavailable over pods no controller owns allows nothing", pdbBarePodsMaxUnavailable},
	{"node Leases are renewed while kubelets run", leasesRenewed},
	{"silent kubelet: node Unknown, unreachable NoExecute taint, pods not ready", silentKubelet},
	{"kubelet reporting NotReady with its Lease renewed: node False (not Unknown), not-ready NoExecute taint, its pods left Ready", runtimeDown},
	{"out-of-service taint on a NotReady node: its pods evicted by the taint and removed by the pod GC", outOfServiceRemovesPods},
	{"autoscaling/CompleteLifecycleAction ends the wait", completeEndsWait},
	{"autoscaling/second CompleteLifecycleAction refused: no active action", completeTwice},
	{"autoscaling/CompleteLifecycleAction by instance id, no token", completeByInstance},
	{"autoscaling/ABANDON of one terminate hook ends the instance's other actions: their completion refused", abandonEndsOthers},
	{"autoscaling/CONTINUE of one terminate hook leaves the other's action waiting", continueLeavesOthers},
	{"autoscaling/CompleteLifecycleAction with a wrong token refused", completeWrongToken},
	{"autoscaling/DeleteLifecycleHook ends the action waiting under the hook: the instance goes on, its completion refused", deleteEndsAction},
	{"autoscaling/a waiting action ends at its hook's HeartbeatTimeout (put to 30 s while it waits): its completion refused", timeoutEndsAction},
	{"autoscaling/RecordLifecycleActionHeartbeat accepted while waiting", heartbeatAccepted},
	{"autoscaling/RecordLifecycleActionHeartbeat after completion refused", heartbeatAfterComplete},
	{"ec2/stopped instance: state stopped, StateReason Client.UserInitiatedShutdown", ec2Stopped(false, "Client.UserInitiatedShutdown")},
	{"ec2/hibernated instance: state stopped, StateReason Client.UserInitiatedHibernate", ec2Stopped(true, "Client.UserInitiatedHibernate")},
}

// Helpers.

func eventually(ctx context.Context, s Side, within time.Duration, f func() error) error {
	end := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return fmt.Errorf("after %s: %w", within, err)
		}
		s.Sleep(250 * time.Millisecond)
	}
}

var grace30 = int64(30)

func podSpec(node string) corev1.PodSpec {
	return corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &grace30,
		Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}}
}

func newPod(ns, name, node string, lbl map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl}, Spec: podSpec(node)}
}

// runningPod creates a pod bound to node and waits until it runs, Ready.
func runningPod(ctx context.Context, s Side, ns, name, node string, lbl map[string]string) (*corev1.Pod, error) {
	if _, err := s.Kube().CoreV1().Pods(ns).Create(ctx, newPod(ns, name, node, lbl), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	var p *corev1.Pod
	err := eventually(ctx, s, 30*time.Second, func() error {
		var err error
		if p, err = s.Kube().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if !harness.PodReady(p) {
			return fmt.Errorf("pod %s %s, not Ready", name, p.Status.Phase)
		}
		return nil
	})
	return p, err
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}

func wantStatus(err error, code int32, what string) error {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return fmt.Errorf("%s: want %d, got %v", what, code, err)
	}
	if got := st.Status().Code; got != code {
		return fmt.Errorf("%s: want %d, got %d (%s)", what, code, got, st.Status().Message)
	}
	return nil
}

func pdb(ns, name string, lbl map[string]string, minAv, maxUn *intstr.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: minAv, MaxUnavailable: maxUn, Selector: &metav1.LabelSelector{MatchLabels: lbl}}}
}

func ptrInt(v int32) *intstr.IntOrString { x := intstr.FromInt32(v); return &x }

// pdbSettled waits until the PDB's status is its controller's for its
// generation and cond holds.
func pdbSettled(ctx context.Context, s Side, ns, name string, cond func(policyv1.PodDisruptionBudgetStatus) error) (*policyv1.PodDisruptionBudget, error) {
	var b *policyv1.PodDisruptionBudget
	err := eventually(ctx, s, 60*time.Second, func() error {
		var err error
		if b, err = s.Kube().PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if b.Status.ObservedGeneration < b.Generation || b.Generation == 0 {
			return fmt.Errorf("PDB %s not observed (generation %d, observed %d)", name, b.Generation, b.Status.ObservedGeneration)
		}
		return cond(b.Status)
	})
	return b, err
}

func evict(ctx context.Context, s Side, p *corev1.Pod, o *metav1.DeleteOptions) error {
	return s.Kube().PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}, DeleteOptions: o})
}

// Cluster: field selectors.

func podsByNode(ctx context.Context, s Side, ns string) error {
	a, b := s.Nodes()[0], s.Nodes()[1]
	for i, n := range []string{a, a, b} {
		if _, err := s.Kube().CoreV1().Pods(ns).Create(ctx, newPod(ns, fmt.Sprintf("p%d", i), n, nil), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	l, err := s.Kube().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + a})
	if err != nil {
		return err
	}
	if got := names(l.Items); !slices.Equal(got, []string{"p0", "p1"}) {
		return fmt.Errorf("pods on %s: %v, want [p0 p1]", a, got)
	}
	return nil
}

func podsByPhase(ctx context.Context, s Side, ns string) error {
	if _, err := runningPod(ctx, s, ns, "up", s.Nodes()[0], nil); err != nil {
		return err
	}
	if _, err := s.Kube().CoreV1().Pods(ns).Create(ctx, newPod(ns, "unbound", "", nil), metav1.CreateOptions{}); err != nil {
		return err
	}
	l, err := s.Kube().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Running"})
	if err != nil {
		return err
	}
	if got := names(l.Items); !slices.Contains(got, "up") {
		return fmt.Errorf("running pods %v: want up among them", got)
	}
	for _, p := range l.Items {
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("%s listed as Running, is %s", p.Name, p.Status.Phase)
		}
	}
	return nil
}

func podsUnknownField(ctx context.Context, s Side, ns string) error {
	_, err := s.Kube().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.priorityClassName=x"})
	if err := wantStatus(err, 400, "list pods by spec.priorityClassName"); err != nil {
		return err
	}
	if !strings.Contains(err.Error(), "field label not supported") {
		return fmt.Errorf("message %q: want \"field label not supported\"", err)
	}
	return nil
}

func nodesByName(ctx context.Context, s Side, _ string) error {
	a := s.Nodes()[0]
	l, err := s.Kube().CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + a})
	if err != nil {
		return err
	}
	if len(l.Items) != 1 || l.Items[0].Name != a {
		return fmt.Errorf("%d nodes for metadata.name=%s", len(l.Items), a)
	}
	return nil
}

func nodesByUnschedulable(ctx context.Context, s Side, _ string) error {
	l, err := s.Kube().CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "spec.unschedulable=false"})
	if err != nil {
		return err
	}
	for _, n := range s.Nodes() {
		if !slices.ContainsFunc(l.Items, func(x corev1.Node) bool { return x.Name == n }) {
			return fmt.Errorf("schedulable node %s not listed by spec.unschedulable=false", n)
		}
	}
	return nil
}

func vaByNode(ctx context.Context, s Side, _ string) error {
	_, err := s.Kube().StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + s.Nodes()[0]})
	if err := wantStatus(err, 400, "list volumeattachments by spec.nodeName"); err != nil {
		return err
	}
	if msg := err.Error(); !strings.Contains(msg, "field label not supported") && !strings.Contains(msg, "not a known field selector") {
		return fmt.Errorf("message %q: not the refusal internal/volume recognises", msg)
	}
	return nil
}

func vaByName(ctx context.Context, s Side, _ string) error {
	_, err := s.Kube().StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=none"})
	return err
}

func vaDetachFinalizer(ctx context.Context, s Side, _ string) error {
	vas := s.Kube().StorageV1().VolumeAttachments()
	pv := "pv-conformance"
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "conformance-va"},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "ebs.csi.aws.com", NodeName: s.Nodes()[0],
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}}}
	if _, err := vas.Create(ctx, va, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := eventually(ctx, s, 30*time.Second, func() error {
		got, err := vas.Get(ctx, va.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !got.Status.Attached || len(got.Finalizers) == 0 {
			return fmt.Errorf("attached %v, finalizers %v", got.Status.Attached, got.Finalizers)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := vas.Delete(ctx, va.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	got, err := vas.Get(ctx, va.Name, metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp == nil {
		return fmt.Errorf("right after its delete: %v (deletionTimestamp %v): want it there, being detached", err, got.GetDeletionTimestamp())
	}
	return eventually(ctx, s, 30*time.Second, func() error {
		_, err := vas.Get(ctx, va.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// Cluster: writes and their versions.

func createStamps(ctx context.Context, s Side, ns string) error {
	p, err := s.Kube().CoreV1().Pods(ns).Create(ctx, newPod(ns, "p", s.Nodes()[0], nil), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if p.UID == "" || p.CreationTimestamp.IsZero() || p.ResourceVersion == "" {
		return fmt.Errorf("created pod: uid %q creationTimestamp %v resourceVersion %q", p.UID, p.CreationTimestamp, p.ResourceVersion)
	}
	return nil
}

func updateOldRV(ctx context.Context, s Side, ns string) error {
	cms := s.Kube().CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Data: map[string]string{"v": "0"}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	old := cm.DeepCopy()
	cm.Data["v"] = "1"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return err
	}
	old.Data["v"] = "2" // read before the update
	_, err = cms.Update(ctx, old, metav1.UpdateOptions{})
	return wantStatus(err, 409, "update at an old resourceVersion")
}

func deleteUIDPrecondition(ctx context.Context, s Side, ns string) error {
	pods := s.Kube().CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, newPod(ns, "p", s.Nodes()[0], nil), metav1.CreateOptions{}); err != nil {
		return err
	}
	uid := types.UID("not-its-uid")
	err := pods.Delete(ctx, "p", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err := wantStatus(err, 409, "delete with a wrong UID"); err != nil {
		return err
	}
	p, err := pods.Get(ctx, "p", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil {
		return fmt.Errorf("after the refused delete: %v (deletionTimestamp %v)", err, p.GetDeletionTimestamp())
	}
	return nil
}

func deleteRVPrecondition(ctx context.Context, s Side, ns string) error {
	cms := s.Kube().CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Data: map[string]string{"a": "1"}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	old := cm.ResourceVersion
	cm.Data["a"] = "2"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return err
	}
	err = cms.Delete(ctx, "c", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &old}})
	return wantStatus(err, 409, "delete at an old resourceVersion")
}

func gracefulDeletion(ctx context.Context, s Side, ns string) error {
	p, err := runningPod(ctx, s, ns, "p", s.Nodes()[0], nil)
	if err != nil {
		return err
	}
	w, err := s.Kube().CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: p.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	if err := s.Kube().CoreV1().Pods(ns).Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		return err
	}
	marked := false
	timeout := time.After(45 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("watch ended before the pod was gone")
			}
			q, _ := ev.Object.(*corev1.Pod)
			switch {
			case q == nil:
				return fmt.Errorf("watch event %s: %v", ev.Type, ev.Object)
			case ev.Type == watch.Modified && q.DeletionTimestamp != nil && !marked:
				// the first write of the deletion (kubelet's own, grace 0,
				// may follow)
				if g := q.DeletionGracePeriodSeconds; g == nil || *g != 30 {
					return fmt.Errorf("first deletion write: deletionGracePeriodSeconds %v, want the pod's 30", ptrString(g))
				}
				marked = true
			case ev.Type == watch.Deleted:
				if !marked {
					return errors.New("deleted with no deletionTimestamp seen first")
				}
				return nil
			}
		case <-timeout:
			return fmt.Errorf("pod not gone 45 s after a graceful delete (marked: %v)", marked)
		}
	}
}

func forceDeletion(ctx context.Context, s Side, ns string) error {
	if _, err := runningPod(ctx, s, ns, "p", s.Nodes()[0], nil); err != nil {
		return err
	}
	zero := int64(0)
	if err := s.Kube().CoreV1().Pods(ns).Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return err
	}
	_, err := s.Kube().CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
	return wantStatus(err, 404, "get right after a delete with grace 0")
}

// Cluster: lists and watches.

func listPages(ctx context.Context, s Side, ns string) error {
	cms := s.Kube().CoreV1().ConfigMaps(ns)
	for _, n := range []string{"e", "c", "a", "d", "b"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	var got []string
	var remaining []int64
	cont := ""
	for range 5 {
		l, err := cms.List(ctx, metav1.ListOptions{Limit: 2, Continue: cont, LabelSelector: ""})
		if err != nil {
			return err
		}
		for _, c := range l.Items {
			if c.Name != "kube-root-ca.crt" { // the real namespace's own
				got = append(got, c.Name)
			}
		}
		if l.RemainingItemCount != nil {
			remaining = append(remaining, *l.RemainingItemCount)
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}
	if !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) {
		return fmt.Errorf("pages of 2 gave %v, want a..e in order", got)
	}
	if len(remaining) == 0 {
		return errors.New("no remainingItemCount on a page with a continue token")
	}
	return nil
}

func continueAfterCompaction(ctx context.Context, s Side, ns string) error {
	cms := s.Kube().CoreV1().ConfigMaps(ns)
	for _, n := range []string{"a", "b", "c"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	l, err := cms.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return err
	}
	if l.Continue == "" || len(l.Items) != 1 || l.Items[0].Name != "a" {
		return fmt.Errorf("first page %v, continue %q: want [a] and a token", l.Items, l.Continue)
	}
	// a write after the token, then etcd compacted past it
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "z"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := s.Compact(ctx); err != nil {
		return err
	}
	next, err := cms.List(ctx, metav1.ListOptions{Limit: 1, Continue: l.Continue})
	if err != nil {
		return fmt.Errorf("the next page right after compaction: %w", err)
	}
	if len(next.Items) != 1 || next.Items[0].Name != "b" {
		return fmt.Errorf("next page %v: want [b]", next.Items)
	}
	return nil
}

func watchFromRV(ctx context.Context, s Side, ns string) error {
	cms := s.Kube().CoreV1().ConfigMaps(ns)
	l, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range []string{"a", "b"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := cms.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		return err
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	want := []string{"ADDED a", "ADDED b", "DELETED a"}
	var got []string
	timeout := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch ended after %v", got)
			}
			if m, ok := ev.Object.(*corev1.ConfigMap); ok {
				got = append(got, string(ev.Type)+" "+m.Name)
			} else {
				got = append(got, string(ev.Type))
			}
		case <-timeout:
			return fmt.Errorf("watch from %s gave %v, want %v", l.ResourceVersion, got, want)
		}
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("watch from %s gave %v, want %v", l.ResourceVersion, got, want)
	}
	return nil
}

func watchOldRV(ctx context.Context, s Side, ns string) error {
	cms := s.Kube().CoreV1().ConfigMaps(ns)
	l, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	c, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	for i := range 20 { // the history the watch replays, longer than one write
		c.Data = map[string]string{"i": fmt.Sprint(i)}
		if c, err = cms.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	n := 0
	timeout := time.After(10 * time.Second)
	for n < 21 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch ended after %d events", n)
			}
			if ev.Type == watch.Error {
				return fmt.Errorf("ERROR event %v after %d events", ev.Object, n)
			}
			if m, ok := ev.Object.(*corev1.ConfigMap); ok && m.Name == "a" {
				n++
			}
		case <-timeout:
			return fmt.Errorf("%d of 21 writes replayed in 10 s", n)
		}
	}
	return nil
}

func watchFieldSelector(ctx context.Context, s Side, ns string) error {
	a, b := s.Nodes()[0], s.Nodes()[1]
	l, err := s.Kube().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	w, err := s.Kube().CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion, FieldSelector: "spec.nodeName=" + a})
	if err != nil {
		return err
	}
	defer w.Stop()
	for i, n := range []string{b, a} {
		if _, err := s.Kube().CoreV1().Pods(ns).Create(ctx, newPod(ns, fmt.Sprintf("p%d", i), n, nil), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	select {
	case ev := <-w.ResultChan():
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || p.Name != "p1" {
			return fmt.Errorf("first event %s %v: want p1, on %s", ev.Type, ev.Object, a)
		}
	case <-time.After(10 * time.Second):
		return errors.New("no event within 10 s")
	}
	return nil
}

// Cluster: the Eviction API.

func evictAllowed(ctx context.Context, s Side, ns string) error {
	p, err := runningPod(ctx, s, ns, "p", s.Nodes()[0], nil)
	if err != nil {
		return err
	}
	if err := evict(ctx, s, p, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}); err != nil {
		return fmt.Errorf("eviction: %w", err)
	}
	return eventually(ctx, s, 45*time.Second, func() error {
		_, err := s.Kube().CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod still there (%v)", err)
	})
}

func evictForbidden(ctx context.Context, s Side, ns string) error {
	lbl := map[string]string{"app": "one"}
	p, err := runningPod(ctx, s, ns, "p", s.Nodes()[0], lbl)
	if err != nil {
		return err
	}
	if _, err := s.Kube().PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb(ns, "one", lbl, ptrInt(1), nil), metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := pdbSettled(ctx, s, ns, "one", func(st policyv1.PodDisruptionBudgetStatus) error {
		if st.CurrentHealthy != 1 {
			return fmt.Errorf("currentHealthy %d", st.CurrentHealthy)
		}
		return nil
	}); err != nil {
		return err
	}
	err = evict(ctx, s, p, nil)
	if err := wantStatus(err, 429, "eviction its PDB forbids"); err != nil {
		return err
	}
	c, ok := apierrors.StatusCause(err, policyv1.DisruptionBudgetCause)
	if !ok || !strings.Contains(c.Message, "one") {
		return fmt.Errorf("429 without a DisruptionBudget cause naming the PDB: %v", err)
	}
	return nil
}

func evictUIDMismatch(ctx context.Context, s Side, ns string) error {
	p, err := runningPod(ctx, s, ns, "p", s.Nodes()[0], nil)
	if err != nil {
		return err
	}
	wrong := types.UID("not-its-uid")
	err = evict(ctx, s, p, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrong}})
	if err := wantStatus(err, 409, "eviction naming another UID"); err != nil {
		return err
	}
	q, err := s.Kube().CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
	if err != nil || q.DeletionTimestamp != nil {
		return fmt.Errorf("pod after the refused eviction: %v (deletionTimestamp %v)", err, q.GetDeletionTimestamp())
	}
	return nil
}

// evictTwoPDBs: the eviction API refuses a pod two PDBs select, whatever
// they allow (the drain names both and asks again: drain.multiplePDBs).
func evictTwoPDBs(ctx context.Context, s Side, ns string) error {
	lbl := map[string]string{"app": "twice"}
	p, err := runningPod(ctx, s, ns, "p", s.Nodes()[0], lbl)
	if err != nil {
		return err
	}
	for _, name := range []string{"a", "b"} {
		if _, err := s.Kube().PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb(ns, name, lbl, ptrInt(0), nil), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	err = evict(ctx, s, p, nil)
	if err := wantStatus(err, http.StatusInternalServerError, "eviction under two PDBs"); err != nil {
		return err
	}
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "more than one PodDisruptionBudget") {
		return fmt.Errorf("not the drain's two-PDB refusal (an InternalError naming more than one PodDisruptionBudget): %v", err)
	}
	return podKept(ctx, s, p)
}

// evictRefusedBy: admission refuses one pod's eviction with code (a
// policy's 422 or 403, an uncallable webhook's 500) as the drain tells
// them apart, the pod kept; once lifted the eviction is accepted.
func evictRefusedBy(code int32) func(context.Context, Side, string) error {
	return func(ctx context.Context, s Side, ns string) error {
		name := fmt.Sprintf("refused-%d", code)
		p, err := runningPod(ctx, s, ns, name, s.Nodes()[0], nil)
		if err != nil {
			return err
		}
		lift, err := s.RefuseEviction(ctx, ns, name, code)
		if err != nil {
			return err
		}
		defer func() { _ = lift(context.WithoutCancel(ctx)) }()
		dry := &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
		if err := eventually(ctx, s, 30*time.Second, func() error {
			return wantStatus(evict(ctx, s, p, dry), code, "dry-run eviction while refused")
		}); err != nil {
			return err
		}
		err = evict(ctx, s, p, nil)
		if err := wantStatus(err, code, "eviction while refused"); err != nil {
			return err
		}
		if read := refusalAsRead(err); read != code {
			return fmt.Errorf("the drain reads this %d as %d: %v", code, read, err)
		}
		if err := podKept(ctx, s, p); err != nil {
			return err
		}
		if err := lift(ctx); err != nil {
			return err
		}
		if err := eventually(ctx, s, 30*time.Second, func() error { return evict(ctx, s, p, nil) }); err != nil {
			return fmt.Errorf("eviction after the refusal was lifted: %w", err)
		}
		q, err := s.Kube().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && q.DeletionTimestamp == nil {
			return fmt.Errorf("pod %s not deleted after its eviction was accepted", name)
		}
		return nil
	}
}

// refusalAsRead is the code the drain reads an admission refusal as, by
// the predicates it uses (drain.refused, isNamespaceTerminating,
// cluster.Retriable's InternalError).
func refusalAsRead(err error) int32 {
	switch {
	case apierrors.IsInvalid(err):
		return http.StatusUnprocessableEntity
	case apierrors.IsForbidden(err) && !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return http.StatusForbidden
	case apierrors.IsInternalError(err):
		return http.StatusInternalServerError
	}
	return 0
}

// podKept: p is there, the same pod, not being deleted.
func podKept(ctx context.Context, s Side, p *corev1.Pod) error {
	q, err := s.Kube().CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("pod %s after the refused eviction: %w", p.Name, err)
	}
	if q.UID != p.UID || q.DeletionTimestamp != nil {
		return fmt.Errorf("pod %s changed by the refused eviction (uid %s, deletionTimestamp %v)", p.Name, q.UID, q.DeletionTimestamp)
	}
	return nil
}

// twoPodsOneDisruption runs two pods on two nodes under a PDB (minAvailable
// 1) and waits until its status allows one disruption; it returns the
// second pod and the PDB as settled.
func twoPodsOneDisruption(ctx context.Context, s Side, ns string) (*corev1.Pod, *policyv1.PodDisruptionBudget, error) {
	lbl := map[string]string{"app": "two"}
	var p *corev1.Pod
	for i := range 2 {
		var err error
		if p, err = runningPod(ctx, s, ns, fmt.Sprintf("p%d", i), s.Nodes()[i], lbl); err != nil {
			return nil, nil, err
		}
	}
	if _, err := s.Kube().PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb(ns, "two", lbl, ptrInt(1), nil), metav1.CreateOptions{}); err != nil {
		return nil, nil, err
	}
	b, err := pdbSettled(ctx, s, ns, "two", func(st policyv1.PodDisruptionBudgetStatus) error {
		if st.DisruptionsAllowed != 1 {
			return fmt.Errorf("disruptionsAllowed %d", st.DisruptionsAllowed)
		}
		return nil
	})
	return p, b, err
}

func evictDryRun(ctx context.Context, s Side, ns string) error {
	p, before, err := twoPodsOneDisruption(ctx, s, ns)
	if err != nil {
		return err
	}
	if err := evict(ctx, s, p, &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		return fmt.Errorf("dry-run eviction: %w", err)
	}
	s.Sleep(3 * time.Second)
	q, err := s.Kube().CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil || q.DeletionTimestamp != nil {
		return fmt.Errorf("pod after a dry run: %v (deletionTimestamp %v)", err, q.GetDeletionTimestamp())
	}
	after, err := s.Kube().PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "two", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if after.Status.DisruptionsAllowed != 1 || len(after.Status.DisruptedPods) > 0 || after.ResourceVersion != before.ResourceVersion {
		return fmt.Errorf("PDB after a dry run: allowed %d, disruptedPods %v, resourceVersion %s (was %s)",
			after.Status.DisruptionsAllowed, after.Status.DisruptedPods, after.ResourceVersion, before.ResourceVersion)
	}
	return nil
}

func evictDryRunForbidden(ctx context.Context, s Side, ns string) error {
	lbl := map[string]string{"app": "one"}
	p, err := runningPod(ctx, s, ns, "p", s.Nodes()[0], lbl)
	if err != nil {
		return err
	}
	if _, err := s.Kube().PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb(ns, "one", lbl, ptrInt(1), nil), metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := pdbSettled(ctx, s, ns, "one", func(st policyv1.PodDisruptionBudgetStatus) error {
		if st.CurrentHealthy != 1 {
			return fmt.Errorf("currentHealthy %d", st.CurrentHealthy)
		}
		return nil
	}); err != nil {
		return err
	}
	return wantStatus(evict(ctx, s, p, &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}), 429, "dry-run eviction its PDB forbids")
}

func evictPendingSkipsPDB(ctx context.Context, s Side, ns string) error {
	lbl := map[string]string{"app": "pend"}
	// unbound, with a node selector no node has: Pending for good
	p := newPod(ns, "p", "", lbl)
	p.Spec.NodeSelector = map[string]string{"conformance/none": "x"}
	p, err := s.Kube().CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if _, err := s.Kube().PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb(ns, "pend", lbl, ptrInt(1), nil), metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := pdbSettled(ctx, s, ns, "pend", func(st policyv1.PodDisruptionBudgetStatus) error {
		if st.DisruptionsAllowed != 0 {
			return fmt.Errorf("disruptionsAllowed %d", st.DisruptionsAllowed)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := evict(ctx, s, p, nil); err != nil {
		return fmt.Errorf("eviction of a pending pod: %w", err)
	}
	return eventually(ctx, s, 30*time.Second, func() error {
		_, err := s.Kube().CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pending pod still there (%v)", err)
	})
}

func evictDisruptedPods(ctx context.Context, s Side, ns string) error {
	p, b, err := twoPodsOneDisruption(ctx, s, ns)
	if err != nil {
		return err
	}
	w, err := s.Kube().PolicyV1().PodDisruptionBudgets(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: b.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	if err := evict(ctx, s, p, nil); err != nil {
		return fmt.Errorf("eviction: %w", err)
	}
	select {
	case ev := <-w.ResultChan():
		got, ok := ev.Object.(*policyv1.PodDisruptionBudget)
		if !ok {
			return fmt.Errorf("first PDB event %s %v", ev.Type, ev.Object)
		}
		if _, noted := got.Status.DisruptedPods[p.Name]; !noted || got.Status.DisruptionsAllowed != 0 {
			return fmt.Errorf("PDB's first write after the eviction: disruptedPods %v, allowed %d: want %s noted, 0 allowed",
				got.Status.DisruptedPods, got.Status.DisruptionsAllowed, p.Name)
		}
	case <-time.After(10 * time.Second):
		return errors.New("no PDB write within 10 s of the eviction")
	}
	return nil
}

func pdbStatus(ctx context.Context, s Side, ns string) error {
	lbl := map[string]string{"app": "three"}
	for i := range 3 {
		if _, err := runningPod(ctx, s, ns, fmt.Sprintf("p%d", i), s.Nodes()[i%2], lbl); err != nil {
			return err
		}
	}
	if _, err := s.Kube().PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb(ns, "three", lbl, ptrInt(2), nil), metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := pdbSettled(ctx, s, ns, "three", func(st policyv1.PodDisruptionBudgetStatus) error {
		if st.ExpectedPods != 3 || st.DesiredHealthy != 2 || st.CurrentHealthy != 3 || st.DisruptionsAllowed != 1 {
			return fmt.Errorf("status expected %d desired %d healthy %d allowed %d: want 3 2 3 1",
				st.ExpectedPods, st.DesiredHealthy, st.CurrentHealthy, st.DisruptionsAllowed)
		}
		return nil
	})
	return err
}

func pdbBarePodsMaxUnavailable(ctx context.Context, s Side, ns string) error {
	lbl := map[string]string{"app": "bare"}
	for i := range 2 {
		if _, err := runningPod(ctx, s, ns, fmt.Sprintf("p%d", i), s.Nodes()[i], lbl); err != nil {
			return err
		}
	}
	if _, err := s.Kube().PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb(ns, "bare", lbl, nil, ptrInt(1)), metav1.CreateOptions{}); err != nil {
		return err
	}
	// the controller finds no scale for pods no controller owns: it fails
	// safe, allowing nothing
	s.Sleep(5 * time.Second)
	b, err := s.Kube().PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "bare", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if b.Status.DisruptionsAllowed != 0 {
		return fmt.Errorf("maxUnavailable 1 over bare pods allows %d", b.Status.DisruptionsAllowed)
	}
	return nil
}

// Cluster: kubelets and the node lifecycle.

func leasesRenewed(ctx context.Context, s Side, _ string) error {
	n := s.Nodes()[0]
	get := func() (*coordinationv1.Lease, error) {
		return s.Kube().CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n, metav1.GetOptions{})
	}
	l, err := get()
	if err != nil {
		return err
	}
	if l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return fmt.Errorf("lease of %s: renewTime %v holder %v", n, l.Spec.RenewTime, l.Spec.HolderIdentity)
	}
	first := l.Spec.RenewTime.Time
	return eventually(ctx, s, 60*time.Second, func() error {
		l, err := get()
		if err != nil {
			return err
		}
		if !l.Spec.RenewTime.Time.After(first) {
			return fmt.Errorf("lease of %s not renewed since %s", n, first)
		}
		return nil
	})
}

func silentKubelet(ctx context.Context, s Side, ns string) error {
	n := s.Spare()
	if _, err := runningPod(ctx, s, ns, "p", n, nil); err != nil {
		return err
	}
	if err := s.StopKubelet(ctx, n); err != nil {
		return err
	}
	return eventually(ctx, s, 120*time.Second, func() error {
		return nodeIs(ctx, s, n, corev1.ConditionUnknown, corev1.TaintNodeUnreachable, ns, false)
	})
}

// nodeIs checks node n's Ready condition is ready, it is tainted
// taint:NoExecute, and pod p in ns is Ready or not (podReady).
func nodeIs(ctx context.Context, s Side, n string, ready corev1.ConditionStatus, taint, ns string, podReady bool) error {
	node, err := s.Kube().CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if cond := harness.NodeReadyStatus(node); cond != ready {
		return fmt.Errorf("node Ready=%s, want %s", cond, ready)
	}
	if !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == taint && t.Effect == corev1.TaintEffectNoExecute
	}) {
		return fmt.Errorf("taints %v: want %s:NoExecute", node.Spec.Taints, taint)
	}
	p, err := s.Kube().CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if harness.PodReady(p) != podReady {
		return fmt.Errorf("its pod Ready=%v, want %v", harness.PodReady(p), podReady)
	}
	return nil
}

// runtimeDown: a kubelet that runs and reports NotReady (its container
// runtime down) keeps its Lease fresh, so the node lifecycle controller
// leaves its condition False (it writes Unknown only for a silent kubelet)
// and taints it not-ready:NoExecute. It marks the pods not ready only on a
// transition it makes itself or on a pod's update: the pods stay Ready
// (healthy for their PDBs) until the taint's 300 s evict them.
func runtimeDown(ctx context.Context, s Side, ns string) error {
	n := s.Unwell()
	if _, err := runningPod(ctx, s, ns, "p", n, nil); err != nil {
		return err
	}
	if err := s.RuntimeDown(ctx, n); err != nil {
		return err
	}
	return eventually(ctx, s, 60*time.Second, func() error {
		return nodeIs(ctx, s, n, corev1.ConditionFalse, corev1.TaintNodeNotReady, ns, true)
	})
}

// outOfServiceRemovesPods: on a node whose kubelet is silent (NotReady),
// the out-of-service NoExecute taint has the taint eviction controller
// delete the pods that do not tolerate it, and the pod GC remove the
// terminating ones at once (no kubelet confirms): both the pod the taint
// evicts and one already terminating are gone within a minute or so.
func outOfServiceRemovesPods(ctx context.Context, s Side, ns string) error {
	n := s.Spare()
	pods := s.Kube().CoreV1().Pods(ns)
	for _, name := range []string{"evicted", "terminating"} {
		if _, err := pods.Create(ctx, newPod(ns, name, n, nil), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := s.StopKubelet(ctx, n); err != nil {
		return err
	}
	nodes := s.Kube().CoreV1().Nodes()
	if err := eventually(ctx, s, 120*time.Second, func() error {
		obj, err := nodes.Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if harness.NodeReadyStatus(obj) == corev1.ConditionTrue {
			return errors.New("node still Ready")
		}
		return nil
	}); err != nil {
		return err
	}
	if err := pods.Delete(ctx, "terminating", metav1.DeleteOptions{}); err != nil {
		return err
	}
	if p, err := pods.Get(ctx, "terminating", metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		return fmt.Errorf("a pod of a silent node deleted: %v (deletionTimestamp %v), want it there, terminating", err, p.GetDeletionTimestamp())
	}
	oos := corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}
	if err := retaint(ctx, s, n, func(ts []corev1.Taint) []corev1.Taint { return append(ts, oos) }); err != nil {
		return err
	}
	defer func() {
		_ = retaint(context.WithoutCancel(ctx), s, n, func(ts []corev1.Taint) []corev1.Taint {
			return slices.DeleteFunc(ts, func(t corev1.Taint) bool { return t.Key == oos.Key })
		})
	}()
	return eventually(ctx, s, 90*time.Second, func() error {
		var left []string
		for _, name := range []string{"evicted", "terminating"} {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return err
			default:
				left = append(left, fmt.Sprintf("%s (deletionTimestamp %v)", name, p.DeletionTimestamp))
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("still there: %s", strings.Join(left, ", "))
		}
		return nil
	})
}

// retaint changes node n's taints, read again on a conflict.
func retaint(ctx context.Context, s Side, n string, change func([]corev1.Taint) []corev1.Taint) error {
	return eventually(ctx, s, 10*time.Second, func() error {
		obj, err := s.Kube().CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return err
		}
		obj.Spec.Taints = change(obj.Spec.Taints)
		_, err = s.Kube().CoreV1().Nodes().Update(ctx, obj, metav1.UpdateOptions{})
		return err
	})
}

// AWS: Auto Scaling's lifecycle actions, EC2's states.

func apiCode(err error) (string, string) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode(), ae.ErrorMessage()
	}
	return "", fmt.Sprint(err)
}

func wantNoActive(err error, what string) error {
	if err == nil {
		return fmt.Errorf("%s accepted", what)
	}
	code, msg := apiCode(err)
	if code != "ValidationError" || !strings.Contains(msg, "No active Lifecycle Action found") {
		return fmt.Errorf("%s: %s %q, want ValidationError \"No active Lifecycle Action found …\"", what, code, msg)
	}
	return nil
}

func complete(ctx context.Context, s Side, group, id, token, result string) error {
	in := &autoscaling.CompleteLifecycleActionInput{AutoScalingGroupName: aws.String(group), LifecycleHookName: aws.String("node-drainer-terminate"),
		LifecycleActionResult: aws.String(result)}
	if id != "" {
		in.InstanceId = aws.String(id)
	}
	if token != "" {
		in.LifecycleActionToken = aws.String(token)
	}
	_, err := s.ASG().CompleteLifecycleAction(ctx, in)
	return err
}

func heartbeat(ctx context.Context, s Side, group, id, token string) error {
	_, err := s.ASG().RecordLifecycleActionHeartbeat(ctx, &autoscaling.RecordLifecycleActionHeartbeatInput{AutoScalingGroupName: aws.String(group),
		LifecycleHookName: aws.String("node-drainer-terminate"), InstanceId: aws.String(id), LifecycleActionToken: aws.String(token)})
	return err
}

func lifecycleState(ctx context.Context, s Side, group, id string) (string, error) {
	out, err := s.ASG().DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{group}})
	if err != nil {
		return "", err
	}
	for _, g := range out.AutoScalingGroups {
		for _, i := range g.Instances {
			if aws.ToString(i.InstanceId) == id {
				return string(i.LifecycleState), nil
			}
		}
	}
	return "", nil // not in the group any more
}

func completeEndsWait(ctx context.Context, s Side, _ string) error {
	group, id, token, err := s.Terminating(ctx)
	if err != nil {
		return err
	}
	if st, err := lifecycleState(ctx, s, group, id); err != nil || st != "Terminating:Wait" {
		return fmt.Errorf("before completion: %q, %v; want Terminating:Wait", st, err)
	}
	if err := complete(ctx, s, group, id, token, "CONTINUE"); err != nil {
		return err
	}
	return eventually(ctx, s, 10*time.Second, func() error {
		st, err := lifecycleState(ctx, s, group, id)
		if err != nil {
			return err
		}
		if st == "Terminating:Wait" {
			return errors.New("still Terminating:Wait after completion")
		}
		return nil
	})
}

func completeTwice(ctx context.Context, s Side, _ string) error {
	group, id, token, err := s.Terminating(ctx)
	if err != nil {
		return err
	}
	if err := complete(ctx, s, group, id, token, "CONTINUE"); err != nil {
		return err
	}
	return wantNoActive(complete(ctx, s, group, id, token, "CONTINUE"), "a second completion")
}

func completeByInstance(ctx context.Context, s Side, _ string) error {
	group, id, _, err := s.Terminating(ctx)
	if err != nil {
		return err
	}
	return complete(ctx, s, group, id, "", "ABANDON")
}

// OtherHook is the second terminate hook of TerminatingTwo, another tool's.
const OtherHook = "app-flush"

// abandonEndsOthers: AWS's user guide (lifecycle hooks, default result):
// for a terminating instance "ABANDON stops any remaining actions, such as
// other lifecycle hooks, and CONTINUE lets any other lifecycle hooks
// complete". A completion of the other hook's action after an ABANDON is
// refused as for any action no longer active.
func abandonEndsOthers(ctx context.Context, s Side, _ string) error {
	group, id, token, other, err := s.TerminatingTwo(ctx)
	if err != nil {
		return err
	}
	if err := complete(ctx, s, group, id, token, "ABANDON"); err != nil {
		return err
	}
	return wantNoActive(completeHook(ctx, s, group, OtherHook, id, other, "CONTINUE"), "the other hook's completion after an ABANDON")
}

// continueLeavesOthers: the same with CONTINUE, the other's action waits
// on, and its completion is accepted.
func continueLeavesOthers(ctx context.Context, s Side, _ string) error {
	group, id, token, other, err := s.TerminatingTwo(ctx)
	if err != nil {
		return err
	}
	if err := complete(ctx, s, group, id, token, "CONTINUE"); err != nil {
		return err
	}
	return completeHook(ctx, s, group, OtherHook, id, other, "CONTINUE")
}

// terminateHook reads group's terminate hook, and gives what puts it back
// as it was (the sim side's group serves every behaviour).
func terminateHook(ctx context.Context, s Side, group string) (restore func() error, err error) {
	out, err := s.ASG().DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(group),
		LifecycleHookNames: []string{"node-drainer-terminate"}})
	if err != nil {
		return nil, err
	}
	if len(out.LifecycleHooks) != 1 {
		return nil, fmt.Errorf("group %s has %d hooks named node-drainer-terminate", group, len(out.LifecycleHooks))
	}
	h := out.LifecycleHooks[0]
	return func() error {
		_, err := s.ASG().PutLifecycleHook(context.WithoutCancel(ctx), &autoscaling.PutLifecycleHookInput{AutoScalingGroupName: aws.String(group),
			LifecycleHookName: h.LifecycleHookName, LifecycleTransition: h.LifecycleTransition, HeartbeatTimeout: h.HeartbeatTimeout,
			DefaultResult: h.DefaultResult, NotificationMetadata: h.NotificationMetadata})
		return err
	}, nil
}

// deleteEndsAction: "If there are any outstanding lifecycle actions, they
// are completed first (ABANDON for launching instances, CONTINUE for
// terminating instances)" (DeleteLifecycleHook, API reference).
func deleteEndsAction(ctx context.Context, s Side, _ string) (err error) {
	group, id, token, err := s.Terminating(ctx)
	if err != nil {
		return err
	}
	restore, err := terminateHook(ctx, s, group)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, restore()) }()
	if _, err := s.ASG().DeleteLifecycleHook(ctx, &autoscaling.DeleteLifecycleHookInput{AutoScalingGroupName: aws.String(group),
		LifecycleHookName: aws.String("node-drainer-terminate")}); err != nil {
		return err
	}
	// refused for the hook, which is no longer there: "No Lifecycle Hook
	// found with name …" (moto; AWS's answer for a hook that is not there),
	// which lifecycle.IsNotActive reads as the action ended
	want := "No Lifecycle Hook found with name node-drainer-terminate in group " + group
	if code, msg := apiCode(complete(ctx, s, group, id, token, "CONTINUE")); code != "ValidationError" || !strings.Contains(msg, want) {
		return fmt.Errorf("the completion after its hook's deletion: %s %q, want ValidationError %q", code, msg, want)
	}
	if code, msg := apiCode(heartbeat(ctx, s, group, id, token)); code != "ValidationError" || !strings.Contains(msg, want) {
		return fmt.Errorf("the heartbeat after its hook's deletion: %s %q, want ValidationError %q", code, msg, want)
	}
	for range 20 {
		if st, err := lifecycleState(ctx, s, group, id); err != nil || st != "Terminating:Wait" {
			return err
		}
		s.Sleep(250 * time.Millisecond)
	}
	return errors.New("the instance still in Terminating:Wait 5 s after its only hook's deletion")
}

// timeoutEndsAction: an action not heartbeated ends at its hook's
// HeartbeatTimeout with the hook's DefaultResult (the user guide's
// lifecycle hooks); the timeout is put to 30 s (the least) while the
// action waits, and applies to it.
func timeoutEndsAction(ctx context.Context, s Side, _ string) (err error) {
	group, id, token, err := s.Terminating(ctx)
	if err != nil {
		return err
	}
	restore, err := terminateHook(ctx, s, group)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, restore()) }()
	if _, err := s.ASG().PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{AutoScalingGroupName: aws.String(group),
		LifecycleHookName: aws.String("node-drainer-terminate"), LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"),
		HeartbeatTimeout: aws.Int32(30), DefaultResult: aws.String("CONTINUE")}); err != nil {
		return err
	}
	if err := heartbeat(ctx, s, group, id, token); err != nil { // the 30 s from now
		return err
	}
	s.Sleep(33 * time.Second)
	return wantNoActive(complete(ctx, s, group, id, token, "CONTINUE"), "the completion past its hook's HeartbeatTimeout")
}

func completeHook(ctx context.Context, s Side, group, hook, id, token, result string) error {
	_, err := s.ASG().CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{AutoScalingGroupName: aws.String(group),
		LifecycleHookName: aws.String(hook), InstanceId: aws.String(id), LifecycleActionToken: aws.String(token), LifecycleActionResult: aws.String(result)})
	return err
}

func completeWrongToken(ctx context.Context, s Side, _ string) error {
	group, id, token, err := s.Terminating(ctx)
	if err != nil {
		return err
	}
	if err := wantNoActive(complete(ctx, s, group, id, "00000000-not-"+token, "CONTINUE"), "completion with another token"); err != nil {
		return err
	}
	return complete(ctx, s, group, id, token, "CONTINUE") // the action still waits for its own
}

func heartbeatAccepted(ctx context.Context, s Side, _ string) error {
	group, id, token, err := s.Terminating(ctx)
	if err != nil {
		return err
	}
	if err := heartbeat(ctx, s, group, id, token); err != nil {
		return err
	}
	st, err := lifecycleState(ctx, s, group, id)
	if err != nil || st != "Terminating:Wait" {
		return fmt.Errorf("after a heartbeat: %q, %v; want Terminating:Wait", st, err)
	}
	return nil
}

func heartbeatAfterComplete(ctx context.Context, s Side, _ string) error {
	group, id, token, err := s.Terminating(ctx)
	if err != nil {
		return err
	}
	if err := complete(ctx, s, group, id, token, "CONTINUE"); err != nil {
		return err
	}
	return wantNoActive(heartbeat(ctx, s, group, id, token), "a heartbeat after completion")
}

// ec2Stopped: an instance its user stopped (hibernate: with hibernation)
// reads stopped, with reason as its StateReason code.
func ec2Stopped(hibernate bool, reason string) func(context.Context, Side, string) error {
	return func(ctx context.Context, s Side, _ string) error {
		id, err := s.Stopped(ctx, hibernate)
		if err != nil {
			return err
		}
		return eventually(ctx, s, 60*time.Second, func() error {
			out, err := s.EC2().DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
			if err != nil {
				return err
			}
			if len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
				return fmt.Errorf("describe %s: %d reservations", id, len(out.Reservations))
			}
			i := out.Reservations[0].Instances[0]
			state := ""
			if i.State != nil {
				state = string(i.State.Name)
			}
			if state != "stopped" {
				return fmt.Errorf("state %q", state)
			}
			if i.StateReason == nil || aws.ToString(i.StateReason.Code) != reason {
				return fmt.Errorf("stateReason %v: want %s", i.StateReason, reason)
			}
			return nil
		})
	}
}

func ptrString(p *int64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}
