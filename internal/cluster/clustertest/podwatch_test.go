package clustertest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
)

func testPod(ns, name string, uid types.UID) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid}}
}

// drained reads what a watch holds already.
func drained(w watch.Interface) []string {
	var got []string
	for {
		select {
		case ev := <-w.ResultChan():
			got = append(got, string(ev.Type)+" "+ev.Object.(*corev1.Pod).Name)
		default:
			return got
		}
	}
}

// A watch opened after a deletion is told of it, in its namespace only,
// and not of a pod whose name another pod has taken since; a deletion
// after the watch opened is delivered once.
func TestPodWatchesReplayDeletions(t *testing.T) {
	c := fake.NewClientset(testPod("apps", "web-1", "a"), testPod("apps", "web-2", "b"), testPod("other", "db-0", "c"))
	pods := WatchPods(c)
	select {
	case <-pods.Watched():
		t.Fatal("watched before any watch opened")
	default:
	}
	for _, p := range [][2]string{{"apps", "web-1"}, {"apps", "web-2"}, {"other", "db-0"}} {
		if err := pods.Delete(p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := pods.Delete("apps", "web-1"); err == nil {
		t.Error("a second deletion of web-1 succeeded")
	}
	// web-2's name is taken by a new pod before the watch opens
	if err := c.Tracker().Add(testPod("apps", "web-2", "b2")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := c.CoreV1().Pods("apps").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case <-pods.Watched():
	default:
		t.Error("not watched after a watch opened")
	}
	if got := drained(w); len(got) != 1 || got[0] != "DELETED web-1" {
		t.Errorf("watch of apps opened after the deletions told %v: want [DELETED web-1]", got)
	}
	all, err := c.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Stop()
	if got := drained(all); len(got) != 2 || got[0] != "DELETED web-1" || got[1] != "DELETED db-0" {
		t.Errorf("watch of all namespaces told %v: want web-1's and db-0's deletions", got)
	}
	if err := pods.Delete("apps", "web-2"); err != nil {
		t.Fatal(err)
	}
	if got := drained(w); len(got) != 1 || got[0] != "DELETED web-2" {
		t.Errorf("a deletion after the watch opened told %v: want [DELETED web-2] once", got)
	}
}
