package clustertest

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typedstoragev1 "k8s.io/client-go/kubernetes/typed/storage/v1"
)

// Outside wraps a clientset so that a test can delay a call in the caller's
// goroutine, before it reaches client-go's fake clientset.
//
// The fake holds its lock while any reactor runs (k8s.io/client-go/testing,
// Fake.Invokes): a reactor that sleeps or waits blocks every other call on
// the clientset meanwhile. Inside a testing/synctest bubble a goroutine
// waiting on that lock is not durably blocked, so the bubble's clock never
// moves again and the sleeping reactor never wakes: the test hangs until
// its timeout. Before runs outside the lock, where a time.Sleep is a
// durable block like any other.
//
// The wrapped calls are Get and Delete of Nodes, Pods and
// VolumeAttachments; every other call goes to the clientset unchanged.
type Outside struct {
	kubernetes.Interface
	// Before runs before each wrapped call, in the caller's goroutine:
	// verb is "get" or "delete", resource "nodes", "pods" or
	// "volumeattachments", name the object's.
	Before func(verb, resource, name string)
}

func (o Outside) before(verb, resource, name string) {
	if o.Before != nil {
		o.Before(verb, resource, name)
	}
}

// CoreV1 wraps Nodes and Pods.
func (o Outside) CoreV1() typedcorev1.CoreV1Interface {
	return outsideCore{o.Interface.CoreV1(), o}
}

// StorageV1 wraps VolumeAttachments.
func (o Outside) StorageV1() typedstoragev1.StorageV1Interface {
	return outsideStorage{o.Interface.StorageV1(), o}
}

type outsideCore struct {
	typedcorev1.CoreV1Interface
	o Outside
}

func (c outsideCore) Nodes() typedcorev1.NodeInterface {
	return outsideNodes{c.CoreV1Interface.Nodes(), c.o}
}

func (c outsideCore) Pods(namespace string) typedcorev1.PodInterface {
	return outsidePods{c.CoreV1Interface.Pods(namespace), c.o}
}

type outsideNodes struct {
	typedcorev1.NodeInterface
	o Outside
}

func (n outsideNodes) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error) {
	n.o.before("get", "nodes", name)
	return n.NodeInterface.Get(ctx, name, opts)
}

func (n outsideNodes) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	n.o.before("delete", "nodes", name)
	return n.NodeInterface.Delete(ctx, name, opts)
}

type outsidePods struct {
	typedcorev1.PodInterface
	o Outside
}

func (p outsidePods) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error) {
	p.o.before("get", "pods", name)
	return p.PodInterface.Get(ctx, name, opts)
}

func (p outsidePods) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	p.o.before("delete", "pods", name)
	return p.PodInterface.Delete(ctx, name, opts)
}

type outsideStorage struct {
	typedstoragev1.StorageV1Interface
	o Outside
}

func (s outsideStorage) VolumeAttachments() typedstoragev1.VolumeAttachmentInterface {
	return outsideAttachments{s.StorageV1Interface.VolumeAttachments(), s.o}
}

type outsideAttachments struct {
	typedstoragev1.VolumeAttachmentInterface
	o Outside
}

func (a outsideAttachments) Get(ctx context.Context, name string, opts metav1.GetOptions) (*storagev1.VolumeAttachment, error) {
	a.o.before("get", "volumeattachments", name)
	return a.VolumeAttachmentInterface.Get(ctx, name, opts)
}

func (a outsideAttachments) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	a.o.before("delete", "volumeattachments", name)
	return a.VolumeAttachmentInterface.Delete(ctx, name, opts)
}
