package sim

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/node-drainer/node-drainer/internal/node"
)

const ns = "shop"

var (
	gvrPods   = corev1.SchemeGroupVersion.WithResource("pods")
	gvrNodes  = corev1.SchemeGroupVersion.WithResource("nodes")
	gvrPDBs   = policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets")
	gvrVAs    = storagev1.SchemeGroupVersion.WithResource("volumeattachments")
	gvrLeases = coordinationv1.SchemeGroupVersion.WithResource("leases")
)

// simNode is a node as the world knows it (not as the apiserver says).
type simNode struct {
	idx     int
	name    string
	id      string // its instance
	group   string
	skipped bool // a skipped owner's (eks.amazonaws.com/nodegroup)
	alive   bool // a kubelet runs on it
	unready bool // its kubelet runs but reports NotReady (a container runtime down): its Lease stays fresh
	// unreadyAt: since when it reports NotReady
	unreadyAt time.Duration
	diedAt    time.Duration
	bornAt    time.Duration // when its kubelet last started
	uid       ktypes.UID
}

// kube is the simulated apiserver (client-go's tracker behind reactors that
// serve what the fake does not: field selectors, evictions with PDBs,
// graceful deletion) and the kubelets and controllers around it.
type kube struct {
	w       *World
	tracker *versioned // client-go's tracker, with the apiserver's resourceVersions

	mu    sync.Mutex
	nodes map[string]*simNode // by name
	names int                 // replacement pods made
	uids  int                 // UIDs given to objects created through the API
	// contended are the pods whose last eviction was answered 409 by
	// their PDB's contention, and when (I12)
	contended map[ktypes.UID]time.Duration
	// allowedFrom is, for a contended pod, since when its PDB has allowed a
	// disruption without a break; allowedLong, that it did for a minute
	// at least (the drain was to ask again then)
	allowedFrom map[ktypes.UID]time.Duration
	allowedLong map[ktypes.UID]bool
	pdbMin      map[string]int32
	bound       map[string]int           // pods bound to each node so far (I11: a node empty since)
	boundAt     map[string]time.Duration // when each pod (namespace/name) was last bound (I1)
	// gen counts the changes the controllers react to (pods, nodes, PDBs,
	// attachments; not Lease renewals): a controller pass with nothing new
	// to see is skipped, which is most of them
	gen, seen uint64
}

// add is the world making an object.
func (k *kube) add(obj runtime.Object) { must(k.tracker.Add(obj)) }

// update and delete change an object as a controller does.
func (k *kube) update(gvr schema.GroupVersionResource, obj runtime.Object, ns string) error {
	defer k.bump()
	return k.tracker.Update(gvr, obj, ns)
}

func (k *kube) delete(gvr schema.GroupVersionResource, ns, name string) error {
	defer k.bump()
	return k.tracker.Delete(gvr, ns, name)
}

// bump records a change the controllers must see.
func (k *kube) bump() {
	k.mu.Lock()
	k.gen++
	k.mu.Unlock()
}

func newKube(w *World) *kube {
	return &kube{
		w:           w,
		tracker:     newVersioned(),
		nodes:       map[string]*simNode{},
		pdbMin:      map[string]int32{},
		contended:   map[ktypes.UID]time.Duration{},
		allowedFrom: map[ktypes.UID]time.Duration{},
		allowedLong: map[ktypes.UID]bool{},
		bound:       map[string]int{},
		boundAt:     map[string]time.Duration{},
	}
}

func nodeName(idx int) string   { return fmt.Sprintf("ip-10-0-0-%d.ec2.internal", 10+idx) }
func instanceID(idx int) string { return fmt.Sprintf("i-%017d", 10+idx) }

// node is the world's node named name (nil: none).
func (k *kube) node(name string) *simNode {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.nodes[name]
}

func (k *kube) nodeByID(id string) *simNode {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, n := range k.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// join registers a node whose kubelet runs: the Node, its Lease.
func (k *kube) join(idx int, group string, skipped bool) *simNode {
	n := &simNode{idx: idx, name: nodeName(idx), id: instanceID(idx), group: group, skipped: skipped, alive: true, bornAt: k.w.now(),
		uid: ktypes.UID(fmt.Sprintf("node-%d-%d", idx, int(k.w.now().Seconds())))}
	k.mu.Lock()
	k.nodes[n.name] = n
	k.mu.Unlock()
	lbl := map[string]string{corev1.LabelHostname: n.name}
	if skipped && k.w.Plan.SkippedOwner == "karpenter" {
		lbl[node.LabelKarpenterNodePool] = "default"
	} else if skipped {
		lbl[node.LabelEKSNodeGroup] = group
	}
	k.add((&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.name, UID: n.uid, Labels: lbl, CreationTimestamp: metav1.Now()},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + n.id},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}},
	}))
	now := metav1.NowMicro()
	secs := int32(40)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: n.name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &n.name, LeaseDurationSeconds: &secs, RenewTime: &now}}
	if err := k.tracker.Add(l); err != nil {
		must(k.tracker.Update(gvrLeases, l, l.Namespace))
	}
	k.add((&corev1.Pod{ // its DaemonSet's pod
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "ds-" + n.name, UID: ktypes.UID("ds-" + string(n.uid)),
			Labels: map[string]string{"app": "ds"}, OwnerReferences: []metav1.OwnerReference{owner("DaemonSet", "ds")}},
		Spec:   corev1.PodSpec{NodeName: n.name},
		Status: running(),
	}))
	k.w.tracef("world: node %s (%s) joined", n.name, n.id)
	k.bump()
	return n
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func owner(kind, name string) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: ktypes.UID("uid-" + name), Controller: &t}
}

func running() corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
}

// seed places the workloads: web replicas and the stateful db pods spread
// over the node group's nodes, one PDB each.
func (k *kube) seed(p Plan) {
	// kubectl's drain looks the DaemonSet of a pod up before it skips the pod
	k.add(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "ds", UID: "uid-ds"}})
	one := intstr.FromInt32(1)
	webMin := intstr.FromInt32(int32(p.Web - 1))
	k.pdbMin["web"] = int32(p.Web - 1)
	k.add((&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Generation: 1},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &webMin, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}))
	for i := range p.Web {
		k.addPod(fmt.Sprintf("web-%d", i), "web", nodeName(i%p.Nodes), "ReplicaSet", "")
	}
	for i := range p.DBs {
		app := fmt.Sprintf("db-%d", i)
		k.pdbMin[app] = 1
		k.add((&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app, Generation: 1},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}))
		k.add((&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-" + app},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-" + app, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}))
		on := nodeName((i + 1) % p.Nodes)
		k.addPod(app, app, on, "StatefulSet", "data-"+app)
		k.attach(app, on)
	}
	if p.Unmanaged {
		k.addPod("solo", "solo", nodeName(0), "", "")
	}
	if p.SkippedGroup {
		k.addPod("managed-app", "managed-app", nodeName(p.Nodes), "ReplicaSet", "")
	}
	k.updatePDBs()
}

