package node

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// OfInstances finds the nodes of several instances in one paged list of
// the cluster's Nodes (Find's consistent read, PageSize a page), by
// spec.providerID: one list for all, not one per instance. It stops once
// every instance's node is found; an instance with none is not in the map.
func OfInstances(ctx context.Context, c kubernetes.Interface, ids sets.Set[string]) (map[string]*corev1.Node, error) {
	found := map[string]*corev1.Node{}
	if ids.Len() == 0 {
		return found, nil
	}
	err := cluster.RetryIf(ctx, cluster.RetriableList, func() error {
		clear(found)
		return cluster.EachItem(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Nodes().List(ctx, o)
		}, PageSize, metav1.ListOptions{}, func(o runtime.Object) (bool, error) {
			n := o.(*corev1.Node)
			if id := ProviderInstanceID(n.Spec.ProviderID); ids.Has(id) {
				found[id] = n.DeepCopy() // not the page's: the page goes
			}
			return len(found) == ids.Len(), nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return found, nil
}
