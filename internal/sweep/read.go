package sweep

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/volume"
)

// Read reads everything the plan needs, or fails without a partial result.
func Read(ctx context.Context, kube kubernetes.Interface, ec2 instance.EC2API, asg ASGAPI, cfg Config, now time.Time) (*Readings, error) {
	r := &Readings{Now: now, PodsOn: map[string]int{}, ByDNSName: map[string][]instance.Instance{}, Took: map[string]time.Duration{}}
	clk := cfg.clock()
	lap := clk.Now()
	took := func(what string) {
		r.Took[what] = clk.Since(lap).Round(time.Millisecond)
		lap = clk.Now()
	}
	if err := r.readNodes(ctx, kube, cfg); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	if err := r.readAttachments(ctx, kube, cfg); err != nil {
		return nil, fmt.Errorf("listing volume attachments: %w", err)
	}
	var err error
	if r.Leases, err = list(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		o.LabelSelector = "app.kubernetes.io/name=node-drainer"
		return kube.CoordinationV1().Leases(cfg.LeaseNamespace).List(ctx, o)
	}, 500, func(l *coordinationv1.Lease) coordinationv1.Lease { return *l }); err != nil {
		return nil, fmt.Errorf("listing leases in %s: %w", cfg.LeaseNamespace, err)
	}
	took("cluster")
	if asg != nil {
		if err := r.readGroups(ctx, asg, cfg); err != nil {
			return nil, err
		}
	}
	took("autoscaling")
	if err := r.readInstances(ctx, ec2, cfg); err != nil {
		return nil, err
	}
	took("ec2")
	if err := r.readPodsOfDown(ctx, kube); err != nil {
		return nil, err
	}
	took("pods")
	return r, nil
}

// readAttachments reads the attachments of this shard's nodes, and (shard
// 0, or a pass in one) those to nodes the cluster does not have: orphans
// maybe.
func (r *Readings) readAttachments(ctx context.Context, kube kubernetes.Interface, cfg Config) error {
	return cluster.EachItem(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return kube.StorageV1().VolumeAttachments().List(ctx, o)
	}, volume.PageSize, metav1.ListOptions{}, func(o runtime.Object) (bool, error) {
		va, ok := o.(*storagev1.VolumeAttachment)
		if !ok {
			return false, fmt.Errorf("unexpected %T in list", o)
		}
		if r.own[va.Spec.NodeName] || cfg.Shard == nil && !r.hasNode(va.Spec.NodeName) {
			r.Attachments = append(r.Attachments, slimAttachment(va))
		}
		return false, nil
	})
}

// readPodsOfDown counts the pods (not a DaemonSet's) of the nodes whose
// instance is down: one list per such node, so nothing is asked of a node
// that is well.
func (r *Readings) readPodsOfDown(ctx context.Context, kube kubernetes.Interface) error {
	for _, n := range r.Nodes {
		i, ok := r.Instances[node.ProviderInstanceID(n.Spec.ProviderID)]
		if !ok || !(i.Down() || i.GoingDown()) {
			continue
		}
		pods, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String(), ResourceVersion: "0"})
		if err != nil {
			return fmt.Errorf("listing pods of node %s: %w", n.Name, err)
		}
		for _, p := range pods.Items {
			if !ownedByDaemonSet(p) {
				r.PodsOn[n.Name]++
			}
		}
	}
	return nil
}

// readNodes reads the Nodes page by page (node.PageSize a request, one page
// held): those of this shard kept as the plan reads them (slimNode), the
// others (shard 0 of a pass in shards) only by name and instance id, and
// where each next shard starts noted in r.Shards. A shard's reading stops
// at its last page.
func (r *Readings) readNodes(ctx context.Context, kube kubernetes.Interface, cfg Config) error {
	r.names, r.own, r.ids = map[string]bool{}, map[string]bool{}, map[string]bool{}
	r.Shards = nil
	r.Nodes = nil
	opts := metav1.ListOptions{}
	if cfg.Shard != nil {
		opts.Continue = cfg.Shard.Continue
	}
	per := cfg.pagesPerShard()
	pages := 0
	ownItems := math.MaxInt
	if cfg.ShardNodes > 0 {
		ownItems = per * int(node.PageSize) // pages are full but the last
	}
	seen := 0
	return cluster.EachItem(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		l, err := kube.CoreV1().Nodes().List(ctx, o)
		if err != nil || cfg.ShardNodes == 0 {
			return l, err
		}
		pages++
		if pages%per == 0 && l.Continue != "" {
			if cfg.Shard != nil {
				l.Continue = "" // this shard's last page: the next shard reads on
			} else {
				r.Shards = append(r.Shards, l.Continue)
			}
		}
		return l, nil
	}, node.PageSize, opts, func(o runtime.Object) (bool, error) {
		n, ok := o.(*corev1.Node)
		if !ok {
			return false, fmt.Errorf("unexpected %T in list", o)
		}
		r.names[n.Name] = true
		r.ids[node.ProviderInstanceID(n.Spec.ProviderID)] = true
		if seen < ownItems {
			r.own[n.Name] = true
			r.Nodes = append(r.Nodes, slimNode(n))
		} else {
			r.Elsewhere++
		}
		seen++
		return false, nil
	})
}

