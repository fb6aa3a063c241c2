package harness

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/node-drainer/node-drainer/internal/node"
)

// CSIDriver is the CSI driver name of the scenes' volumes (EBS's).
const CSIDriver = "ebs.csi.aws.com"

// NodeSpec describes a kwok node standing for an EC2 instance.
type NodeSpec struct {
	Name       string // the instance's private DNS name, as on EKS
	InstanceID string
	Zone       string
	Labels     map[string]string
	// NoProviderID registers the node without spec.providerID, as a kubelet
	// does before the cloud controller has set it.
	NoProviderID bool
}

// AddNode registers a node that kwok manages (Ready within a second or two),
// with the providerID EKS gives it and controller-managed attach/detach, so
// the attach/detach controller creates VolumeAttachments for it.
func (e *Env) AddNode(ctx context.Context, s NodeSpec) (*corev1.Node, error) {
	labels := map[string]string{
		corev1.LabelHostname:           s.Name,
		corev1.LabelTopologyZone:       s.Zone,
		corev1.LabelTopologyRegion:     "us-east-1",
		corev1.LabelInstanceTypeStable: "m5.large",
		corev1.LabelOSStable:           "linux",
		corev1.LabelArchStable:         "amd64",
		"type":                         "kwok",
	}
	for k, v := range s.Labels {
		labels[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("500"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   s.Name,
			Labels: labels,
			Annotations: map[string]string{
				KwokAnnotation: "fake",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
		Spec: corev1.NodeSpec{ProviderID: fmt.Sprintf("aws:///%s/%s", s.Zone, s.InstanceID)},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Phase:       corev1.NodeRunning,
		},
	}
	if s.NoProviderID {
		n.Spec.ProviderID = ""
	}
	n, err := e.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating node %s: %w", s.Name, err)
	}
	return n, e.WaitNodeReady(ctx, s.Name, true, 30*time.Second)
}

// WaitNodeReady waits until the node's Ready condition is (or is no longer) True.
func (e *Env) WaitNodeReady(ctx context.Context, name string, ready bool, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := e.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return node.Ready(n) == ready, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for node %s Ready=%v: %w", name, ready, err)
	}
	return nil
}

// StopKubelet makes kwok abandon the node as a dead kubelet would. Its Lease
// is taken over by another holder, with a day-long duration so kwok does not
// take it back when it would expire, and never renewed after that:
// heartbeats stop, and the controller-manager marks the node NotReady about
// 20 s later. Its pods are annotated KubeletStoppedAnnotation, so that a
// graceful deletion of one is never finished (the pod stays Terminating with
// its volume attached, as on a real dead node) until it is force-deleted or
// StartKubelet runs. A pod bound to the node after this call is still played
// by kwok.
func (e *Env) StopKubelet(ctx context.Context, node string) error {
	leases := e.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil // not created yet
		}
		holder, day := "testenv-dead-kubelet", int32(86400)
		l.Spec.HolderIdentity = &holder
		l.Spec.LeaseDurationSeconds = &day
		// the takeover is the dead kubelet's last renewal: a controller that
		// sees a Lease change without a later renewTime (1.37's lease circuit
		// breaker) takes its cache for stale and never marks the node
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("taking node %s's Lease from kwok: %w", node, err)
	}
	return e.markKubeletPods(ctx, node, true)
}

// StartKubelet gives the node back to kwok: its Lease is deleted (kwok
// recreates it and the node turns Ready again in seconds) and its pods lose
// KubeletStoppedAnnotation, so kwok finishes their pending deletions.
func (e *Env) StartKubelet(ctx context.Context, node string) error {
	if err := e.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return e.markKubeletPods(ctx, node, false)
}

// RuntimeDown has the node's kubelet report NotReady while it runs and
// renews its Lease, as a kubelet whose container runtime is down does
// (reason KubeletNotReady): the node annotated RuntimeDownAnnotation, which
// kwok's node-initialize stage leaves alone, then its Ready condition
// written False. Its pods keep running; the node lifecycle controller does
// the rest (the not-ready taint, the pods not ready).
func (e *Env) RuntimeDown(ctx context.Context, name string) error {
	patch := []byte(`{"metadata":{"annotations":{"` + RuntimeDownAnnotation + `":"true"}}}`)
	if _, err := e.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotating node %s: %w", name, err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		for i, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				n.Status.Conditions[i] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
					Reason: "KubeletNotReady", Message: "container runtime is down", LastHeartbeatTime: now, LastTransitionTime: now}
			}
		}
		_, err = e.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// RuntimeUp gives a RuntimeDown node back to kwok, which reports it Ready
