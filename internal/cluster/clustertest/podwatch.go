package clustertest

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// replayed is how many deleted pods PodWatches keeps to replay: the last
// ones. Each replayed deletion fills the new watch's buffer
// (watch.DefaultChanSize, 100, and the fake panics past it) before anyone
// reads it.
const replayed = 50

// PodWatches serves a fake clientset's watches of pods, and tells each
// watch opened of the pods deleted before it (through Delete), as a watch
// from the list's resourceVersion would be told of the deletions since.
// The fake's watches start from now, not from the list's resourceVersion
// as the apiserver's do: a pod deleted between a drain's list and its
// watch went unseen, and the drain waited for it until its deadline (3 to
// 5 in 300 runs of the drain's tests; a continuation's drain, another
// node's, the same). A deletion of a pod the watcher never listed is a
// no-op to an informer; one whose name another pod has taken since is not
// replayed (the list had the newcomer, not the deletion). A deletion is
// wholly before a watch opens (replayed) or after (delivered), never both.
type PodWatches struct {
	c       *fake.Clientset
	mu      sync.Mutex
	gone    []runtime.Object // the last pods deleted, oldest first
	watched chan struct{}
	once    sync.Once
}

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// WatchPods serves c's watches of pods with a PodWatches.
func WatchPods(c *fake.Clientset) *PodWatches {
	w := &PodWatches{c: c, watched: make(chan struct{})}
	c.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		pw, err := c.Tracker().Watch(podsGVR, a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		for _, p := range w.gone { // into the new watch's buffer
			if w.replays(p, a.GetNamespace()) {
				pw.(interface{ Delete(runtime.Object) }).Delete(p)
			}
		}
		w.once.Do(func() { close(w.watched) })
		return true, pw, nil
	})
	return w
}

// replays reports whether a watch of namespace ns (all: "") is told of
// the deleted pod p: p is in ns, and no pod has taken its name since.
func (w *PodWatches) replays(p runtime.Object, ns string) bool {
	m := p.(metav1.Object)
	if ns != metav1.NamespaceAll && m.GetNamespace() != ns {
		return false
	}
	now, err := w.c.Tracker().Get(podsGVR, m.GetNamespace(), m.GetName())
	return err != nil || now.(metav1.Object).GetUID() == m.GetUID()
}

// Delete deletes the pod, and tells each watch opened later of it.
func (w *PodWatches) Delete(ns, name string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, err := w.c.Tracker().Get(podsGVR, ns, name)
	if err == nil {
		err = w.c.Tracker().Delete(podsGVR, ns, name)
	}
	if err == nil {
		w.gone = append(w.gone, p)[max(0, len(w.gone)+1-replayed):]
	}
	return err
}

// Watched is closed once the first watch of pods is open.
func (w *PodWatches) Watched() <-chan struct{} { return w.watched }
