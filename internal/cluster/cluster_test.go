package cluster

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestRequestLimitSparesWatches: the per-request limit ends a request that
// hangs, not a watch that outlives it (client-go's Config.Timeout ends both).
//
// Real time and a real server (no bubble: net/http's timers and sockets):
// the hanging list hangs for 20 limits and must end within 10 (it hung for
// 3 and had to end within 3), so that a loaded machine's pauses are no
// failure while a limit that does not apply, or applies ten times late,
// still is one.
func TestRequestLimitSparesWatches(t *testing.T) {
	const limit = 200 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			if r.URL.Query().Get("labelSelector") == "slow" {
				select {
				case <-r.Context().Done():
				case <-time.After(20 * limit):
				}
			}
			fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
			return
		}
		// a watch: one event at once, one after three times the limit
		for i, delay := range []time.Duration{0, 3 * limit} {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(delay):
			}
			fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p%d","namespace":"default","resourceVersion":"%d"}}}`+"\n", i, i+2)
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, srv.URL)
	cfg, err := RESTConfig(context.Background(), Source{Kubeconfig: []byte(kubeconfig), QPS: 100, Burst: 100, RequestLimit: limit}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClientset(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	if _, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("a quick list: %v", err)
	}
	start := time.Now()
	if _, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "slow"}); err == nil {
		t.Fatalf("a list that hangs for %v returned no error; want the %v limit to end it", 20*limit, limit)
	}
	if took := time.Since(start); took >= 10*limit {
		t.Errorf("the hanging list ended after %v, not at the %v limit", took, limit)
	}

	w, err := c.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i := range 2 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %d events; the request limit must not end a watch", i)
			}
			if ev.Type != watch.Added {
				t.Fatalf("event %d: %s %v", i, ev.Type, ev.Object)
			}
		case <-time.After(10 * limit):
			t.Fatalf("no event %d", i)
		}
	}
}