// again.
func (e *Env) RuntimeUp(ctx context.Context, name string) error {
	patch := []byte(`{"metadata":{"annotations":{"` + RuntimeDownAnnotation + `":null}}}`)
	_, err := e.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// markKubeletPods sets (or removes) KubeletStoppedAnnotation on every pod
// bound to the node.
func (e *Env) markKubeletPods(ctx context.Context, node string, stopped bool) error {
	pods, err := e.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return fmt.Errorf("listing node %s's pods: %w", node, err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + KubeletStoppedAnnotation + `":"true"}}}`)
	if !stopped {
		patch = []byte(`{"metadata":{"annotations":{"` + KubeletStoppedAnnotation + `":null}}}`)
	}
	for _, p := range pods.Items {
		_, err := e.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("marking pod %s/%s of node %s: %w", p.Namespace, p.Name, node, err)
		}
	}
	return nil
}

// Workload options shared by the scene's builders.
type Workload struct {
	Namespace string
	Name      string
	Replicas  int32
	// NodeSelector pins the pods (e.g. to a node pool label); empty means any node.
	NodeSelector map[string]string
	// Nodes, when set, pins the pods to these nodes by name as well: a
	// required node affinity on metadata.name, which the scheduler turns
	// into its candidate nodes before it filters (as for a DaemonSet's
	// pods). A label alone makes it try every node of the cluster for each
	// pod: at 5,000 nodes, half a core of this machine while a scene's
	// pods are replaced, beside the drain it measures.
	Nodes []string
	// Tolerations of the pods (e.g. of a taint that reserves a node for them).
	Tolerations []corev1.Toleration
	// Spread places the pods one per node while the nodes they may use are
	// as many as the pods (a hard topology spread over hostnames, maxSkew 1;
	// cordoned and tainted nodes do not count), so the pods of one
	// Deployment, and its PDB, span many nodes.
	Spread bool
	// GracePeriod is the pods' terminationGracePeriodSeconds; nil leaves the
	// API's default, 30 s, as a real workload has. On a live node kwok
	// finishes a graceful deletion at once either way (one more write, by
	// kwok); on a node whose kubelet the harness stopped the pod stays
	// Terminating, as on a real dead node. 0 makes every deletion immediate.
	GracePeriod *int64
	// StopWithinGrace has kwok finish a graceful deletion of the pods at a
	// random moment within their grace period (StopsWithinGraceAnnotation),
	// as a real pod's containers take their time to stop, rather than at
	// once.
	StopWithinGrace bool
}

// podAnnotations are the annotations of the pods (nil: none).
func (w Workload) podAnnotations() map[string]string {
	if !w.StopWithinGrace {
		return nil
	}
	return map[string]string{StopsWithinGraceAnnotation: "true"}
}

func (w Workload) podSpec(volumes ...corev1.Volume) corev1.PodSpec {
	mounts := make([]corev1.VolumeMount, 0, len(volumes))
	for _, v := range volumes {
		mounts = append(mounts, corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	spec := corev1.PodSpec{
		NodeSelector:                  w.NodeSelector,
		Tolerations:                   w.Tolerations,
		TerminationGracePeriodSeconds: w.GracePeriod,
		Containers: []corev1.Container{{
			Name:         "app",
			Image:        "registry.invalid/app:1", // never pulled: kwok plays the kubelet
			VolumeMounts: mounts,
		}},
		Volumes: volumes,
	}
	if len(w.Nodes) > 0 {
		// one term per node (terms are ORed; a field requirement takes one
		// value), which the scheduler's NodeAffinity PreFilter unites
		var terms []corev1.NodeSelectorTerm
		for _, n := range w.Nodes {
			terms = append(terms, corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
				Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{n},
			}}})
		}
		spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
		}}
	}
	if w.Spread {
		honor := corev1.NodeInclusionPolicyHonor
		spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew:           1,
			TopologyKey:       corev1.LabelHostname,
			WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector:     w.selector(),
			NodeTaintsPolicy:  &honor,
		}}
	}
	return spec
}

