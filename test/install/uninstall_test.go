package install

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
)

// uninstall_clean_<path>: after the path's removal (terraform destroy; the
// stack's delete and the namespace the SAM user created, as docs/deploy.md's
// Uninstall says), nothing of node-drainer's is left, read back from the
// services:
//
//   - Auto Scaling: on every listed group and every group carrying the
//     deployment's tag (all the emulator holds, listed by
//     DescribeAutoScalingGroups) no hook of ours (TERMINATE_HOOK_NAME,
//     LAUNCH_HOOK_NAME); another tool's hook, put by the test on each of
//     them before the removal, kept; a hook of our name on a group tagged
//     with another value (not the deployment's) kept;
//   - the cluster: no Lease named node-drainer-* or labelled
//     app.kubernetes.io/name=node-drainer in any namespace;
//   - the nodes: none carries a mark of ours (internal/node: the annotation
//     node-drainer.io/changes, the taints node-drainer.io/draining and
//     node.kubernetes.io/out-of-service, the label
//     node.kubernetes.io/exclude-from-external-load-balancers). A node
//     whose instance Auto Scaling let go (a drain's CONTINUE: the instance is
//     Terminating:Proceed) or EC2 terminated is gone in AWS (the cloud
//     node controller deletes it with its instance); the harness has no
//     cloud controller, so the test plays it: it deletes those nodes first,
//     and says how many.
//
// Before the removal the sweep of the deployed function runs once more
// after the hooks' removal was asked for, as a sweep the schedule started
// in those seconds, or one Lambda retries, would (issue 46: a sweep that
// starts during or after the removal must put no hook back).

// otherToolHook is another tool's terminate hook, put on every listed and
// tagged group before an uninstall: it must be kept.
const otherToolHook = "other-tool-hook"

// uninstallScene is what an uninstall must clean up and what it must leave.
type uninstallScene struct {
	key, value string   // the deployment's group tag
	ours       []string // the hook names of ours
	listed     []string // the deployment's listed groups
	tagged     string   // a group carrying the tag: the sweep put our hook on it
	foreign    string   // a group tagged with another value: a hook of our name, not ours
}

// prepareUninstall creates a group carrying fn's tag (no instances) and
// runs fn's sweep, which puts our terminate hook on it; a group carrying
// the tag with another value, with a hook of our terminate hook's name; and
// puts another tool's hook on every listed group and on every group that
// carries the tag. The groups are deleted when owner ends (the path, so
// that they outlive the removal's step for uninstall_clean's).
func prepareUninstall(t, owner *testing.T, ctx context.Context, prefix string, fn deployedFunction, listed []string) *uninstallScene {
	t.Helper()
	sc := &uninstallScene{
		key: fn.Env["ASG_TAG_KEY"], value: fn.Env["ASG_TAG_VALUE"], listed: listed,
		tagged: prefix + "-uninstall-tagged", foreign: prefix + "-uninstall-foreign",
	}
	if sc.key == "" {
		t.Fatal("the deployed function chooses no groups by tag (ASG_TAG_KEY is empty)")
	}
	for _, k := range []string{"TERMINATE_HOOK_NAME", "LAUNCH_HOOK_NAME"} {
		if n := fn.Env[k]; n != "" {
			sc.ours = append(sc.ours, n)
		}
	}
	for g, v := range map[string]string{sc.tagged: sc.value, sc.foreign: "not-" + sc.value} {
		if _, err := env.CreateASG(ctx, harness.ASGSpec{Name: g, Size: 0, Tags: map[string]string{sc.key: v}}); err != nil {
			t.Fatal(err)
		}
	}
	deleteGroupsAtEnd(owner, ctx, sc.tagged, sc.foreign)
	sweepDeployed(t, ctx, fn)
	if got := hookNames(t, ctx, sc.tagged); !slices.Contains(got, fn.TerminateHook) {
		t.Fatalf("the sweep put no %s on the tagged group %s: %v", fn.TerminateHook, sc.tagged, got)
	}
	putHook(t, ctx, sc.foreign, fn.TerminateHook)
	groups, err := sc.groups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		putHook(t, ctx, g, otherToolHook)
	}
	t.Logf("before the removal: %s on %v; %s on %s (tagged %s=not-%s)", otherToolHook, groups, fn.TerminateHook, sc.foreign, sc.key, sc.value)
	return sc
}

