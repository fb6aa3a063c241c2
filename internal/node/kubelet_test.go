package node

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func kubeletLease(renewed *time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: corev1.NamespaceNodeLease}}
	if renewed != nil {
		rt := metav1.NewMicroTime(*renewed)
		l.Spec.RenewTime = &rt
	}
	return l
}

// KubeletRenewed reads the kubelet's Lease: its renewal, zero for none (no
// Lease, no RenewTime), and the API's error when it cannot be read.
func TestKubeletRenewed(t *testing.T) {
	at := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		fail    error
		want    time.Time
		wantErr bool
	}{
		{name: "renewed", objs: []runtime.Object{kubeletLease(&at)}, want: at},
		{name: "never renewed", objs: []runtime.Object{kubeletLease(nil)}},
		{name: "no Lease"},
		{name: "forbidden", objs: []runtime.Object{kubeletLease(&at)}, fail: apierrors.NewForbidden(schema.GroupResource{Resource: "leases"}, nodeName, nil), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(tc.objs...)
			if tc.fail != nil {
				c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.fail })
			}
			got, err := KubeletRenewed(context.Background(), c, nodeName)
			if (err != nil) != tc.wantErr || !got.Equal(tc.want) {
				t.Errorf("KubeletRenewed = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// The watch of the kubelet's Lease sees its renewals.
func TestWatchKubeletLease(t *testing.T) {
	at := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	c := fake.NewClientset(kubeletLease(&at))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	k := WatchKubeletLease(ctx, c, nodeName)
	if !k.WaitSynced(ctx) || !k.Renewed().Equal(at) {
		t.Fatalf("renewed %v after the list, want %v", k.Renewed(), at)
	}
	later := at.Add(10 * time.Second)
	changed := k.Changed()
	if _, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, kubeletLease(&later), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("the renewal was not seen")
	}
	if !k.Renewed().Equal(later) {
		t.Errorf("renewed %v, want %v", k.Renewed(), later)
	}
}

// Delete names the node's UID, and a node already gone is no error.
func TestDelete(t *testing.T) {
	n := newNode(nodeName, "aws:///us-east-1a/"+instID)
	n.UID = types.UID("uid-1")
	c := fake.NewClientset(n)
	var pre *metav1.Preconditions
	c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pre = a.(k8stesting.DeleteAction).GetDeleteOptions().Preconditions
		return false, nil, nil
	})
	if err := Delete(context.Background(), c, n); err != nil {
		t.Fatal(err)
	}
	if pre == nil || pre.UID == nil || *pre.UID != n.UID {
		t.Errorf("preconditions %+v: want the node's UID", pre)
	}
	if _, err := Get(context.Background(), c, nodeName); !apierrors.IsNotFound(err) {
		t.Errorf("Get after Delete: %v, want NotFound", err)
	}
	if err := Delete(context.Background(), c, n); err != nil {
		t.Errorf("deleting a node already gone: %v", err)
	}
}
