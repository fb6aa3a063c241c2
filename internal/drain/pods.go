package drain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// PodsOn lists the pods bound to the node, in every namespace, with retries
// until ctx ends: what is on the node now, whatever a drain planned.
func PodsOn(ctx context.Context, c kubernetes.Interface, node string) ([]corev1.Pod, error) {
	var pods *corev1.PodList
	err := cluster.Retry(ctx, func() (err error) {
		pods, err = c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing pods of node %s: %w", node, err)
	}
	return pods.Items, nil
}
