package drain

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// PodsOn lists the node's pods in every namespace, by spec.nodeName, and
// says so when it cannot.
func TestPodsOn(t *testing.T) {
	on := func(ns, name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	c := fake.NewClientset(on("a", "p1", "n1"), on("b", "p2", "n1"), on("a", "p3", "n2"))
	var selector string
	c.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		selector = a.(k8stesting.ListAction).GetListRestrictions().Fields.String()
		return false, nil, nil
	})
	pods, err := PodsOn(context.Background(), c, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if selector != "spec.nodeName=n1" {
		t.Errorf("field selector %q, want spec.nodeName=n1", selector)
	}
	// the fake ignores field selectors: what matters is that all namespaces were asked
	var names []string
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if !slices.Contains(names, "a/p1") || !slices.Contains(names, "b/p2") {
		t.Errorf("pods %v: want a/p1 and b/p2", names)
	}
	c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", nil)
	})
	if _, err := PodsOn(context.Background(), c, "n1"); !apierrors.IsForbidden(err) {
		t.Errorf("err %v: want the 403, wrapped", err)
	}
}
