package handler

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
)

// Before each irreversible step the abrupt path reads its evidence again;
// any of these, seen at that moment, stops it with nothing forced.
func TestGuardReadsAgain(t *testing.T) {
	fresh := func(e *env) {
		renewed := metav1.NewMicroTime(e.now.Add(-2 * time.Second))
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName(idA), Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{RenewTime: &renewed}}
		if _, err := e.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		ec2    []reading
		at     time.Time // the event's time; zero: now
		setup  func(*env)
		forced bool
	}{
		{name: "EC2 says stopped twice, node Ready, Lease stale: forced", ec2: []reading{stopped},
			setup: func(e *env) {
				old := metav1.NewMicroTime(e.now.Add(-time.Minute))
				l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName(idA), Namespace: corev1.NamespaceNodeLease},
					Spec: coordinationv1.LeaseSpec{RenewTime: &old}}
				_, _ = e.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(t.Context(), l, metav1.CreateOptions{})
			},
			forced: true},
		// the instance was started again between the event's reading and the step
		{name: "running again at the re-read", ec2: []reading{stopped, running}},
		{name: "EC2 unreadable at the re-read", ec2: []reading{stopped, throttled}},
		{name: "node Ready and its kubelet renewing", ec2: []reading{stopped}, setup: fresh},
		{name: "node registered again under the name", ec2: []reading{stopped},
			setup: func(e *env) {
				gets := 0
				e.kube.PrependReactor("get", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
					gets++
					if gets == 1 {
						return false, nil, nil // the lookup sees the old node
					}
					n := newNode(idA)
					n.UID = ktypes.UID("uid-new-machine")
					return true, n, nil
				})
			}},
		{name: "providerID names another instance", ec2: []reading{stopped},
			setup: func(e *env) {
				gets := 0
				e.kube.PrependReactor("get", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
					gets++
					if gets == 1 {
						return false, nil, nil
					}
					n := newNode(idA)
					n.Spec.ProviderID = "aws:///us-east-1a/" + idB
					return true, n, nil
				})
			}},
		{name: "event older than the node", ec2: []reading{stopped}, at: time.Now().Add(-time.Hour),
			setup: func(e *env) {
				n, _ := e.kube.CoreV1().Nodes().Get(t.Context(), nodeName(idA), metav1.GetOptions{})
				n.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Minute))
				_, _ = e.kube.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(append(aNode(), attachment("csi-db", idA, "pv-db"))...)
			e.cfg.StoppingWaitTimeout = 100 * time.Millisecond
			e.ec2.readings[idA] = tc.ec2
			if tc.setup != nil {
				tc.setup(e)
			}
			at := tc.at
			if at.IsZero() {
				at = time.Now()
			}
			out, err := e.handle(t, stateEvent(idA, "stopped", at), 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var forced []string
			for _, w := range e.writes() {
				switch w {
				case "delete pods/", "delete volumeattachments/":
					forced = append(forced, w)
				}
			}
			tainted := false
			if n, err := e.kube.CoreV1().Nodes().Get(t.Context(), nodeName(idA), metav1.GetOptions{}); err == nil {
				for _, tn := range n.Spec.Taints {
					tainted = tainted || tn.Key == "node.kubernetes.io/out-of-service"
				}
			}
			if tc.forced {
				if out.Action != ActionReleased || len(forced) == 0 || !tainted {
					t.Errorf("outcome %+v, forced %v, tainted %v: want the node released", out, forced, tainted)
				}
				return
			}
			if out.Action != ActionNotForced || len(forced) != 0 || tainted {
				t.Errorf("outcome %+v, forced %v, tainted %v: want nothing forced", out, forced, tainted)
			}
		})
	}
}
