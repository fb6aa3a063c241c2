package clustertest

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// KeepNodeStatus makes the fake clientset keep a Node's status on an
// update of the Node, as the apiserver does (the status is the status
// subresource's to write: nodes/status); the fake writes the object whole,
// so that an update made from a Node read before a status patch would
// undo the patch.
func KeepNodeStatus(c *fake.Clientset) {
	c.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u, ok := a.(k8stesting.UpdateAction)
		if !ok || a.GetSubresource() != "" {
			return false, nil, nil
		}
		n, ok := u.GetObject().(*corev1.Node)
		if !ok {
			return false, nil, nil
		}
		if cur, err := c.Tracker().Get(a.GetResource(), "", n.Name); err == nil {
			n.Status = cur.(*corev1.Node).Status
		}
		return false, nil, nil
	})
}