// addPod makes a pod bound to on (empty: pending).
func (k *kube) addPod(name, app, on, ownerKind, claim string) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app},
			UID: ktypes.UID(fmt.Sprintf("%s-%d", name, k.w.now().Microseconds())), CreationTimestamp: metav1.Now()},
		Spec: corev1.PodSpec{NodeName: on},
	}
	if ownerKind != "" {
		p.OwnerReferences = []metav1.OwnerReference{owner(ownerKind, app)}
	}
	k.annotate(p, app)
	if claim != "" {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	}
	if n := k.node(on); n != nil && n.alive && claim == "" {
		p.Status = running()
	} else {
		p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	}
	k.add(p)
	k.bound1(on, p)
	k.bump()
}

// bound1 counts pod p bound to node on, and notes when.
func (k *kube) bound1(on string, p *corev1.Pod) {
	if on == "" {
		return
	}
	k.mu.Lock()
	k.bound[on]++
	k.boundAt[p.Namespace+"/"+p.Name] = k.w.now()
	k.mu.Unlock()
}

// boundWhen is when pod namespace/name was last bound to a node.
func (k *kube) boundWhen(key string) time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.boundAt[key]
}

// boundTo is how many pods were bound to node on so far.
func (k *kube) boundTo(on string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.bound[on]
}

// drained lists the pods on node on that a drain must see go: not a
// DaemonSet's, not a mirror pod, not ended.
func (k *kube) drained(on string) []string {
	var left []string
	for _, p := range k.pods() {
		if p.Spec.NodeName != on || daemon(p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		left = append(left, p.Namespace+"/"+p.Name)
	}
	return left
}

func (k *kube) attach(app, on string) {
	pv := "pv-" + app
	defer k.bump()
	k.add((&storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "va-" + app + "-" + on, UID: ktypes.UID(fmt.Sprintf("va-%s-%s-%d", app, on, k.w.now().Microseconds())),
			Finalizers: []string{attacherFinalizer}},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "ebs.csi.aws.com", NodeName: on,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true},
	}))
}

// attacherFinalizer is the CSI external-attacher's finalizer on the
// attachments it attached: a deleted attachment stays, deletionTimestamp
// set, until the attacher has detached the volume and dropped it.
const attacherFinalizer = "external-attacher/ebs-csi-aws-com"

// detachTakes is how long the attacher takes to detach a deleted
// attachment's volume.
const detachTakes = 800 * time.Millisecond

// deleteVA deletes an attachment as the apiserver does one with a
// finalizer: deletionTimestamp now, gone once the attacher detached it.
func (k *kube) deleteVA(name string) error {
	obj, err := k.tracker.Get(gvrVAs, "", name)
	if err != nil {
		return err
	}
	va := obj.(*storagev1.VolumeAttachment)
	if len(va.Finalizers) == 0 {
		return k.delete(gvrVAs, "", name)
	}
	if va.DeletionTimestamp != nil {
		return nil // being detached
	}
	now := metav1.Now()
	va.DeletionTimestamp = &now
	if err := k.update(gvrVAs, va, ""); err != nil {
		return err
	}
	uid := va.UID
	k.w.after(detachTakes+k.w.jitter("detach/"+name), func() {
		obj, err := k.tracker.Get(gvrVAs, "", name)
		if err != nil || obj.(*storagev1.VolumeAttachment).UID != uid {
			return
		}
		if k.delete(gvrVAs, "", name) == nil {
			k.w.tracef("world: attacher detached %s, attachment gone", name)
		}
	})
	return nil
}

// reconcileAttacher is the CSI external-attacher for the attachments made
// through the API: attached, its finalizer added.
func (k *kube) reconcileAttacher() {
	for _, va := range k.vas() {
		if va.DeletionTimestamp != nil || va.Status.Attached {
			continue
		}
		va.Status.Attached = true
		if !slices.Contains(va.Finalizers, attacherFinalizer) {
			va.Finalizers = append(va.Finalizers, attacherFinalizer)
		}
		_ = k.update(gvrVAs, &va, "")
	}
}

// Reading the world's own state (no faults, no invariant: the truth).

func (k *kube) pods() []corev1.Pod {
	obj, err := k.tracker.List(gvrPods, corev1.SchemeGroupVersion.WithKind("Pod"), "")
	must(err)
	return obj.(*corev1.PodList).Items
}

func (k *kube) getNode(name string) *corev1.Node {
	obj, err := k.tracker.Get(gvrNodes, "", name)
	if err != nil {
		return nil
	}
	return obj.(*corev1.Node)
}

func (k *kube) vas() []storagev1.VolumeAttachment {
	obj, err := k.tracker.List(gvrVAs, storagev1.SchemeGroupVersion.WithKind("VolumeAttachment"), "")
	must(err)
	return obj.(*storagev1.VolumeAttachmentList).Items
}

func (k *kube) pdbs() []policyv1.PodDisruptionBudget {
	obj, err := k.tracker.List(gvrPDBs, policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), "")
	must(err)
	return obj.(*policyv1.PodDisruptionBudgetList).Items
}

func healthy(p corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func daemon(p corev1.Pod) bool {
	return len(p.OwnerReferences) > 0 && p.OwnerReferences[0].Kind == "DaemonSet"
}

// The apiserver, as each invocation's clientset sees it.

// clientset is a fake clientset on the world's tracker whose every request
// goes through the gate of invocation inv.
func (k *kube) clientset(inv *invocation) kubernetes.Interface {
	cs := fake.NewClientset()
	cs.ReactionChain = nil
	cs.WatchReactionChain = nil
	objects := k8stesting.ObjectReaction(k.tracker)
	cs.AddReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return k.serve(inv, a, objects)
	})
	cs.AddWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		return k.watch(inv, a)
	})
	return cs
}

type timeoutError struct{}

func (timeoutError) Error() string {
	return "net/http: request canceled (Client.Timeout exceeded while awaiting headers)"
}
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func describeAction(a k8stesting.Action) string {
	s := a.GetVerb() + " " + a.GetResource().Resource
	if a.GetSubresource() != "" {
		s += "/" + a.GetSubresource()
	}
	name := ""
	// GetAction's one method (GetName) is delete's and patch's too, and
	// CreateAction's (GetObject) update's: two cases say every name
	switch x := a.(type) {
	case k8stesting.GetAction:
		name = x.GetName()
	case k8stesting.CreateAction:
		if m, err := meta.Accessor(x.GetObject()); err == nil {
			name = m.GetName()
		}
	}
	if a.GetNamespace() != "" {
		name = a.GetNamespace() + "/" + name
	}
	return strings.TrimSuffix(s+" "+name, " ")
}

func isWrite(verb string) bool {
	return verb == "create" || verb == "update" || verb == "patch" || verb == "delete" || verb == "delete-collection"
}