// groups are the listed groups and every group the emulator holds that
// carries the tag, sorted.
func (sc *uninstallScene) groups(ctx context.Context) ([]string, error) {
	out := slices.Clone(sc.listed)
	p := autoscaling.NewDescribeAutoScalingGroupsPaginator(autoscaling.NewFromConfig(env.AWS.AWSConfig()), &autoscaling.DescribeAutoScalingGroupsInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("DescribeAutoScalingGroups: %w", err)
		}
		for _, g := range page.AutoScalingGroups {
			for _, tag := range g.Tags {
				if aws.ToString(tag.Key) == sc.key && aws.ToString(tag.Value) == sc.value && !slices.Contains(out, aws.ToString(g.AutoScalingGroupName)) {
					out = append(out, aws.ToString(g.AutoScalingGroupName))
				}
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// checkUninstallClean reads back, after the removal, what
// uninstall_clean_<path> says must hold.
func checkUninstallClean(t *testing.T, ctx context.Context, sc *uninstallScene) {
	t.Helper()
	groups, err := sc.groups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clean := true
	for _, g := range groups {
		got := hookNames(t, ctx, g)
		for _, n := range sc.ours {
			if slices.Contains(got, n) {
				clean = false
				t.Errorf("group %s still has our hook %s after the removal (hooks %v)", g, n, got)
			}
		}
		if !slices.Contains(got, otherToolHook) {
			clean = false
			t.Errorf("group %s lost another tool's hook %s in the removal (hooks %v)", g, otherToolHook, got)
		}
	}
	if got := hookNames(t, ctx, sc.foreign); !slices.Contains(got, sc.ours[0]) {
		clean = false
		t.Errorf("the group %s, tagged %s=not-%s, lost the hook %s that was not ours to remove (hooks %v)", sc.foreign, sc.key, sc.value, sc.ours[0], got)
	}
	if clean {
		t.Logf("Auto Scaling after the removal: none of %v on %d listed or tagged groups %v, %s kept on each; %s kept on %s", sc.ours, len(groups), groups, otherToolHook, sc.ours[0], sc.foreign)
	}

	leases, err := env.Client.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, "node-drainer-") || l.Labels["app.kubernetes.io/name"] == "node-drainer" {
			ours = append(ours, l.Namespace+"/"+l.Name)
		}
	}
	if len(ours) > 0 {
		t.Errorf("Leases of ours left after the removal: %v", ours)
	} else {
		t.Logf("no Lease of ours among the cluster's %d", len(leases.Items))
	}

	gone := deleteNodesOfGoneInstances(t, ctx)
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, n := range nodes.Items {
		var marks []string
		if v, ok := n.Annotations[node.AnnotationOwned]; ok {
			marks = append(marks, "annotation "+node.AnnotationOwned+"="+v)
		}
		for _, tn := range n.Spec.Taints {
			if tn.Key == node.TaintDraining || tn.Key == node.TaintOutOfService {
				marks = append(marks, "taint "+tn.Key)
			}
		}
		if _, ok := n.Labels[node.LabelExcludeLB]; ok {
			marks = append(marks, "label "+node.LabelExcludeLB)
		}
		if len(marks) > 0 {
			marked++
			t.Errorf("node %s (instance %s) carries marks of ours after the removal: %v", n.Name, node.ProviderInstanceID(n.Spec.ProviderID), marks)
		}
	}
	if marked == 0 {
		t.Logf("no mark of ours on any of the cluster's %d nodes (%d nodes of instances Auto Scaling or EC2 let go deleted first, as the cloud node controller would)", len(nodes.Items), gone)
	}
}

// deleteNodesOfGoneInstances plays the cloud node controller, which the
// harness lacks: a node whose instance EC2 terminated, or Auto Scaling let
// go (Terminating:Proceed: a drain completed its hook with CONTINUE, and
// AWS terminates the instance), is deleted. It returns how many.
func deleteNodesOfGoneInstances(t *testing.T, ctx context.Context) int {
	t.Helper()
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := env.AWS.AWSConfig()
	asc, ec := autoscaling.NewFromConfig(cfg), ec2.NewFromConfig(cfg)
	gone := 0
	for _, n := range nodes.Items {
		id := node.ProviderInstanceID(n.Spec.ProviderID)
		if id == "" {
			continue
		}
		let := false
		ai, err := asc.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: []string{id}})
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range ai.AutoScalingInstances {
			let = let || strings.HasPrefix(aws.ToString(i.LifecycleState), "Terminating:Proceed") || aws.ToString(i.LifecycleState) == "Terminated"
		}
		if !let {
			di, err := ec.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
			if err != nil && !strings.Contains(err.Error(), "InvalidInstanceID") {
				t.Fatal(err)
			}
			let = err != nil
			if di != nil {
				for _, r := range di.Reservations {
					for _, i := range r.Instances {
						if i.State != nil && (i.State.Name == "terminated" || i.State.Name == "shutting-down") {
							let = true
						}
					}
				}
			}
		}
		if !let {
			continue
		}
		if err := env.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		gone++
	}
	return gone
}

// deleteLeaseNamespace is the SAM user's `kubectl delete namespace` of the
// lease namespace (docs/deploy.md, Uninstall): it waits until the
// namespace, with its Leases, is gone.
func deleteLeaseNamespace(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	if err := env.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("kubectl delete namespace %s: %v", ns, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the namespace %s is not gone: %v", ns, err)
	}
}
