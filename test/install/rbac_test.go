package install

import (
	"context"
	"errors"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/test/harness"
)

// deployLeaseNamespace is both paths' LEASE_NAMESPACE: not the default, so
// that the drains show the RBAC follows it (rbac_follows_config).
const deployLeaseNamespace = "nd-leases"

// clusterObject is one object of the cluster's RBAC, by kind and name.
type clusterObject struct {
	name string // Kind/[namespace/]name
	get  func(ctx context.Context) error
}

func clusterRoleObj(name string) clusterObject {
	return clusterObject{"ClusterRole/" + name, func(ctx context.Context) error {
		_, err := env.Client.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		return err
	}}
}

func clusterRoleBindingObj(name string) clusterObject {
	return clusterObject{"ClusterRoleBinding/" + name, func(ctx context.Context) error {
		_, err := env.Client.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
		return err
	}}
}

func roleObj(ns, name string) clusterObject {
	return clusterObject{"Role/" + ns + "/" + name, func(ctx context.Context) error {
		_, err := env.Client.RbacV1().Roles(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	}}
}

func roleBindingObj(ns, name string) clusterObject {
	return clusterObject{"RoleBinding/" + ns + "/" + name, func(ctx context.Context) error {
		_, err := env.Client.RbacV1().RoleBindings(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	}}
}

func namespaceObj(name string) clusterObject {
	return clusterObject{"Namespace/" + name, func(ctx context.Context) error {
		_, err := env.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return err
	}}
}

// rbacObjects are what terraform/kubernetes/rbac.yaml and
// rbac-lease-namespace.yaml (applied into leaseNS) make: what the module
// creates with manage_rbac and delete_terminated_nodes false.
func rbacObjects(leaseNS string) []clusterObject {
	return []clusterObject{
		clusterRoleObj("node-drainer"), clusterRoleBindingObj("node-drainer"),
		roleObj("kube-node-lease", "node-drainer-kubelet-leases"), roleBindingObj("kube-node-lease", "node-drainer-kubelet-leases"),
		namespaceObj(leaseNS), roleObj(leaseNS, "node-drainer"), roleBindingObj(leaseNS, "node-drainer"),
		{"PriorityLevelConfiguration/node-drainer", func(ctx context.Context) error {
			_, err := env.Client.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, "node-drainer", metav1.GetOptions{})
			return err
		}},
		{"FlowSchema/node-drainer", func(ctx context.Context) error {
			_, err := env.Client.FlowcontrolV1().FlowSchemas().Get(ctx, "node-drainer", metav1.GetOptions{})
			return err
		}},
	}
}

// deleteNodesObjects are rbac-delete-nodes.yaml's.
var deleteNodesObjects = []clusterObject{clusterRoleObj("node-drainer-delete-nodes"), clusterRoleBindingObj("node-drainer-delete-nodes")}

func objectNames(objs []clusterObject) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.name)
	}
	return out
}