// fault is the failure the world answers a request with, if any.
func (k *kube) fault(inv *invocation, a k8stesting.Action) error {
	what := describeAction(a)
	if err := k.w.lambda.gate(inv, "kube "+what); err != nil {
		return err
	}
	now := k.w.now()
	gr := a.GetResource().GroupResource()
	for _, o := range k.w.Plan.Outages {
		if now >= o.From && now < o.To {
			if k.w.roll(inv.id+"/outage/"+what) < 0.5 {
				return &url.Error{Op: "Get", URL: "https://apiserver/" + gr.Resource, Err: timeoutError{}}
			}
			return apierrors.NewServiceUnavailable("apiserver is shutting down")
		}
	}
	if a.GetSubresource() == "eviction" {
		name := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name
		for _, r := range k.w.Plan.Refusals {
			if now >= r.From && now < r.To && strings.HasPrefix(name, r.Prefix) {
				msg := "admission webhook \"deny-evictions.example.com\" denied the request: evictions of " + r.Prefix + "* are frozen"
				switch r.Code {
				case 422:
					return apierrors.NewInvalid(schema.GroupKind{Group: "policy", Kind: "Eviction"}, name, nil)
				case 403:
					return apierrors.NewForbidden(gr, name, errors.New(msg))
				default:
					return apierrors.NewInternalError(errors.New(msg))
				}
			}
		}
	}
	if a.GetVerb() == "create" && gr.Resource == "events" {
		return nil // Events are not worth a fault: their failures are only logged
	}
	if x := k.w.roll(inv.id + "/fault/" + what); x < k.w.Plan.APIFault {
		switch kind := x / k.w.Plan.APIFault; {
		case kind < 0.35:
			return apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		case kind < 0.55:
			return apierrors.NewTooManyRequests("the server has received too many requests", 1)
		case kind < 0.75:
			return &url.Error{Op: "Get", URL: "https://apiserver/" + gr.Resource, Err: timeoutError{}}
		default:
			return apierrors.NewServiceUnavailable("the server is currently unable to handle the request")
		}
	}
	return nil
}

// serve answers one request of invocation inv.
func (k *kube) serve(inv *invocation, a k8stesting.Action, objects k8stesting.ReactionFunc) (bool, runtime.Object, error) {
	if err := k.fault(inv, a); err != nil {
		if isWrite(a.GetVerb()) {
			k.w.tracef("%s: %s -> %v", inv.id, describeAction(a), err)
		}
		return true, nil, err
	}
	switch {
	case a.GetVerb() == "create" && a.GetSubresource() == "eviction":
		return k.evict(inv, a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction))
	case a.GetVerb() == "delete" && a.GetResource().Resource == "pods":
		d := a.(k8stesting.DeleteActionImpl)
		return k.deletePod(inv, a.GetNamespace(), d.Name, d.DeleteOptions)
	case a.GetVerb() == "list":
		return k.list(inv, a.(k8stesting.ListActionImpl))
	case a.GetVerb() == "create":
		obj := a.(k8stesting.CreateAction).GetObject()
		if m, err := meta.Accessor(obj); err == nil {
			k.mu.Lock()
			if m.GetName() == "" && m.GetGenerateName() != "" {
				k.names++
				m.SetName(fmt.Sprintf("%s%05d", m.GetGenerateName(), k.names))
			}
			// what the apiserver gives every object it creates: a UID, its
			// creation time, and (a PDB) generation 1
			if m.GetUID() == "" {
				k.uids++
				m.SetUID(ktypes.UID(fmt.Sprintf("uid-%s-%d", m.GetName(), k.uids)))
			}
			k.mu.Unlock()
			if ct := m.GetCreationTimestamp(); ct.IsZero() {
				m.SetCreationTimestamp(metav1.Now())
			}
			if _, pdb := obj.(*policyv1.PodDisruptionBudget); pdb && m.GetGeneration() == 0 {
				m.SetGeneration(1)
			}
			if p, ok := obj.(*corev1.Pod); ok && p.Status.Phase == "" {
				p.Status.Phase = corev1.PodPending
			}
		}
	case a.GetVerb() == "update":
		// optimistic concurrency: an update names the version it read
		obj := a.(k8stesting.UpdateAction).GetObject()
		m, err := meta.Accessor(obj)
		if err != nil {
			return true, nil, err
		}
		cur, err := k.tracker.Get(a.GetResource(), a.GetNamespace(), m.GetName())
		if err != nil {
			return true, nil, err
		}
		if c, _ := meta.Accessor(cur); m.GetResourceVersion() != "" && m.GetResourceVersion() != c.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), m.GetName(),
				errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		if n, ok := obj.(*corev1.Node); ok && a.GetSubresource() == "" {
			n.Status = cur.(*corev1.Node).Status // an update keeps the status (the nodes/status subresource's)
		}
	case a.GetVerb() == "delete":
		if err := k.preconditions(a); err != nil {
			return true, nil, err
		}
		if a.GetResource().Resource == "volumeattachments" {
			return k.deleteAttachment(inv, a)
		}
	}
	if !isWrite(a.GetVerb()) {
		return objects(a)
	}
	before := k.before(a)
	if err := k.w.inv.beforeWrite(inv, a, before); err != nil {
		return true, nil, err
	}
	handled, obj, err := objects(a)
	if r := a.GetResource().Resource; r != "events" && r != "leases" {
		k.bump()
	}
	if err == nil && a.GetResource().Resource != "events" {
		k.w.inv.touch(inv)
		k.w.tracef("%s: %s", inv.id, describeAction(a))
		k.w.inv.afterWrite(inv, a, before)
		if k.w.roll(inv.id+"/lost-answer/"+describeAction(a)) < k.w.Plan.APIFault/4 {
			k.w.tracef("%s: %s done, but its answer lost (timeout)", inv.id, describeAction(a))
			return true, nil, &url.Error{Op: "Put", URL: "https://apiserver/" + a.GetResource().Resource, Err: timeoutError{}}
		}
	}
	return handled, obj, err
}

// deleteAttachment is a DELETE of a VolumeAttachment through the API, with
// the invariants' checks of any write: it stays until the attacher
// detached it (deleteVA).
func (k *kube) deleteAttachment(inv *invocation, a k8stesting.Action) (bool, runtime.Object, error) {
	before := k.before(a)
	if err := k.w.inv.beforeWrite(inv, a, before); err != nil {
		return true, nil, err
	}
	if err := k.deleteVA(a.(k8stesting.DeleteActionImpl).Name); err != nil {
		return true, nil, err
	}
	k.w.inv.touch(inv)
	k.w.tracef("%s: %s", inv.id, describeAction(a))
	k.w.inv.afterWrite(inv, a, before)
	return true, nil, nil
}

// preconditions are a delete's: the UID and resourceVersion it names.
func (k *kube) preconditions(a k8stesting.Action) error {
	d, ok := a.(k8stesting.DeleteActionImpl)
	if !ok || d.DeleteOptions.Preconditions == nil {
		return nil
	}
	cur, err := k.tracker.Get(a.GetResource(), a.GetNamespace(), d.Name)
	if err != nil {
		return err
	}
	m, _ := meta.Accessor(cur)
	pre := d.DeleteOptions.Preconditions
	if (pre.UID != nil && *pre.UID != m.GetUID()) || (pre.ResourceVersion != nil && *pre.ResourceVersion != m.GetResourceVersion()) {
		return apierrors.NewConflict(a.GetResource().GroupResource(), d.Name, errors.New("precondition failed: UID or resourceVersion"))
	}
	return nil
}

// before is the object a write changes, as it is (nil: none).
func (k *kube) before(a k8stesting.Action) runtime.Object {
	var name string
	switch x := a.(type) {
	case k8stesting.DeleteAction:
		name = x.GetName()
	case k8stesting.UpdateAction:
		m, err := meta.Accessor(x.GetObject())
		if err != nil {
			return nil
		}
		name = m.GetName()
	case k8stesting.PatchAction:
		name = x.GetName()
	default:
		return nil
	}
	obj, err := k.tracker.Get(a.GetResource(), a.GetNamespace(), name)
	if err != nil {
		return nil
	}
	return obj
}

