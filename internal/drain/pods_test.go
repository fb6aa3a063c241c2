package drain

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
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

// The drain's watch of the node's pods starts where the plan's read ended:
// every page of that read is in its view, it asks no second list, and its
// watch is asked from the read's resourceVersion (the first page's: the
// further pages are of its snapshot). A read without a resourceVersion is
// not used: the pods are listed again.
func TestWatchStartsAtThePlansRead(t *testing.T) {
	a, b, c3 := pod("apps", "a"), pod("apps", "b"), pod("web", "c")
	for _, rv := range []string{"41", ""} {
		c := fake.NewClientset()
		var mu sync.Mutex // the reactors run on the informer's goroutines
		var lists int
		var watchedFrom []string
		c.PrependReactor("list", "pods", func(act k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			lists++
			if act.(k8stesting.ListActionImpl).ListOptions.Continue == "" {
				l := &corev1.PodList{Items: []corev1.Pod{*a, *b}}
				l.ResourceVersion, l.Continue = rv, "page-2"
				return true, l, nil
			}
			l := &corev1.PodList{Items: []corev1.Pod{*c3}}
			l.ResourceVersion = rv + "-later" // a further page's own is not the snapshot's
			return true, l, nil
		})
		c.PrependWatchReactor("pods", func(act k8stesting.Action) (bool, watch.Interface, error) {
			mu.Lock()
			defer mu.Unlock()
			watchedFrom = append(watchedFrom, act.(k8stesting.WatchActionImpl).WatchRestrictions.ResourceVersion)
			return true, watch.NewFake(), nil
		})
		d := New(c, Options{EvictUnmanaged: true}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		read := &corev1.PodList{}
		planned, _, err := d.plan(ctx, nodeName, read)
		if err != nil || len(planned) != 3 || len(read.Items) != 3 || read.ResourceVersion != rv {
			t.Fatalf("rv %q: plan %d pods, read %+v, %v; want 3 pods, a read of 3 at %q", rv, len(planned), read, err, rv)
		}
		r := d.start(ctx, nodeName, planned, read)
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return len(watchedFrom) > 0, nil
		}); err != nil {
			t.Fatalf("rv %q: no watch of the pods", rv)
		}
		mu.Lock()
		n, from := lists, watchedFrom[0]
		mu.Unlock()
		switch {
		case rv != "" && (n != 2 || from != rv):
			t.Errorf("rv %q: %d lists (want the plan's 2 pages only), watch from %q (want %q)", rv, n, from, rv)
		case rv == "" && n != 4:
			t.Errorf("a read without resourceVersion: %d lists, want it listed again (4)", n)
		}
		if n := len(r.pods.List()); n != 3 {
			t.Errorf("rv %q: %d pods in the view, want the read's 3", rv, n)
		}
		r.stop()
		cancel()
	}
}
