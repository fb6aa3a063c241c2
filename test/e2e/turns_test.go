package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/test/harness"
)

// TestSharedPDBDrainsTakeTurns: three nodes each run one pod of a
// Deployment spread over them, under one PDB; their three terminate hooks
// arrive at once, while the PDB allows no disruption. Each drain announces
// its pod on its lease (the function's own identity lists and watches the
// leases). Then the PDB allows one disruption at a time: the pods go one by
// one in the order the drains announced (without turns, each drain
// draws a random jitter and the first to wake goes: any order), the PDB's
// floor holds, and every hook is completed with CONTINUE.
func TestSharedPDBDrainsTakeTurns(t *testing.T) { sharedPDBTurns(t, false) }

// TestSpotWarningDrainsTakeTurns: the same with three spot interruption
// warnings and no hook: each drain holds its warning's lease
// (lease.AdvisoryName) and takes its turn by it. Before advisory drains
// held leases, they announced nothing and went on the jitter.
func TestSpotWarningDrainsTakeTurns(t *testing.T) { sharedPDBTurns(t, true) }

func sharedPDBTurns(t *testing.T, spot bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const n = 3
	name, leaseName := "turns", lease.Name
	if spot {
		name = "turns-spot"
		leaseName = func(id string) string { return lease.AdvisoryName("spot-interruption", id) }
	}
	s := newScene(t, ctx, name, n+2, harness.ASGSpec{})
	targets, spares := s.insts[:n], s.insts[n:]
	cordon := func(on bool) {
		for _, i := range spares {
			if err := env.SetUnschedulable(ctx, i.PrivateDNSName, on); err != nil {
				t.Fatal(err)
			}
		}
	}
	cordon(true)
	w := s.workload("web", n)
	w.Spread = true
	if _, err := env.Deployment(ctx, w, false); err != nil {
		t.Fatal(err)
	}
	pods, err := env.WaitPodsRunning(ctx, s.ns, "app=web", n, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	podOn := map[string]string{} // node → its pod
	for _, p := range pods {
		podOn[p.Spec.NodeName] = p.Name
	}
	if len(podOn) != n {
		t.Fatalf("the Deployment's pods are not one per target: %v", podOn)
	}
	cordon(false)
	pdb, err := env.PDB(ctx, w, 0, 0) // no disruption allowed until the drains all wait
	if err != nil {
		t.Fatal(err)
	}
	floor := pdbFloor(ctx, s.ns, "app=web")

	// the order the pods went in: a pod's first deletion timestamp
	var (
		mu   sync.Mutex
		gone []string
	)
	pw, err := env.Client.CoreV1().Pods(s.ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Stop()
	seen := map[types.UID]bool{}
	go func() {
		for e := range pw.ResultChan() {
			p, ok := e.Object.(*corev1.Pod)
			if !ok || seen[p.UID] || (p.DeletionTimestamp == nil && e.Type != watch.Deleted) {
				continue
			}
			seen[p.UID] = true
			mu.Lock()
			gone = append(gone, p.Name)
			mu.Unlock()
		}
	}()

	outs := make([]chan error, n)
	for i, inst := range targets {
		var payload []byte
		if spot {
			payload, err = harness.EventFile("spot-interruption.json", map[string]string{"instance-id": inst.ID})
		} else {
			payload, err = env.StartTerminating(ctx, s.asg, inst, fmt.Sprintf("token-turns-%d", i))
		}
		if err != nil {
			t.Fatal(err)
		}
		rt := s.function(ctx, 2*time.Minute)
		outs[i] = make(chan error, 1)
		go func() {
			out, err := harness.Invoke(ctx, rt, payload)
			if err == nil && (out.Action != "drained" || !spot && out.LifecycleResult != "CONTINUE") {
				err = fmt.Errorf("outcome %+v: want drained (and for a hook CONTINUE)", out)
			}
			outs[i] <- err
		}()
	}

	// every drain announces its pod under the shared PDB on its lease
	leases := func() []coordinationv1.Lease {
		var out []coordinationv1.Lease
		for _, inst := range targets {
			l, err := env.Client.CoordinationV1().Leases("node-drainer").Get(ctx, leaseName(inst.ID), metav1.GetOptions{})
			if err == nil {
				out = append(out, *l)
			}
		}
		return out
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		ls := leases()
		if len(ls) < n {
			return false, nil
		}
		for i, l := range ls {
			var shared map[string][]string
			if json.Unmarshal([]byte(l.Annotations[lease.AnnotationShared]), &shared) != nil ||
				!slices.Equal(shared[s.ns+"/web"], []string{podOn[targets[i].PrivateDNSName]}) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		for _, l := range leases() {
			t.Logf("lease %s: %v", l.Name, l.Annotations)
		}
		t.Fatalf("the drains did not all announce their pod under %s/web on their leases", s.ns)
	}
	// the order they announced in, as every drain sees it
	ls := leases()
	slices.SortFunc(ls, func(a, b coordinationv1.Lease) int {
		if c := cmp.Compare(a.Annotations[lease.AnnotationTurnSince], b.Annotations[lease.AnnotationTurnSince]); c != 0 {
			return c // RFC 3339 in UTC, nanoseconds: by time
		}
		return cmp.Compare(a.Name, b.Name)
	})
	var want []string
	for _, l := range ls {
		for _, inst := range targets {
			if leaseName(inst.ID) == l.Name {
				want = append(want, podOn[inst.PrivateDNSName])
			}
		}
	}

	allowOne := []byte(`{"spec":{"maxUnavailable":1}}`)
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(s.ns).Patch(ctx, pdb.Name, types.MergePatchType, allowOne, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range outs {
		if err := <-outs[i]; err != nil {
			t.Errorf("hook of %s: %v", targets[i].ID, err)
		}
	}
	if f := floor(); f < n-1 {
		t.Errorf("ready web pods fell to %d during the drains, below the PDB's floor of %d", f, n-1)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(gone, want) {
		t.Errorf("the pods were evicted in the order %v, want the drains' announcement order %v", gone, want)
	}
	for _, inst := range targets {
		ok, failed := s.completions(ctx, inst.ID)
		completions := 1
		if spot {
			completions = 0 // a warning has no hook
		}
		if len(ok) != completions || len(failed) != 0 {
			t.Errorf("%s: completions %+v, failed %+v: want %d", inst.ID, ok, failed, completions)
		}
	}
	for _, l := range leases() {
		if a, ok := l.Annotations[lease.AnnotationShared]; ok {
			t.Errorf("lease %s still announces %s after its drain", l.Name, a)
		}
	}
}