// list serves a list: the apiserver filters by field selector (the tracker
// does not); a list served from the watch cache (resourceVersion "0") may
// miss an object the cache has not caught up with.
func (k *kube) list(inv *invocation, a k8stesting.ListActionImpl) (bool, runtime.Object, error) {
	obj, err := k.tracker.List(a.GetResource(), a.GetKind(), a.GetNamespace())
	if err != nil {
		return true, nil, err
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return true, nil, err
	}
	sel := a.ListRestrictions.Fields
	if err := servedFields(a.GetResource().Resource, sel); err != nil {
		return true, nil, err
	}
	kept := items[:0]
	for _, it := range items {
		if sel != nil && !sel.Matches(fieldSet(it)) {
			continue
		}
		kept = append(kept, it)
	}
	// a list served from the watch cache (resourceVersion "0") may be
	// seconds behind: what was made in the last 5 s may be missing. Its
	// resourceVersion is then an old one, so a watch from it replays
	// what the cache had not seen yet, as the apiserver's does.
	if a.ListOptions.ResourceVersion == "0" && k.w.roll(inv.id+"/stale/"+a.GetResource().Resource) < k.w.Plan.StaleList {
		now := time.Now()
		fresh := kept[:0]
		for _, it := range kept {
			if m, err := meta.Accessor(it); err == nil && now.Sub(m.GetCreationTimestamp().Time) < 5*time.Second {
				k.w.tracef("%s: list %s served from a cache behind: %s missing", inv.id, a.GetResource().Resource, m.GetName())
				continue
			}
			fresh = append(fresh, it)
		}
		kept = fresh
		if la, err := meta.ListAccessor(obj); err == nil {
			la.SetResourceVersion("1")
		}
	}
	// etcd's order: by namespace and name
	sort.SliceStable(kept, func(i, j int) bool { return objKey(kept[i]) < objKey(kept[j]) })
	if a.ListOptions.Limit > 0 || a.ListOptions.Continue != "" {
		if kept, err = k.page(a, obj, kept); err != nil {
			return true, nil, err
		}
	}
	if err := meta.SetList(obj, kept); err != nil {
		return true, nil, err
	}
	if sel != nil && a.GetResource().Resource == "pods" {
		if on, ok := sel.RequiresExactMatch("spec.nodeName"); ok {
			inv.looked(on, k.w.now()) // I1: what was bound to on by now, the function has seen
		}
	}
	return true, obj, nil
}

// objKey is an object's key in etcd's order: namespace/name.
func objKey(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetNamespace() + "/" + m.GetName()
}

// continueToken is what a page's continue token holds: the list's
// resourceVersion, and the key it ended at.
type continueToken struct {
	RV    uint64        `json:"rv"`
	Start string        `json:"start"`
	At    time.Duration `json:"at"` // when the page was served (the world's time)
}

// snapshotsKept is how long the watch cache keeps the snapshot a continue
// token is served from (its eventFreshDuration): a token younger than this
// is served even past etcd's compaction.
const snapshotsKept = 75 * time.Second

// page cuts a list to its Limit from its continue token's key, as the
// apiserver pages a list read from etcd: the next page's token, and how
// many items remain, are set on list. A token whose resourceVersion was
// compacted away is refused (410), as etcd refuses the read at it, once the
// watch cache no longer keeps its snapshot (snapshotsKept). Unlike
// the apiserver's, the pages are not one snapshot: each is read as the
// world is then.
func (k *kube) page(a k8stesting.ListActionImpl, list runtime.Object, items []runtime.Object) ([]runtime.Object, error) {
	la, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	rv, _ := strconv.ParseUint(la.GetResourceVersion(), 10, 64)
	if c := a.ListOptions.Continue; c != "" {
		var tok continueToken
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err == nil {
			err = json.Unmarshal(raw, &tok)
		}
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("continue key is not valid: %v", err))
		}
		if k.tracker.compactedPast(tok.RV) && k.w.now()-tok.At > snapshotsKept {
			return nil, apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue value from the response to get an inconsistent list.")
		}
		rv = tok.RV
		i := sort.Search(len(items), func(i int) bool { return objKey(items[i]) > tok.Start })
		items = items[i:]
	}
	la.SetResourceVersion(strconv.FormatUint(rv, 10))
	la.SetContinue("")
	la.SetRemainingItemCount(nil)
	if lim := int(a.ListOptions.Limit); lim > 0 && len(items) > lim {
		raw, _ := json.Marshal(continueToken{RV: rv, Start: objKey(items[lim-1]), At: k.w.now()})
		la.SetContinue(base64.RawURLEncoding.EncodeToString(raw))
		left := int64(len(items) - lim)
		la.SetRemainingItemCount(&left)
		items = items[:lim]
	}
	return items, nil
}

// servedFields refuses (400) a field selector on a field the apiserver does
// not index for the resource, as 1.35 does: pods by spec.nodeName and
// status.phase, nodes by spec.unschedulable, every resource by
// metadata.name and metadata.namespace; VolumeAttachments by nothing more.
func servedFields(resource string, sel fields.Selector) error {
	if sel == nil || sel.Empty() {
		return nil
	}
	served := []string{"metadata.name", "metadata.namespace"}
	switch resource {
	case "pods":
		served = append(served, "spec.nodeName", "status.phase")
	case "nodes":
		served = append(served, "spec.unschedulable")
	}
	for _, r := range sel.Requirements() {
		if !slices.Contains(served, r.Field) {
			return apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
		}
	}
	return nil
}

func fieldSet(obj runtime.Object) fields.Set {
	m, err := meta.Accessor(obj)
	if err != nil {
		return fields.Set{}
	}
	s := fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()}
	switch o := obj.(type) {
	case *corev1.Pod:
		s["spec.nodeName"] = o.Spec.NodeName
		s["status.phase"] = string(o.Status.Phase)
	case *corev1.Node:
		s["spec.unschedulable"] = strconv.FormatBool(o.Spec.Unschedulable)
	}
	return s
}

