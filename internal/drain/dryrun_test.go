package drain

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// DryRun asks the eviction API with DryRun [All] for every pod and deletes
// nothing; a pod its PDB refuses now is reported with the PDB, and a PDB
// that covers more of the node's pods than it allows would block.
func TestDryRun(t *testing.T) {
	held, pdb := heldPod() // apps/web-1, PDB apps/web allows 0
	other := pod("apps", "api-1", managed)
	spread := &policyv1.PodDisruptionBudget{ // covers api-1, allows 1: no wait
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "api"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1},
	}
	other.Labels = map[string]string{"app": "api"}
	c := fake.NewClientset(held, other, pdb, spread)
	var mu sync.Mutex
	var dryRuns []string
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if ev.DeleteOptions == nil || !slices.Equal(ev.DeleteOptions.DryRun, []string{metav1.DryRunAll}) {
			t.Errorf("eviction of %s without DryRun [All]: %+v", ev.Name, ev.DeleteOptions)
		}
		if ev.DeleteOptions == nil || ev.DeleteOptions.Preconditions == nil || ev.DeleteOptions.Preconditions.UID == nil {
			t.Errorf("eviction of %s names no UID", ev.Name)
		}
		mu.Lock()
		dryRuns = append(dryRuns, ev.Namespace+"/"+ev.Name)
		mu.Unlock()
		if ev.Name == held.Name {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return true, nil, nil
	})
	d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	plan, err := d.DryRun(ctx, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dryRuns)
	if !slices.Equal(dryRuns, []string{"apps/api-1", "apps/web-1"}) {
		t.Errorf("dry-run evictions %v", dryRuns)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "delete" || a.GetVerb() == "update" || a.GetVerb() == "patch" {
			t.Errorf("dry run wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	byName := map[string]Planned{}
	for _, p := range plan.Pods {
		byName[p.String()] = p
	}
	if w := byName["apps/web-1"]; !w.Refused || !errors.Is(w.Err, ErrBlockedByPDB) || !strings.Contains(w.Reason, "refused now by apps/web (disruptions allowed 0)") {
		t.Errorf("web-1 planned %+v: want refused now by apps/web", w)
	}
	if a := byName["apps/api-1"]; a.Refused || a.Reason != "dry run: would evict" {
		t.Errorf("api-1 planned %+v: want would evict", a)
	}
	want := []PDBView{
		{Name: "apps/api", DisruptionsAllowed: 1, Covers: 1},
		{Name: "apps/web", DisruptionsAllowed: 0, Covers: 1, WouldBlock: true},
	}
	if !slices.Equal(plan.PDBs, want) {
		t.Errorf("PDBs %+v, want %+v", plan.PDBs, want)
	}
	if !slices.Equal(plan.Blocking(), []string{"apps/web"}) {
		t.Errorf("blocking %v", plan.Blocking())
	}
	if _, err := c.CoreV1().Pods("apps").Get(ctx, held.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("pod gone after a dry run: %v", err)
	}
}

// A pod replaced under its name since it was listed (a StatefulSet's): the
// dry-run eviction's UID precondition fails with a conflict. That is the
// answer, asked once, not retried until the dry run's deadline.
func TestDryRunConflictAnsweredOnce(t *testing.T) {
	p := pod("apps", "db-0", managed)
	c := fake.NewClientset(p)
	var calls atomic.Int32
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		calls.Add(1)
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "db-0", errors.New("Precondition failed: UID in precondition"))
	})
	d := New(c, Options{GracePeriodSeconds: -1, EvictUnmanaged: true}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	plan, err := d.DryRun(ctx, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Pods) != 1 || !plan.Pods[0].Refused || !apierrors.IsConflict(plan.Pods[0].Err) {
		t.Fatalf("planned %+v: want db-0 refused with the conflict", plan.Pods)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d dry-run evictions, want 1", n)
	}
}