func (w Workload) meta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, Labels: map[string]string{"app": w.Name}}
}

func (w Workload) selector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.Name}}
}

func (w Workload) template(volumes ...corev1.Volume) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": w.Name}, Annotations: w.podAnnotations()},
		Spec:       w.podSpec(volumes...),
	}
}

// Deployment creates a Deployment; emptyDir adds an emptyDir volume.
func (e *Env) Deployment(ctx context.Context, w Workload, emptyDir bool) (*appsv1.Deployment, error) {
	var vols []corev1.Volume
	if emptyDir {
		vols = append(vols, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	replicas := w.Replicas
	d := &appsv1.Deployment{
		ObjectMeta: w.meta(),
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: w.selector(),
			Template: w.template(vols...),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
		},
	}
	return e.Client.AppsV1().Deployments(w.Namespace).Create(ctx, d, metav1.CreateOptions{})
}

// PDB creates a PodDisruptionBudget over the workload's pods with
// maxUnavailable (or minAvailable when maxUnavailable < 0).
func (e *Env) PDB(ctx context.Context, w Workload, maxUnavailable, minAvailable int) (*policyv1.PodDisruptionBudget, error) {
	spec := policyv1.PodDisruptionBudgetSpec{Selector: w.selector()}
	if maxUnavailable >= 0 {
		v := intstr.FromInt32(int32(maxUnavailable))
		spec.MaxUnavailable = &v
	} else {
		v := intstr.FromInt32(int32(minAvailable))
		spec.MinAvailable = &v
	}
	p := &policyv1.PodDisruptionBudget{ObjectMeta: w.meta(), Spec: spec}
	return e.Client.PolicyV1().PodDisruptionBudgets(w.Namespace).Create(ctx, p, metav1.CreateOptions{})
}

// DaemonSet creates a DaemonSet (one pod on every node it may run on).
func (e *Env) DaemonSet(ctx context.Context, w Workload) (*appsv1.DaemonSet, error) {
	d := &appsv1.DaemonSet{
		ObjectMeta: w.meta(),
		Spec: appsv1.DaemonSetSpec{
			Selector: w.selector(),
			Template: w.template(),
		},
	}
	d.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	return e.Client.AppsV1().DaemonSets(w.Namespace).Create(ctx, d, metav1.CreateOptions{})
}

// StatefulSet creates a one-replica StatefulSet whose pod mounts an RWO claim
// pre-bound to a static CSI PersistentVolume in zone (pre-binding keeps the
// scheduler from racing the volume binder into another zone). It returns the
// PV's name.
func (e *Env) StatefulSet(ctx context.Context, w Workload, zone string) (string, error) {
	claim := "data-" + w.Name + "-0"
	pvName := "pv-" + w.Namespace + "-" + w.Name
	fs := corev1.PersistentVolumeFilesystem
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			VolumeMode:                    &fs,
			ClaimRef:                      &corev1.ObjectReference{Namespace: w.Namespace, Name: claim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: CSIDriver, VolumeHandle: "vol-" + w.Namespace + "-" + w.Name, FSType: "ext4",
			}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}},
			}}}},
		},
	}
	if _, err := e.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating PV %s: %w", pvName, err)
	}
	empty := ""
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: claim, Labels: map[string]string{"app": w.Name}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &empty,
			VolumeName:       pvName,
			VolumeMode:       &fs,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(w.Namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating PVC %s: %w", claim, err)
	}
	// bound before the pod exists, or the scheduler backs off for seconds.
	// The PV controller binds on the claim's event, or at its 15 s resync
	// when its informer had not seen the PV yet: a busy controller-manager
	// (a 50-node storm's scene being built) took more than 30 s
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		c, err := e.Client.CoreV1().PersistentVolumeClaims(w.Namespace).Get(ctx, claim, metav1.GetOptions{})
		return err == nil && c.Status.Phase == corev1.ClaimBound, nil
	})
	if err != nil {
		return "", fmt.Errorf("claim %s not bound: %w", claim, err)
	}
	replicas := int32(1)
	s := &appsv1.StatefulSet{
		ObjectMeta: w.meta(),
		Spec: appsv1.StatefulSetSpec{
			Replicas:    &replicas,
			Selector:    w.selector(),
			ServiceName: w.Name,
			Template: w.template(corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}),
		},
	}
	if _, err := e.Client.AppsV1().StatefulSets(w.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating StatefulSet %s: %w", w.Name, err)
	}
	return pvName, nil
}

