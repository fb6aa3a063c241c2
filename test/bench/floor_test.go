package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/test/harness"
)

// stormFloor measures the control plane alone on a storm's scene, with no
// drainer: the targets cordoned, then each target's Deployment drained in
// waves the way a drainer that cost nothing would under its PDB:
// maxUnavailable of the pods left on the target deleted at once (grace 0,
// no eviction, no PDB status written), the next wave once as many
// replacements run Ready on the spares. For each Deployment, the time from
// the first deletes until the last wave's replacements are Ready; it returns
// the 95th percentile over the Deployments. A drain of the storm's nodes
// under those PDBs cannot end sooner on this machine.
func stormFloor(b *testing.B, ctx context.Context, n int, shape stormShape) float64 {
	b.Helper()
	if shape.shared {
		b.Fatal("stormFloor: one Deployment per node only")
	}
	maxUnavailable := shape.maxUnavailable(n)
	s, _ := stormScene(b, ctx, nil, "floor", n, shape)
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
	replaced, stop, err := watchReplacements(ctx, s.name, spare)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	zero := int64(0)
	took := make([]float64, n)
	waves := make([]int, n)
	start := time.Now()
	if err := eachInstance(targets, func(i int, t harness.Instance) error {
		app := fmt.Sprintf("app%d", i)
		for deleted := 0; ; {
			pods, err := env.Client.CoreV1().Pods(s.name).List(ctx, metav1.ListOptions{
				LabelSelector: "app=" + app, FieldSelector: "spec.nodeName=" + t.PrivateDNSName,
			})
			if err != nil {
				return err
			}
			left := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
			if len(left) == 0 {
				return nil
			}
			for _, p := range left[:min(maxUnavailable, len(left))] {
				if err := env.Client.CoreV1().Pods(s.name).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
					return err
				}
				deleted++
			}
			at, err := replaced(app, deleted, 10*time.Minute)
			if err != nil {
				return err
			}
			took[i], waves[i] = at.Sub(start).Seconds(), waves[i]+1
		}
	}); err != nil {
		b.Fatal(err)
	}
	p95 := percentile95(took) // sorts took
	progress("storm floor: %d nodes × %d pods, PDB maxUnavailable %d, no drainer: the pods deleted in waves (%d-%d), each once the last is replaced and Ready; all replaced after p50 %.2f s, p95 %.2f s, max %.2f s",
		n, stormPods, maxUnavailable, slices.Min(waves), slices.Max(waves), took[len(took)/2], p95, took[len(took)-1])
	return p95
}

// watchReplacements watches the pods of namespace ns; replaced(app, want,
// limit) returns when the want-th pod of app was first seen running Ready
// on one of the nodes in on.
func watchReplacements(ctx context.Context, ns string, on map[string]bool) (replaced func(app string, want int, limit time.Duration) (time.Time, error), stop func(), err error) {
	var mu sync.Mutex
	ready := map[string]map[string]bool{} // app -> pods seen Ready on the nodes
	at := map[string][]time.Time{}        // app -> when each of them was first seen Ready
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
		if !ready[app][p.Name] {
			ready[app][p.Name] = true
			at[app] = append(at[app], time.Now())
		}
		mu.Unlock()
		changed.Broadcast()
	})
	if err != nil {
		return nil, nil, err
	}
	replaced = func(app string, want int, limit time.Duration) (time.Time, error) {
		deadline := time.After(limit)
		for {
			ch := changed.C()
			mu.Lock()
			seen := at[app]
			mu.Unlock()
			if len(seen) >= want {
				return seen[want-1], nil
			}
			select {
			case <-ch:
			case <-deadline:
				return time.Time{}, fmt.Errorf("%s: %d of %d replacements Ready after %v", app, len(seen), want, limit)
			}
		}
	}
	return replaced, stop, nil
}