// watch serves a watch filtered by its selectors; a watch may end early, as
// the apiserver ends them.
func (k *kube) watch(inv *invocation, a k8stesting.Action) (bool, watch.Interface, error) {
	if err := k.fault(inv, a); err != nil {
		return true, nil, err
	}
	wa := a.(k8stesting.WatchActionImpl)
	if err := servedFields(a.GetResource().Resource, wa.WatchRestrictions.Fields); err != nil {
		return true, nil, err
	}
	var src watch.Interface
	if rv := wa.WatchRestrictions.ResourceVersion; rv != "" && rv != "0" {
		// from a list's (or the last event's) resourceVersion: every
		// write after it, deletions included
		from, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			return true, nil, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q: %v", rv, err))
		}
		// etcd compacted past it (or, at random, the watch cache's
		// window is shorter): the client must list again
		if k.tracker.tooOld(a.GetResource(), from) || k.w.roll(inv.id+"/expired/"+a.GetResource().Resource+"/"+rv) < k.w.Plan.WatchExpired {
			k.w.tracef("%s: watch %s from %s refused: too old", inv.id, a.GetResource().Resource, rv)
			// the watch cache opens the watch (200) and sends one ERROR
			// event, 410 Expired, then ends it
			return true, errorWatch(apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %s", rv)).ErrStatus), nil
		}
		src = k.tracker.WatchFrom(a.GetResource(), a.GetNamespace(), from)
	} else {
		// no version: every object as it is now, then the changes (an
		// informer takes the objects again as updates)
		var err error
		if src, err = k.tracker.Watch(a.GetResource(), a.GetNamespace(), metav1.ListOptions{}); err != nil {
			return true, nil, err
		}
	}
	fsel, lsel := wa.WatchRestrictions.Fields, wa.WatchRestrictions.Labels
	fw := filtered(src, func(obj runtime.Object) bool {
		if fsel != nil && !fsel.Matches(fieldSet(obj)) {
			return false
		}
		if lsel != nil {
			if m, err := meta.Accessor(obj); err == nil && !lsel.Matches(labels.Set(m.GetLabels())) {
				return false
			}
		}
		return true
	})
	key := inv.id + "/watch/" + a.GetResource().Resource
	if k.w.roll(key) < k.w.Plan.WatchDrop {
		d := time.Duration(1+k.w.roll(key+"/when")*60) * time.Second
		k.w.after(d, func() {
			k.w.tracef("%s: watch %s dropped by the apiserver", inv.id, a.GetResource().Resource)
			src.Stop()
		})
	}
	return true, fw, nil
}

// errorWatch is a watch that sends one ERROR event with status, then ends.
func errorWatch(status metav1.Status) watch.Interface {
	w := watch.NewFakeWithChanSize(1, false)
	w.Error(&status)
	w.Stop()
	return w
}

// filteredWatch forwards the events keep lets through until stopped (it
// never blocks the tracker: a stopped consumer stops it).
type filteredWatch struct {
	src  watch.Interface
	out  chan watch.Event
	done chan struct{}
	once sync.Once
}

func filtered(src watch.Interface, keep func(runtime.Object) bool) *filteredWatch {
	fw := &filteredWatch{src: src, out: make(chan watch.Event), done: make(chan struct{})}
	go func() {
		defer close(fw.out)
		for ev := range src.ResultChan() {
			if ev.Type != watch.Error && !keep(ev.Object) {
				continue
			}
			select {
			case fw.out <- ev:
			case <-fw.done:
				return
			}
		}
	}()
	return fw
}

func (f *filteredWatch) ResultChan() <-chan watch.Event { return f.out }
func (f *filteredWatch) Stop() {
	f.once.Do(func() { close(f.done) })
	f.src.Stop()
}

// evict is the Eviction API as 1.35's handler answers
// (pkg/registry/core/pod/storage/eviction.go): a pod that has ended, is
// pending or is terminating is deleted without its PDB; otherwise its PDB
// (the status, which lags the pods) must allow a disruption (429 if not),
// which is spent at once and the pod noted in status.disruptedPods; then the
// pod is deleted gracefully. A UID precondition that fails is a 409 (after
// the PDB was spent, as the handler checks it last). Under contention the
// PDB's status write loses 20 tries 500 ms apart to other writers: a 409
// too. Both come at once here, where the handler takes 10 s (its retries):
// a reactor of the fake clientset holds the clientset's lock, and a sleep
// there would stop the bubble's clock. A dry run is checked as the real
// one and changes nothing.
func (k *kube) evict(inv *invocation, ev *policyv1.Eviction) (bool, runtime.Object, error) {
	obj, err := k.tracker.Get(gvrPods, ev.Namespace, ev.Name)
	if err != nil {
		return true, nil, err
	}
	p := obj.(*corev1.Pod)
	o := ev.DeleteOptions
	dry := o != nil && slices.Contains(o.DryRun, metav1.DryRunAll)
	if !dry {
		k.mu.Lock()
		delete(k.contended, p.UID) // asked again
		delete(k.allowedFrom, p.UID)
		delete(k.allowedLong, p.UID)
		k.mu.Unlock()
	}
	var uidErr error
	if o != nil && o.Preconditions != nil && o.Preconditions.UID != nil && *o.Preconditions.UID != "" && *o.Preconditions.UID != p.UID {
		uidErr = apierrors.NewConflict(schema.GroupResource{Resource: "Pod"}, p.Name,
			fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", *o.Preconditions.UID, p.UID))
	}
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodPending {
		switch {
		case dry:
			return true, nil, nil
		case uidErr != nil:
			return true, nil, uidErr
		case p.DeletionTimestamp != nil:
			return true, nil, nil
		}
		k.w.inv.evicted(inv, p)
		k.w.tracef("%s: evict %s/%s (on %s, %s: no PDB asked)", inv.id, p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase)
		return k.graceful(p, o)
	}
	var covering []policyv1.PodDisruptionBudget
	for _, b := range k.pdbs() {
		if b.Namespace != p.Namespace {
			continue
		}
		s, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err == nil && s.Matches(labels.Set(p.Labels)) {
			covering = append(covering, b)
		}
	}
	if len(covering) > 1 {
		return true, nil, apierrors.NewInternalError(errors.New("this pod has more than one PodDisruptionBudget, which the eviction subresource does not support"))
	}
	if len(covering) == 1 {
		b := covering[0]
		unhealthyFree := !healthy(*p) && b.Status.CurrentHealthy >= b.Status.DesiredHealthy && b.Status.DesiredHealthy > 0
		switch {
		case unhealthyFree:
			// an unready pod whose application is not disrupted now goes
			// without spending the budget
		case b.Status.ObservedGeneration < b.Generation:
			return true, nil, tooManyRequests(b.Name, fmt.Sprintf("The disruption budget %s is still being processed by the server.", b.Name), 10)
		case b.Status.DisruptionsAllowed <= 0:
			return true, nil, tooManyRequests(b.Name, fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", b.Name, b.Status.DesiredHealthy, b.Status.CurrentHealthy), 0)
		case !dry && k.w.roll(inv.id+"/pdb-contention/"+p.Name) < k.w.Plan.EvictConflict:
			k.w.tracef("%s: evict %s/%s -> 409: PDB %s's status write lost to other writers", inv.id, p.Namespace, p.Name, b.Name)
			k.mu.Lock()
			k.contended[p.UID] = k.w.now()
			k.mu.Unlock()
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "policy", Resource: "poddisruptionbudgets"}, b.Name,
				errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		case !dry:
			b.Status.DisruptionsAllowed--
			if b.Status.DisruptedPods == nil {
				b.Status.DisruptedPods = map[string]metav1.Time{}
			}
			b.Status.DisruptedPods[p.Name] = metav1.Now()
			if err := k.update(gvrPDBs, &b, b.Namespace); err != nil {
				return true, nil, err
			}
			k.w.after(2*time.Minute+time.Second, k.bump) // the disruption lapses
		}
	}
	if dry {
		return true, nil, nil
	}
	if uidErr != nil {
		return true, nil, uidErr
	}
	k.w.inv.evicted(inv, p)
	k.w.tracef("%s: evict %s/%s (on %s)", inv.id, p.Namespace, p.Name, p.Spec.NodeName)
	return k.graceful(p, o)
}

// noteAllowed notes, for the contended pods among pods, whether their PDB
// allows a disruption now (I12).
func (k *kube) noteAllowed(pods []corev1.Pod, allowed bool) {
	now := k.w.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range pods {
		if _, ok := k.contended[p.UID]; !ok {
			continue
		}
		from, was := k.allowedFrom[p.UID]
		switch {
		case allowed && !was:
			k.allowedFrom[p.UID] = now
		case !allowed && was:
			if now-from >= allowedLong {
				k.allowedLong[p.UID] = true
			}
			delete(k.allowedFrom, p.UID)
		}
	}
}

// allowedLong is how long a PDB allowing a disruption shows that a drain
// which still meant to evict a pod it covers did not ask: a waiting drain
// asks within seconds, and another pod's eviction spends the allowance.
const allowedLong = time.Minute

// contendedAt is when the last eviction of the pod uid was answered 409 by
// its PDB's contention, provided its PDB has since allowed a disruption for
// allowedLong with no new eviction of it (ok false: not so).
func (k *kube) contendedAt(uid ktypes.UID) (time.Duration, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	at, ok := k.contended[uid]
	from, allowing := k.allowedFrom[uid]
	long := k.allowedLong[uid] || (allowing && k.w.now()-from >= allowedLong)
	return at, ok && long
}

// tooManyRequests is the Eviction API's 429, its cause naming the budget.
func tooManyRequests(_, cause string, retryAfter int) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", retryAfter)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: cause})
	return err
}