// BarePod creates a pod with no controller, bound to node.
func (e *Env) BarePod(ctx context.Context, w Workload, node string) (*corev1.Pod, error) {
	p := &corev1.Pod{ObjectMeta: w.meta(), Spec: w.podSpec()}
	p.Annotations = w.podAnnotations()
	p.Spec.NodeName = node
	return e.Client.CoreV1().Pods(w.Namespace).Create(ctx, p, metav1.CreateOptions{})
}

// MirrorPod creates a pod as a kubelet mirrors a static pod (the
// kubernetes.io/config.mirror annotation), bound to node.
func (e *Env) MirrorPod(ctx context.Context, w Workload, node string) (*corev1.Pod, error) {
	p := &corev1.Pod{ObjectMeta: w.meta(), Spec: w.podSpec()}
	p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "static-" + w.Name}
	p.Spec.NodeName = node
	return e.Client.CoreV1().Pods(w.Namespace).Create(ctx, p, metav1.CreateOptions{})
}

// Namespace creates a namespace (and waits for its default ServiceAccount).
func (e *Env) Namespace(ctx context.Context, name string) error {
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := e.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// WaitPodsRunning waits until the pods matching selector in ns number want
// and all are Running (and not being deleted); it returns them.
func (e *Env) WaitPodsRunning(ctx context.Context, ns, selector string, want int, timeout time.Duration) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := e.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				pods = append(pods, p)
			}
		}
		return len(pods) == want && len(list.Items) == want, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %d running pods %q in %s (have %d): %w", want, selector, ns, len(pods), err)
	}
	return pods, nil
}

// UpdateNode changes a node with a read-modify-write, retried on a conflict
// (the node's own status updates race with it).
func (e *Env) UpdateNode(ctx context.Context, name string, change func(*corev1.Node)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(n)
		_, err = e.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// TaintNode adds taint to the node (replacing one with the same key and
// effect).
func (e *Env) TaintNode(ctx context.Context, name string, taint corev1.Taint) error {
	return e.UpdateNode(ctx, name, func(n *corev1.Node) {
		n.Spec.Taints = append(slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&taint) }), taint)
	})
}

// SetUnschedulable cordons or uncordons a node (scenes use it to place pods).
func (e *Env) SetUnschedulable(ctx context.Context, name string, unschedulable bool) error {
	return e.UpdateNode(ctx, name, func(n *corev1.Node) { n.Spec.Unschedulable = unschedulable })
}

// WaitPodVolumeAttached waits until the pod ns/name (whichever incarnation
// exists) runs on a node where its volume pv is attached as the
// attach/detach controller sees it: the VolumeAttachment reports attached
// and the controller recorded SuccessfulAttachVolume for this pod (its
// attach operation finished). It returns the node.
func (e *Env) WaitPodVolumeAttached(ctx context.Context, ns, name, pv string, timeout time.Duration) (string, error) {
	var node string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, n, err := e.PodVolumeAttached(ctx, ns, name, pv)
		node = n
		return ok, err
	})
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: volume %s not attached where it runs (%q): %w", ns, name, pv, node, err)
	}
	return node, nil
}

// PodVolumeAttached is one check of what WaitPodVolumeAttached waits for;
// it returns the pod's node too.
func (e *Env) PodVolumeAttached(ctx context.Context, ns, name, pv string) (bool, string, error) {
	p, err := e.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false, "", nil
	}
	node := p.Spec.NodeName
	vas, err := e.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, node, nil
	}
	attached := false
	for _, va := range vas.Items {
		if va.Spec.NodeName == node && va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv {
			attached = va.Status.Attached && va.DeletionTimestamp == nil
		}
	}
	if !attached {
		return false, node, nil
	}
	evs, err := e.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(p.UID) + ",reason=SuccessfulAttachVolume",
	})
	return err == nil && len(evs.Items) > 0, node, nil
}
