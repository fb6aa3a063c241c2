package node

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// The Node conditions of a drain, as KEP-5683 (Node Lifecycle Conditions)
// names them: DrainInProgress while the node is drained, Drained once it
// is. The KEP reserves the types and leaves the reasons to the writer: ours
// say which step of node-drainer's drain the node is at.
const (
	ConditionDrainInProgress corev1.NodeConditionType = "DrainInProgress"
	ConditionDrained         corev1.NodeConditionType = "Drained"

	// ReasonDraining: node-drainer has begun to drain the node (its
	// marks are on it) and has not finished.
	ReasonDraining = "NodeDrainerDraining"
	// ReasonDrained: node-drainer drained the node (its pods gone, their
	// volumes detached, or a dead kubelet's window spent).
	ReasonDrained = "NodeDrainerDrained"
)

// DrainPhase is where a drain is, as its conditions tell it.
type DrainPhase int

// The phases.
const (
	PhaseDraining DrainPhase = iota + 1 // DrainInProgress=True, Drained=False
	PhaseDrained                        // DrainInProgress=False, Drained=True
)

// DrainConditions are the two conditions of phase, for cause, at now.
func DrainConditions(phase DrainPhase, cause Cause, now time.Time) []corev1.NodeCondition {
	in, done, reason := corev1.ConditionTrue, corev1.ConditionFalse, ReasonDraining
	msg := fmt.Sprintf("node-drainer is draining the node (%s)", cause)
	if phase == PhaseDrained {
		in, done, reason = corev1.ConditionFalse, corev1.ConditionTrue, ReasonDrained
		msg = fmt.Sprintf("node-drainer drained the node (%s)", cause)
	}
	t := metav1.NewTime(now)
	return []corev1.NodeCondition{
		{Type: ConditionDrainInProgress, Status: in, Reason: reason, Message: msg, LastHeartbeatTime: t, LastTransitionTime: t},
		{Type: ConditionDrained, Status: done, Reason: reason, Message: msg, LastHeartbeatTime: t, LastTransitionTime: t},
	}
}

// InPhase reports whether n shows phase's conditions already (so that a
// drain tried again does not write them again).
func InPhase(n *corev1.Node, phase DrainPhase) bool {
	want := DrainConditions(phase, "", time.Time{})
	for _, w := range want {
		if c := condition(n, w.Type); c == nil || c.Status != w.Status || c.Reason != w.Reason {
			return false
		}
	}
	return true
}

// hasDrainCondition reports whether n carries either drain condition,
// whoever set it.
func hasDrainCondition(n *corev1.Node) bool {
	return condition(n, ConditionDrainInProgress) != nil || condition(n, ConditionDrained) != nil
}

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// SetDrainConditions writes phase's conditions on the node's status: a
// strategic-merge patch of the status subresource (nodes/status: patch),
// NodeCondition being a list merged by type, so that the kubelet's own
// conditions are left as they are and no resourceVersion is needed. Only
// for a node whose conditions node-drainer owns (Changes.Conditions): the
// caller tells. Dry run writes nothing.
func SetDrainConditions(ctx context.Context, c kubernetes.Interface, name string, phase DrainPhase, cause Cause, now time.Time, dryRun bool) error {
	type status struct {
		Conditions []corev1.NodeCondition `json:"conditions"`
	}
	patch, err := json.Marshal(struct {
		Status status `json:"status"`
	}{status{DrainConditions(phase, cause, now)}})
	if err != nil {
		return err
	}
	if err := patchStatus(ctx, c, name, patch, dryRun); err != nil {
		return fmt.Errorf("setting the drain conditions of node %s: %w", name, err)
	}
	return nil
}

// removeDrainConditions deletes both drain conditions from the node's
// status ($patch: delete, by type): node-drainer's marks are gone.
func removeDrainConditions(ctx context.Context, c kubernetes.Interface, name string, dryRun bool) error {
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"$patch":"delete"},{"type":%q,"$patch":"delete"}]}}`, ConditionDrainInProgress, ConditionDrained)
	if err := patchStatus(ctx, c, name, []byte(patch), dryRun); err != nil {
		return fmt.Errorf("removing the drain conditions of node %s: %w", name, err)
	}
	return nil
}

// patchStatus sends a strategic-merge patch to the node's status, retried
// as every write of the node is (a patch without a resourceVersion meets
// no conflict).
func patchStatus(ctx context.Context, c kubernetes.Interface, name string, patch []byte, dryRun bool) error {
	if dryRun {
		return nil
	}
	return cluster.Retry(ctx, func() error {
		_, err := c.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	})
}