// deletePod is a DELETE of a pod by the function: grace 0 removes it at once
// (a force delete); otherwise it terminates as its kubelet lets it.
func (k *kube) deletePod(inv *invocation, namespace, name string, o metav1.DeleteOptions) (bool, runtime.Object, error) {
	obj, err := k.tracker.Get(gvrPods, namespace, name)
	if err != nil {
		return true, nil, err
	}
	p := obj.(*corev1.Pod)
	a := k8stesting.NewDeleteActionWithOptions(gvrPods, namespace, name, o)
	if err := k.preconditions(a); err != nil {
		return true, nil, err
	}
	if err := k.w.inv.beforeWrite(inv, a, p); err != nil {
		return true, nil, err
	}
	k.w.tracef("%s: delete pod %s/%s (on %s, grace %v)", inv.id, namespace, name, p.Spec.NodeName, graceOf(o))
	k.w.inv.afterWrite(inv, a, p)
	return k.graceful(p, &o)
}

func graceOf(o metav1.DeleteOptions) string {
	if o.GracePeriodSeconds == nil {
		return "default"
	}
	return fmt.Sprint(*o.GracePeriodSeconds)
}

// graceful deletes p: at once for grace 0 or an unbound pod, otherwise it
// gets a deletion timestamp and its kubelet, if one runs, ends it within the
// grace period.
func (k *kube) graceful(p *corev1.Pod, o *metav1.DeleteOptions) (bool, runtime.Object, error) {
	grace := int64(30)
	if o != nil && o.GracePeriodSeconds != nil {
		grace = *o.GracePeriodSeconds
	}
	if grace == 0 || p.Spec.NodeName == "" {
		return true, nil, k.remove(p)
	}
	now := metav1.Now()
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, &grace
	if err := k.update(gvrPods, p, p.Namespace); err != nil {
		return true, nil, err
	}
	if n := k.node(p.Spec.NodeName); n != nil && n.alive {
		k.kubeletEnds(p, grace)
	}
	return true, nil, nil
}

// kubeletEnds has the pod's kubelet end it within grace seconds.
func (k *kube) kubeletEnds(p *corev1.Pod, grace int64) {
	d := time.Duration(float64(grace)*k.w.roll("kubelet-ends/"+string(p.UID))*float64(time.Second)) + k.w.jitter(string(p.UID))
	uid := p.UID
	k.w.after(d, func() {
		obj, err := k.tracker.Get(gvrPods, p.Namespace, p.Name)
		if err != nil || obj.(*corev1.Pod).UID != uid {
			return
		}
		if n := k.node(p.Spec.NodeName); n == nil || !n.alive {
			return // the kubelet died meanwhile: the pod stays terminating
		}
		_ = k.remove(obj.(*corev1.Pod))
	})
}

// remove deletes the pod object.
func (k *kube) remove(p *corev1.Pod) error {
	err := k.tracker.Delete(gvrPods, p.Namespace, p.Name)
	k.bump()
	if err == nil {
		k.w.tracef("world: pod %s/%s gone from %s", p.Namespace, p.Name, p.Spec.NodeName)
		if n := k.node(p.Spec.NodeName); n != nil && len(k.drained(n.name)) == 0 {
			k.w.inv.emptied(n)
		}
	}
	return err
}

// The kubelets and controllers.

// start runs the kubelets and controllers until the world stops.
func (k *kube) start() {
	k.w.every(10*time.Second+k.w.jitter("kubelets"), 10*time.Second, k.renewLeases)
	k.w.every(2*time.Second+k.w.jitter("controllers"), 2*time.Second, k.reconcile)
	k.w.every(5*time.Minute, 5*time.Minute, k.tracker.compact)
}

// reconcile is one pass of the controllers, when something changed since
// the last (their own changes included: a binding leads to an attachment,
// which starts the pod).
func (k *kube) reconcile() {
	k.mu.Lock()
	if k.gen == k.seen {
		k.mu.Unlock()
		return
	}
	k.seen = k.gen
	k.mu.Unlock()
	k.reconcileWorkloads()
	k.reconcileKubelets()
	k.reconcileAttacher()
	k.reconcileAttachments()
	k.reconcileNodes()
	k.updatePDBs()
}

