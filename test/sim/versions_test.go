package sim

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// A watch started at a list's resourceVersion sees every write after the
// list, a deletion between the two included, and nothing before it; each
// write's resourceVersion is the next of one sequence, the list's the last.
func TestWatchFromAList(t *testing.T) {
	v := newVersioned()
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name}}
	}
	for _, name := range []string{"a", "b", "c"} {
		if err := v.Add(pod(name)); err != nil {
			t.Fatal(err)
		}
	}
	list, err := v.List(gvrPods, corev1.SchemeGroupVersion.WithKind("Pod"), "")
	if err != nil {
		t.Fatal(err)
	}
	l, _ := meta.ListAccessor(list)
	if l.GetResourceVersion() != "3" {
		t.Fatalf("list at resourceVersion %q, want 3 (three writes)", l.GetResourceVersion())
	}
	// between the list and the watch: a is deleted, b changed
	if err := v.Delete(gvrPods, "db", "a"); err != nil {
		t.Fatal(err)
	}
	b := pod("b")
	b.Labels = map[string]string{"changed": "yes"}
	if err := v.Update(gvrPods, b, "db"); err != nil {
		t.Fatal(err)
	}
	from, _ := strconv.ParseUint(l.GetResourceVersion(), 10, 64)
	w := v.WatchFrom(gvrPods, "db", from)
	defer w.Stop()
	if err := v.Delete(gvrPods, "db", "c"); err != nil { // after the watch began
		t.Fatal(err)
	}
	want := []string{"DELETED a 4", "MODIFIED b 5", "DELETED c 6"}
	for i, wanted := range want {
		select {
		case ev := <-w.ResultChan():
			m, _ := meta.Accessor(ev.Object)
			if got := string(ev.Type) + " " + m.GetName() + " " + m.GetResourceVersion(); got != wanted {
				t.Errorf("event %d: %s, want %s", i, got, wanted)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d (%s) never came", i, wanted)
		}
	}
	select {
	case ev, ok := <-w.ResultChan():
		if ok {
			t.Errorf("an event more: %s %v", ev.Type, ev.Object)
		}
	case <-time.After(100 * time.Millisecond):
	}
	// another namespace, another resource: not this watch's
	if err := v.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "x"}}); err != nil {
		t.Fatal(err)
	}
	if err := v.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		t.Errorf("an event of another namespace or resource: %s %v", ev.Type, ev.Object)
	case <-time.After(100 * time.Millisecond):
	}
	_ = watch.Interface(w)
}
