package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
)

func podsLW(c *fake.Clientset) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Pods("ns").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Pods("ns").Watch(ctx, o)
		},
	}
}

func empty(s cache.Store) (bool, error) { return len(s.List()) == 0, nil }

// watching signals on the returned channel each time a watch is opened.
func watching(c *fake.Clientset) <-chan struct{} {
	ch := make(chan struct{}, 10)
	c.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		ch <- struct{}{}
		return false, nil, nil
	})
	return ch
}

// Until's subtests run in synctest bubbles: the informers' waits (a
// re-list's backoff, a deadline) are on the bubble's clock, exact and
// without wall time however loaded the machine.
func TestUntil(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))

	t.Run("done at once after the list", clustertest.InBubble(func(t *testing.T) {
		c := fake.NewClientset()
		if err := Until(t.Context(), podsLW(c), &corev1.Pod{}, empty); err != nil {
			t.Fatal(err)
		}
	}))
	t.Run("done on a watch event", clustertest.InBubble(func(t *testing.T) {
		c := fake.NewClientset(pod)
		opened := watching(c)
		go func() {
			<-opened
			_ = c.CoreV1().Pods("ns").Delete(context.Background(), "a", metav1.DeleteOptions{})
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := Until(ctx, podsLW(c), &corev1.Pod{}, empty); err != nil {
			t.Fatal(err)
		}
	}))
	t.Run("timeout", clustertest.InBubble(func(t *testing.T) {
		c := fake.NewClientset(pod)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		err := Until(ctx, podsLW(c), &corev1.Pod{}, empty)
		if !errors.Is(err, ErrWaitTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want a timeout", err)
		}
	}))
	for _, verb := range []string{"list", "watch"} {
		t.Run(verb+" forbidden is an error, at once", clustertest.InBubble(func(t *testing.T) {
			c := fake.NewClientset(pod)
			c.PrependReactor(verb, "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, forbidden })
			c.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
				if verb == "watch" {
					return true, nil, forbidden
				}
				return false, nil, nil
			})
			if verb == "watch" {
				c.ReactionChain = c.ReactionChain[1:] // the list works
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			begin := time.Now()
			err := Until(ctx, podsLW(c), &corev1.Pod{}, empty)
			if !apierrors.IsForbidden(err) || errors.Is(err, ErrWaitTimeout) {
				t.Fatalf("err = %v, want the 403", err)
			}
			if time.Since(begin) > 5*time.Second {
				t.Fatalf("took %s: the 403 was retried", time.Since(begin))
			}
		}))
	}
	t.Run("a transient list failure is listed again", clustertest.InBubble(func(t *testing.T) {
		c := fake.NewClientset()
		var lists atomic.Int32
		c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if lists.Add(1) == 1 {
				return true, nil, apierrors.NewInternalError(errors.New("etcd"))
			}
			return false, nil, nil
		})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := Until(ctx, podsLW(c), &corev1.Pod{}, empty); err != nil {
			t.Fatal(err)
		}
		if lists.Load() < 2 {
			t.Fatalf("%d lists, want a second one", lists.Load())
		}
	}))
	t.Run("done's error ends the wait", clustertest.InBubble(func(t *testing.T) {
		c := fake.NewClientset(pod)
		boom := errors.New("boom")
		err := Until(t.Context(), podsLW(c), &corev1.Pod{}, func(cache.Store) (bool, error) { return false, boom })
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
	}))
}

func TestFinal(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{apierrors.NewForbidden(gr, "", errors.New("x")), true},
		{apierrors.NewNotFound(gr, ""), true},
		{apierrors.NewBadRequest("selector"), true},
		{apierrors.NewResourceExpired("too old"), false},
		// deprecated for NewResourceExpired, but a server may still answer
		// with reason Gone, and Final must read it as the expired watch it is
		{apierrors.NewGone("gone"), false}, //nolint:staticcheck // SA1019: see above
		{apierrors.NewUnauthorized("token"), false},
		{apierrors.NewTooManyRequests("slow", 1), false},
		{apierrors.NewInternalError(errors.New("x")), false},
		{context.DeadlineExceeded, false},
	} {
		if got := Final(tc.err); got != tc.want {
			t.Errorf("Final(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// An informer over an empty list (no PDB in the namespace) syncs though its
// store never changes; one that is refused for good does not.
func TestWaitSynced(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if in := Inform(ctx, podsLW(fake.NewClientset()), &corev1.Pod{}); !in.WaitSynced(ctx) {
		t.Errorf("empty list: not synced (err %v)", in.Err())
	}
	c := fake.NewClientset()
	c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
	})
	in := Inform(ctx, podsLW(c), &corev1.Pod{})
	if in.WaitSynced(ctx) || !apierrors.IsForbidden(in.Err()) {
		t.Errorf("forbidden list: synced %v, err %v; want not synced, forbidden", in.Synced(), in.Err())
	}
	if ctx.Err() != nil {
		t.Error("WaitSynced waited until the context ended")
	}
}