func (k *kube) alive() []*simNode {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []*simNode
	for _, n := range k.nodes {
		if n.alive {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (k *kube) renewLeases() {
	for _, n := range k.alive() {
		obj, err := k.tracker.Get(gvrLeases, corev1.NamespaceNodeLease, n.name)
		if err != nil {
			continue
		}
		l := obj.(*coordinationv1.Lease).DeepCopy()
		now := metav1.NowMicro()
		l.Spec.RenewTime = &now
		_ = k.tracker.Update(gvrLeases, l, l.Namespace) // no bump: controllers do not read Leases
	}
}

// die stops a node's kubelet (the machine stops, or the kubelet hangs).
func (k *kube) die(name string) {
	k.mu.Lock()
	n := k.nodes[name]
	if n != nil && n.alive {
		n.alive, n.diedAt = false, k.w.now()
	}
	k.mu.Unlock()
	if n != nil {
		k.w.tracef("world: kubelet of %s stopped", name)
		k.bump()
		// the node controller's grace period, then its taint-based eviction
		k.w.after(40*time.Second+k.w.jitter("notready/"+name), k.bump)
		k.w.after(340*time.Second+k.w.jitter("evict/"+name), k.bump)
	}
}

// revive starts a node's kubelet again: the pods that were told to go go.
func (k *kube) revive(name string) {
	k.mu.Lock()
	n := k.nodes[name]
	if n != nil {
		n.alive, n.bornAt = true, k.w.now()
	}
	k.mu.Unlock()
	if n == nil {
		return
	}
	k.w.tracef("world: kubelet of %s running again", name)
	k.bump()
	k.renewLeases()
	for _, p := range k.pods() {
		if p.Spec.NodeName == name && p.DeletionTimestamp != nil {
			k.kubeletEnds(&p, *p.DeletionGracePeriodSeconds)
		}
	}
}

// taintEvict: the taint eviction controller deletes the pods of node that
// do not tolerate its NoExecute taint (not-ready or unreachable; the
// default toleration of 300 s over), a DaemonSet's pods tolerate it.
func (k *kube) taintEvict(node, taint string, pods []corev1.Pod) {
	for _, p := range pods {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil && !daemon(p) {
			t, grace := metav1.Now(), int64(30)
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &t, &grace
			_ = k.update(gvrPods, &p, p.Namespace)
			k.w.tracef("world: taint manager evicts %s from %s %s", p.Name, taint, node)
		}
	}
}

// unwell has a node's kubelet report NotReady while it runs (and renews
// its Lease), for d; its pods keep running.
func (k *kube) unwell(name string, d time.Duration) {
	k.mu.Lock()
	n := k.nodes[name]
	if n != nil {
		n.unready, n.unreadyAt = true, k.w.now()
	}
	k.mu.Unlock()
	k.bump()
	k.w.after(d, func() {
		k.mu.Lock()
		n.unready = false
		k.mu.Unlock()
		k.bump()
	})
}

// schedulable is where the scheduler may put a pod now.
func (k *kube) schedulable() []string {
	var out []string
	for _, n := range k.alive() {
		if n.skipped {
			continue
		}
		obj := k.getNode(n.name)
		if obj == nil || obj.Spec.Unschedulable || !node.Ready(obj) {
			continue
		}
		ok := true
		for _, t := range obj.Spec.Taints {
			if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
				ok = false
			}
		}
		if ok {
			out = append(out, n.name)
		}
	}
	return out
}

// reconcileWorkloads is the ReplicaSet and StatefulSet controllers and the
// scheduler: missing replicas are made, pending pods bound.
func (k *kube) reconcileWorkloads() {
	pods := k.pods()
	count := map[string]int{}
	exists := map[string]bool{}
	load := map[string]int{}
	for _, p := range pods {
		exists[p.Name] = true
		if p.DeletionTimestamp == nil {
			count[p.Labels["app"]]++
		}
		if p.Spec.NodeName != "" && !daemon(p) {
			load[p.Spec.NodeName]++
		}
	}
	targets := k.schedulable()
	pick := func() string {
		if len(targets) == 0 {
			return ""
		}
		best := targets[0]
		for _, t := range targets[1:] {
			if load[t] < load[best] {
				best = t
			}
		}
		load[best]++
		return best
	}
	for range k.w.Plan.Web - count["web"] {
		k.mu.Lock()
		k.names++
		name := fmt.Sprintf("web-r%d", k.names)
		k.mu.Unlock()
		on := pick()
		k.addPod(name, "web", on, "ReplicaSet", "")
		k.w.tracef("world: replicaset made %s on %q", name, on)
	}
	for i := range k.w.Plan.DBs {
		app := fmt.Sprintf("db-%d", i)
		if !exists[app] { // a StatefulSet makes the pod again only once the old one is gone
			on := pick()
			k.addPod(app, app, on, "StatefulSet", "data-"+app)
			k.w.tracef("world: statefulset made %s on %q", app, on)
		}
	}
	for _, p := range pods {
		if p.Spec.NodeName == "" && p.DeletionTimestamp == nil {
			if !k.fits(p) {
				continue // a node selector no node matches: Pending
			}
			if on := pick(); on != "" {
				p.Spec.NodeName = on
				if !strings.HasPrefix(p.Name, "db-") {
					p.Status = running()
				}
				_ = k.update(gvrPods, &p, p.Namespace)
				k.bound1(on, &p)
				k.w.tracef("world: scheduler bound %s to %s", p.Name, on)
			}
		}
	}
}

// fits reports whether some node's labels match the pod's node selector
// (the scheduler leaves a pod no node fits Pending).
func (k *kube) fits(p corev1.Pod) bool {
	if len(p.Spec.NodeSelector) == 0 {
		return true
	}
	for _, n := range k.alive() {
		if obj := k.getNode(n.name); obj != nil && labels.SelectorFromSet(p.Spec.NodeSelector).Matches(labels.Set(obj.Labels)) {
			return true
		}
	}
	return false
}

// reconcileAttachments is the attach/detach controller: a volume is
// detached from a node once no pod there uses it and its kubelet unmounted
// it (it runs), or the node is out of service or gone; it is attached where
// its pod is once it is attached nowhere else (Multi-Attach otherwise), and
// the pod starts then.
func (k *kube) reconcileAttachments() {
	pods := k.pods()
	vas := k.vas()
	for i := range k.w.Plan.DBs {
		app := fmt.Sprintf("db-%d", i)
		var want *corev1.Pod
		users := map[string]bool{}
		for _, p := range pods {
			if p.Name == app && p.Spec.NodeName != "" {
				users[p.Spec.NodeName] = true
				if p.DeletionTimestamp == nil {
					want = &p
				}
			}
		}
		attached := map[string]bool{}
		for _, va := range vas {
			if *va.Spec.Source.PersistentVolumeName != "pv-"+app {
				continue
			}
			on := va.Spec.NodeName
			if want != nil && want.Spec.NodeName == on {
				attached[on] = true
				continue
			}
			n := k.node(on)
			obj := k.getNode(on)
			outOfService := obj != nil && slices.ContainsFunc(obj.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeOutOfService })
			if !users[on] && (obj == nil || outOfService || (n != nil && n.alive)) {
				if va.DeletionTimestamp == nil && k.deleteVA(va.Name) == nil {
					k.w.tracef("world: detached %s from %s", app, on)
				}
				continue
			}
			attached[on] = true
		}
		if want == nil {
			continue
		}
		if len(attached) == 0 {
			k.attach(app, want.Spec.NodeName)
			k.w.tracef("world: attached %s to %s", app, want.Spec.NodeName)
			attached[want.Spec.NodeName] = true
		}
		if attached[want.Spec.NodeName] && len(attached) == 1 && want.Status.Phase == corev1.PodPending {
			if n := k.node(want.Spec.NodeName); n != nil && n.alive {
				want.Status = running()
				_ = k.update(gvrPods, want, want.Namespace)
			}
		}
	}
}

// reconcileNodes is the node lifecycle controller (NotReady 40 s after the
// kubelet stops, its pods not ready; taint-based eviction after 5 min), the
// cloud controller (the Node of a terminated instance deleted) and the pod
// GC (pods of a gone node, terminating pods of an out-of-service node).
func (k *kube) reconcileNodes() {
	now := k.w.now()
	k.mu.Lock()
	nodes := make([]*simNode, 0, len(k.nodes))
	for _, n := range k.nodes {
		nodes = append(nodes, n)
	}
	k.mu.Unlock()
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].name < nodes[j].name })
	pods := k.pods()
	for _, n := range nodes {
		obj := k.getNode(n.name)
		if obj == nil {
			continue
		}
		ready := node.Ready(obj)
		switch {
		case !n.alive && ready && now-n.diedAt >= 40*time.Second:
			setReady(obj, corev1.ConditionUnknown)
			obj.Spec.Taints = append(obj.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: time.Now()}})
			_ = k.update(gvrNodes, obj, "")
			k.w.tracef("world: node controller: %s NotReady", n.name)
			for _, p := range pods {
				if p.Spec.NodeName == n.name && healthy(p) {
					p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
					_ = k.update(gvrPods, &p, p.Namespace)
				}
			}
		case n.alive && n.unready && ready:
			// the kubelet's False, kept by the node controller (the Lease is
			// fresh), which taints the node not-ready (its pods are left
			// Ready: no pod update, no MarkPodsNotReady; conformance)
			setReady(obj, corev1.ConditionFalse)
			obj.Spec.Taints = append(obj.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: time.Now()}})
			_ = k.update(gvrNodes, obj, "")
			k.w.tracef("world: kubelet of %s reports NotReady (its Lease renewed)", n.name)
		case n.alive && n.unready && !ready && now-n.unreadyAt >= 300*time.Second:
			k.taintEvict(n.name, "not-ready", pods)
		case n.alive && !n.unready && !ready:
			setReady(obj, corev1.ConditionTrue)
			obj.Spec.Taints = slices.DeleteFunc(obj.Spec.Taints, func(t corev1.Taint) bool {
				return t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady
			})
			_ = k.update(gvrNodes, obj, "")
			k.w.tracef("world: node controller: %s Ready", n.name)
			for _, p := range pods {
				if p.Spec.NodeName == n.name && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && !healthy(p) {
					p.Status = running()
					_ = k.update(gvrPods, &p, p.Namespace)
				}
			}
		case !n.alive && !ready && now-n.diedAt >= 340*time.Second:
			k.taintEvict(n.name, "unreachable", pods)
		}
		if i := slices.IndexFunc(obj.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeOutOfService }); i >= 0 {
			k.outOfService(n.name, &obj.Spec.Taints[i], !node.Ready(obj), pods)
		}
		if k.w.Plan.ControllerUp && k.w.ec2.truth(n.id) == "terminated" && now-k.w.ec2.since(n.id) >= 30*time.Second {
			if k.delete(gvrNodes, "", n.name) == nil {
				k.w.tracef("world: cloud controller deleted node %s", n.name)
			}
		}
	}
	for _, p := range pods {
		if p.Spec.NodeName != "" && k.getNode(p.Spec.NodeName) == nil {
			_ = k.remove(&p) // pod GC: its node is gone
		}
	}
}