// list reads every item of a list page by page (client-go's pager, size a
// page, one page held at a time) and keeps of each only what keep returns:
// what the plan uses, not the page.
func list[T, K any](ctx context.Context, fn func(context.Context, metav1.ListOptions) (runtime.Object, error), size int64, keep func(*T) K) ([]K, error) {
	var items []K
	err := cluster.EachItem(ctx, fn, size, metav1.ListOptions{}, func(o runtime.Object) (bool, error) {
		item, ok := any(o).(*T)
		if !ok {
			return false, fmt.Errorf("unexpected %T in list", o)
		}
		items = append(items, keep(item))
		return false, nil
	})
	return items, err
}

// slimNode is what the plan reads of a Node: its name, UID, creation,
// providerID, node-drainer's annotation and the Ready condition. Labels,
// images, addresses and managed fields (most of a Node's bytes) are not
// kept.
func slimNode(n *corev1.Node) corev1.Node {
	out := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, CreationTimestamp: n.CreationTimestamp},
		Spec: corev1.NodeSpec{ProviderID: n.Spec.ProviderID}}
	if v, ok := n.Annotations[node.AnnotationOwned]; ok {
		out.Annotations = map[string]string{node.AnnotationOwned: v}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime}}
		}
	}
	return out
}

// slimAttachment is what the plan and an orphan's delete read of a
// VolumeAttachment: name, UID, node and volume.
func slimAttachment(va *storagev1.VolumeAttachment) storagev1.VolumeAttachment {
	return storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: va.Name, UID: va.UID},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: va.Spec.Attacher, NodeName: va.Spec.NodeName,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: va.Spec.Source.PersistentVolumeName}}}
}

func waiting(i astypes.Instance) bool {
	s := string(i.LifecycleState)
	return s == stateTerminatingWait || s == statePendingWait || s == stateWarmedPendingWait
}

// readInstances reads EC2's view of what may be wrong, never of every
// instance: the cluster's instances that are not running (one filtered
// call, small when all is well), then, by id, the instances of the nodes
// that look wrong from the cluster's side — NotReady, or holding
// node-drainer's marks — and EC2 did not list as not running. An instance
// EC2 does not know at all is gone. A Ready node whose instance vanished
// from EC2 is seen once its kubelet's silence makes it NotReady.
func (r *Readings) readInstances(ctx context.Context, api instance.EC2API, cfg Config) error {
	all, err := instance.List(ctx, api, cfg.clock(), "tag-key", []string{cfg.ClusterTagKey}, instance.NotRunning())
	if err != nil {
		return err
	}
	var suspects []string
	for _, n := range r.Nodes {
		id := node.ProviderInstanceID(n.Spec.ProviderID)
		if _, known := all[id]; known || id == "" {
			continue
		}
		_, marked := node.Marks(&n)
		if _, notReady := notReadySince(n); notReady || marked {
			suspects = append(suspects, id)
		}
	}
	if len(suspects) > 0 {
		more, err := instance.List(ctx, api, cfg.clock(), "instance-id", suspects)
		if err != nil {
			return err
		}
		maps.Copy(all, more)
		seen := cfg.clock().Now()
		for _, id := range suspects {
			if _, ok := all[id]; !ok {
				all[id] = instance.Gone(id, seen)
			}
		}
	}
	r.Instances = all
	// the nodes that attachments name and the cluster does not have
	var names []string
	for _, va := range r.Attachments {
		if !r.hasNode(va.Spec.NodeName) && !slices.Contains(names, va.Spec.NodeName) {
			names = append(names, va.Spec.NodeName)
		}
	}
	if len(names) > 0 {
		byName, err := instance.List(ctx, api, cfg.clock(), "private-dns-name", names)
		if err != nil {
			return err
		}
		for _, i := range byName {
			r.ByDNSName[i.PrivateDNSName] = append(r.ByDNSName[i.PrivateDNSName], i)
		}
	}
	return nil
}