// existing lists which of objs exist.
func existing(t *testing.T, ctx context.Context, objs []clusterObject) []string {
	t.Helper()
	var have []string
	for _, o := range objs {
		err := o.get(ctx)
		if err == nil {
			have = append(have, o.name)
		} else if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	return have
}

// waitGone waits until none of objs exists (a namespace takes a while).
func waitGone(ctx context.Context, objs []clusterObject) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, o := range objs {
			if err := o.get(ctx); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
}

// harnessRBAC are the objects the harness applies (its LEASE_NAMESPACE,
// node deletion granted).
func harnessRBAC() []clusterObject {
	return append(rbacObjects(harness.LeaseNamespace), deleteNodesObjects...)
}

// deleteHarnessRBAC removes what the harness applied, so the terraform path
// creates (and then deletes) the cluster's RBAC itself.
func deleteHarnessRBAC(t *testing.T, ctx context.Context) {
	t.Helper()
	c := env.Client
	var errs []error
	for _, err := range []error{
		c.RbacV1().ClusterRoleBindings().Delete(ctx, "node-drainer", metav1.DeleteOptions{}),
		c.RbacV1().ClusterRoles().Delete(ctx, "node-drainer", metav1.DeleteOptions{}),
		c.RbacV1().ClusterRoleBindings().Delete(ctx, "node-drainer-delete-nodes", metav1.DeleteOptions{}),
		c.RbacV1().ClusterRoles().Delete(ctx, "node-drainer-delete-nodes", metav1.DeleteOptions{}),
		c.RbacV1().RoleBindings("kube-node-lease").Delete(ctx, "node-drainer-kubelet-leases", metav1.DeleteOptions{}),
		c.RbacV1().Roles("kube-node-lease").Delete(ctx, "node-drainer-kubelet-leases", metav1.DeleteOptions{}),
		c.FlowcontrolV1().FlowSchemas().Delete(ctx, "node-drainer", metav1.DeleteOptions{}),
		c.FlowcontrolV1().PriorityLevelConfigurations().Delete(ctx, "node-drainer", metav1.DeleteOptions{}),
		c.CoreV1().Namespaces().Delete(ctx, harness.LeaseNamespace, metav1.DeleteOptions{}),
	} {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("removing the harness's RBAC: %v", err)
	}
	if err := waitGone(ctx, append(harnessRBAC(), rbacObjects(deployLeaseNamespace)...)); err != nil {
		t.Fatalf("the harness's RBAC objects are not gone: %v", existing(t, ctx, harnessRBAC()))
	}
}

// checkRBACFollowsConfig: after terraform's apply with lease_namespace
// deployLeaseNamespace and delete_terminated_nodes false, and the drain of
// s, the apiserver's own authorizer (SubjectAccessReview, for the group the
// access entry gives the function) allows the Leases in that namespace and
// the kubelets' in kube-node-lease (read), and refuses node deletion, the
// Leases anywhere else and writes to the kubelets'; and the drain took its
// Lease in deployLeaseNamespace.
func checkRBACFollowsConfig(t *testing.T, ctx context.Context, s *drainScene) {
	t.Helper()
	for _, tc := range []struct {
		verb, group, resource, ns string
		allowed                   bool
	}{
		{"create", "coordination.k8s.io", "leases", deployLeaseNamespace, true},
		{"delete", "coordination.k8s.io", "leases", deployLeaseNamespace, true},
		{"get", "coordination.k8s.io", "leases", "kube-node-lease", true},
		{"watch", "coordination.k8s.io", "leases", "kube-node-lease", true},
		{"update", "", "nodes", "", true},
		{"delete", "", "nodes", "", false},
		{"get", "coordination.k8s.io", "leases", harness.LeaseNamespace, false},
		{"get", "coordination.k8s.io", "leases", "kube-system", false},
		{"list", "coordination.k8s.io", "leases", "", false}, // every namespace
		{"update", "coordination.k8s.io", "leases", "kube-node-lease", false},
	} {
		sar, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   "node-drainer:rbac-check",
				Groups: []string{harness.DrainerGroup, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: tc.verb, Group: tc.group, Resource: tc.resource, Namespace: tc.ns,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.allowed {
			where := tc.ns
			if where == "" {
				where = "(cluster)"
			}
			t.Errorf("%s %s/%s in %s: allowed %t, want %t (%s)", tc.verb, tc.group, tc.resource, where, sar.Status.Allowed, tc.allowed, sar.Status.Reason)
		}
	}
	leases, err := env.Client.CoordinationV1().Leases(deployLeaseNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range leases.Items {
		got = append(got, l.Name)
	}
	if len(got) == 0 {
		t.Errorf("no Lease in %s after the drain of %s: the drain took none there", deployLeaseNamespace, s.Instances[0].ID)
	}
	t.Logf("Leases in %s: %v", deployLeaseNamespace, got)
}