// outOfService is what the out-of-service taint sets off on node on: the
// taint eviction controller deletes the pods that do not tolerate it (a
// NoExecute taint), and the pod GC removes the node's terminating pods at
// once while it is not Ready (no kubelet will confirm them). Pods it
// deleted one pass are removed by the next.
func (k *kube) outOfService(on string, taint *corev1.Taint, notReady bool, pods []corev1.Pod) {
	for _, p := range pods {
		if p.Spec.NodeName != on {
			continue
		}
		switch {
		case p.DeletionTimestamp != nil && notReady:
			_ = k.remove(&p)
		case p.DeletionTimestamp == nil && taint.Effect == corev1.TaintEffectNoExecute &&
			!slices.ContainsFunc(p.Spec.Tolerations, func(t corev1.Toleration) bool { return t.ToleratesTaint(klog.Background(), taint, false) }):
			t, grace := metav1.Now(), int64(30)
			if p.Spec.TerminationGracePeriodSeconds != nil {
				grace = *p.Spec.TerminationGracePeriodSeconds
			}
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &t, &grace
			_ = k.update(gvrPods, &p, p.Namespace)
			k.w.tracef("world: taint eviction deletes %s from out-of-service %s", p.Name, on)
		}
	}
}

func setReady(n *corev1.Node, s corev1.ConditionStatus) {
	for i, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = s
			n.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
}

// updatePDBs is the disruption controller: each PDB's status from the pods
// its selector takes, as they are: expected (minAvailable as a number: the
// pods selected; maxUnavailable: the pods selected stand for the
// controller's scale), healthy (Ready, not being deleted, not in
// disruptedPods), desired; disruptedPods keeps an eviction's pod until it is
// being deleted, or for 2 minutes.
func (k *kube) updatePDBs() {
	pods := k.pods()
	now := time.Now()
	for _, b := range k.pdbs() {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		var selected []corev1.Pod
		for _, p := range pods {
			if err == nil && p.Namespace == b.Namespace && sel.Matches(labels.Set(p.Labels)) {
				selected = append(selected, p)
			}
		}
		disrupted := map[string]metav1.Time{}
		for _, p := range selected {
			if t, ok := b.Status.DisruptedPods[p.Name]; ok && p.DeletionTimestamp == nil && now.Before(t.Add(2*time.Minute)) {
				disrupted[p.Name] = t
			}
		}
		var up int32
		for _, p := range selected {
			if _, gone := disrupted[p.Name]; healthy(p) && !gone {
				up++
			}
		}
		expected := int32(len(selected))
		var want int32
		switch {
		case b.Spec.MinAvailable != nil:
			v, _ := intstr.GetScaledValueFromIntOrPercent(b.Spec.MinAvailable, int(expected), true)
			want = int32(v)
		case b.Spec.MaxUnavailable != nil:
			v, _ := intstr.GetScaledValueFromIntOrPercent(b.Spec.MaxUnavailable, int(expected), true)
			want = max(0, expected-int32(v))
		}
		s := policyv1.PodDisruptionBudgetStatus{ObservedGeneration: b.Generation, CurrentHealthy: up, DesiredHealthy: want,
			ExpectedPods: expected, DisruptionsAllowed: max(0, up-want)}
		percent := b.Spec.MinAvailable != nil && b.Spec.MinAvailable.Type == intstr.String
		if (b.Spec.MaxUnavailable != nil || percent) && slices.ContainsFunc(selected, func(p corev1.Pod) bool { return metav1.GetControllerOf(&p) == nil }) {
			// the scale comes from the pods' controllers: a pod without one
			// fails the controller's sync, which then allows nothing
			s = b.Status
			s.DisruptionsAllowed = 0
		}
		if len(disrupted) > 0 {
			s.DisruptedPods = disrupted
		}
		k.noteAllowed(selected, s.DisruptionsAllowed > 0)
		if !equality.Semantic.DeepEqual(b.Status, s) {
			b.Status = s
			_ = k.update(gvrPDBs, &b, b.Namespace)
		}
	}
}

// reconcileKubelets starts the pods bound to a live node that wait for
// nothing (no volume to attach): a kubelet runs them.
func (k *kube) reconcileKubelets() {
	for _, p := range k.pods() {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending {
			continue
		}
		if slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.PersistentVolumeClaim != nil }) {
			continue
		}
		if n := k.node(p.Spec.NodeName); n != nil && n.alive && !n.unready {
			p.Status = running()
			_ = k.update(gvrPods, &p, p.Namespace)
		}
	}
}

// bind makes a pod bound straight to a node (no scheduler: a static
// assignment, a DaemonSet-like controller, or a race with the cordon).
func (k *kube) bind(on string) {
	k.mu.Lock()
	k.names++
	name := fmt.Sprintf("late-%d", k.names)
	k.mu.Unlock()
	k.addPod(name, "late", on, "ReplicaSet", "")
	k.w.tracef("world: %s bound straight to %s", name, on)
}

var _ = context.Background
