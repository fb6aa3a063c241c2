package handler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/node"
)

// ActionLeftAlone: the node belongs to another lifecycle owner
// (SKIP_NODES_OWNED_BY); nothing was done to it.
const ActionLeftAlone Action = "left-alone"

// leftAlone says whether the node is left to its other lifecycle owner
// (SKIP_NODES_OWNED_BY), and then says why in the outcome and the log;
// nothing is written to the node. abrupt is the release of a node whose
// instance is down: Karpenter and EKS Auto Mode have their own termination
// and garbage collection for their nodes, so they keep them then too; a
// managed node group's nodes are drained by EKS on scale-in and updates, but
// nothing releases the volumes of an instance that stopped or vanished, so
// the abrupt release still runs for them.
func (r *invocation) leftAlone(ctx context.Context, n *corev1.Node, abrupt bool) bool {
	owner, evidence := node.OwnerOf(n)
	if owner == "" || !r.h.cfg.SkipsOwner(string(owner)) || (abrupt && owner == node.OwnerManagedNodeGroup) {
		return false
	}
	r.out.Action = ActionLeftAlone
	r.out.Detail = fmt.Sprintf("node owned by %s (%s): left to its owner (SKIP_NODES_OWNED_BY)", owner, evidence)
	r.log.InfoContext(ctx, "node left alone", "owner", string(owner), "evidence", evidence)
	r.step(StepLeftAlone, "%s (%s)", owner, evidence)
	return true
}
