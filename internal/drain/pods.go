package drain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

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

// keepList is the drainer's client as kubectl's Helper sees it when it
// plans: its listing of pods is kept, every page, in into (the Helper keeps
// only its filtered copy), so that the drain's watch of the node's pods
// starts where the plan's read ended instead of listing them again.
type keepList struct {
	kubernetes.Interface
	into *corev1.PodList
}

func (c keepList) CoreV1() typedcorev1.CoreV1Interface {
	return keepCore{c.Interface.CoreV1(), c.into}
}

type keepCore struct {
	typedcorev1.CoreV1Interface
	into *corev1.PodList
}

func (c keepCore) Pods(namespace string) typedcorev1.PodInterface {
	return keepPods{c.CoreV1Interface.Pods(namespace), c.into}
}

type keepPods struct {
	typedcorev1.PodInterface
	into *corev1.PodList
}

// List lists, and keeps the answer: a first page starts the list (its
// resourceVersion is the snapshot's; the further pages, asked with its
// continue token, are of the same snapshot).
func (c keepPods) List(ctx context.Context, o metav1.ListOptions) (*corev1.PodList, error) {
	l, err := c.PodInterface.List(ctx, o)
	if err != nil {
		return l, err
	}
	if o.Continue == "" {
		c.into.Items, c.into.ResourceVersion = nil, l.ResourceVersion
	}
	c.into.Items = append(c.into.Items, l.Items...)
	return l, nil
}
