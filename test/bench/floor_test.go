package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/test/harness"
)

// stormFloor measures the control plane alone on the loose storm's scene,
// with no drainer: the targets cordoned, then maxUnavailable pods of each
// Deployment deleted at once (grace 0), the wave a drainer that cost
// nothing would evict first. For each Deployment, the time from the
// deletes until maxUnavailable replacements run Ready on the spares; it
// returns the 95th percentile over the Deployments. A loose-PDB drain of a
// node cannot end sooner: its second wave waits for the first one's
// replacements.
func stormFloor(b *testing.B, ctx context.Context, n, maxUnavailable int) float64 {
	b.Helper()
	s, _ := stormScene(b, ctx, nil, "floor", n, maxUnavailable)
	defer s.remove(context.WithoutCancel(ctx))
	targets := s.insts[:n]
	if err := eachInstance(targets, func(_ int, t harness.Instance) error {
		return env.SetUnschedulable(ctx, t.PrivateDNSName, true)
	}); err != nil {
		b.Fatal(err)
	}
	spare := map[string]bool{}
	for _, i := range s.insts[n:] {
		spare[i.PrivateDNSName] = true
	}
	replaced, stop, err := watchReplacements(ctx, s.name, spare, maxUnavailable)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	zero := int64(0)
	start := time.Now()
	if err := eachInstance(targets, func(i int, _ harness.Instance) error {
		app := fmt.Sprintf("app%d", i)
		pods, err := env.Client.CoreV1().Pods(s.name).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return err
		}
		for _, p := range pods.Items[:min(maxUnavailable, len(pods.Items))] {
			if err := env.Client.CoreV1().Pods(s.name).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	var took []float64
	for i := range targets {
		at, err := replaced(fmt.Sprintf("app%d", i), 10*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		took = append(took, at.Sub(start).Seconds())
	}
	p95 := percentile95(took)
	progress("storm floor: %d nodes × %d pods, %d pods of each Deployment deleted at once, no drainer: replaced and Ready after p50 %.2f s, p95 %.2f s, max %.2f s",
		n, stormPods, maxUnavailable, took[len(took)/2], p95, took[len(took)-1])
	return p95
}

// watchReplacements watches the pods of namespace ns; replaced(app, limit)
// returns when want pods of app first ran Ready on one of the nodes in on.
func watchReplacements(ctx context.Context, ns string, on map[string]bool, want int) (replaced func(app string, limit time.Duration) (time.Time, error), stop func(), err error) {
	var mu sync.Mutex
	ready := map[string]map[string]bool{} // app -> pods seen Ready on the nodes
	at := map[string]time.Time{}          // app -> when the want-th was seen
	var changed cluster.Signal
	stop, err = watchPods(ctx, ns, func(p *corev1.Pod, gone bool) {
		if gone || !on[p.Spec.NodeName] || !podReady(p) {
			return
		}
		app := p.Labels["app"]
		mu.Lock()
		if ready[app] == nil {
			ready[app] = map[string]bool{}
		}
		ready[app][p.Name] = true
		if len(ready[app]) >= want && at[app].IsZero() {
			at[app] = time.Now()
		}
		mu.Unlock()
		changed.Broadcast()
	})
	if err != nil {
		return nil, nil, err
	}
	replaced = func(app string, limit time.Duration) (time.Time, error) {
		deadline := time.After(limit)
		for {
			ch := changed.C()
			mu.Lock()
			t := at[app]
			mu.Unlock()
			if !t.IsZero() {
				return t, nil
			}
			select {
			case <-ch:
			case <-deadline:
				return time.Time{}, fmt.Errorf("%s: %d replacements not Ready after %v", app, want, limit)
			}
		}
	}
	return replaced, stop, nil
}
