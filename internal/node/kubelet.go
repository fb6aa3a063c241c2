package node

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// KubeletRenewed is when the node's kubelet last renewed its Lease (in
// kube-node-lease, named after the node; zero: no Lease, or never renewed),
// read with retries until ctx ends.
func KubeletRenewed(ctx context.Context, c kubernetes.Interface, name string) (time.Time, error) {
	var l *coordinationv1.Lease
	err := cluster.Retry(ctx, func() (err error) {
		l, err = c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, err
	}
	return renewed(l), nil
}

func renewed(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// KubeletLease watches one node's kubelet Lease (list, then watch, by name).
type KubeletLease struct {
	*cluster.Informer
	name string
}

// WatchKubeletLease starts watching the node's kubelet Lease until ctx ends.
func WatchKubeletLease(ctx context.Context, c kubernetes.Interface, nodeName string) *KubeletLease {
	sel := fields.OneTermEqualSelector("metadata.name", nodeName).String()
	in := cluster.Inform(ctx, &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return c.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Watch(ctx, o)
		},
	}, &coordinationv1.Lease{})
	return &KubeletLease{Informer: in, name: nodeName}
}

// Renewed is when the watched Lease was last renewed, as last seen (zero:
// no Lease, or never renewed).
func (k *KubeletLease) Renewed() time.Time {
	if o, ok, _ := k.Store().GetByKey(corev1.NamespaceNodeLease + "/" + k.name); ok {
		return renewed(o.(*coordinationv1.Lease))
	}
	return time.Time{}
}
