package handler

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/lifecycle"
)

// A dry run of a hook on an instance already stopped whose kubelet still
// renews its Lease says it would not force, at once: the real run would
// wait up to STOPPING_WAIT_TIMEOUT for the kubelet to go quiet, a dry run
// does not make the ASG wait for that.
func TestDryRunDoesNotWaitForTheGuard(t *testing.T) {
	e := newEnv(append(aNode(), attachment("csi-db", idA, "pv-db"))...)
	e.cfg.DryRun = true
	e.cfg.StoppingWaitTimeout = time.Minute
	e.ec2.readings[idA] = []reading{stopped}
	renewed := metav1.NewMicroTime(e.now.Add(-2 * time.Second))
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName(idA), Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{RenewTime: &renewed}}
	if _, err := e.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.kube.ClearActions()
	began := time.Now()
	out, err := e.handle(t, terminateEvent(idA), 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("dry run took %s: want the hook completed at once", took)
	}
	if out.Action != ActionNotForced || !slices.Equal(e.asg.results(), []lifecycle.Result{lifecycle.Continue}) {
		t.Errorf("outcome %+v, results %v: want not-forced and CONTINUE", out, e.asg.results())
	}
	if w := e.writes(); len(w) != 0 {
		t.Errorf("dry run wrote %v", w)
	}
}
