package node

import corev1 "k8s.io/api/core/v1"

// Owner is another lifecycle owner of a node: a tool that drains the node
// itself when it removes it.
type Owner string

// The lifecycle owners node-drainer recognises, by the labels they put on
// their nodes.
const (
	// OwnerKarpenter: a Karpenter NodePool's node (label karpenter.sh/nodepool).
	OwnerKarpenter Owner = "karpenter"
	// OwnerAutoMode: an EKS Auto Mode node (eks.amazonaws.com/compute-type=auto;
	// Auto Mode nodes carry karpenter.sh/nodepool too, Auto Mode wins).
	OwnerAutoMode Owner = "auto-mode"
	// OwnerManagedNodeGroup: an EKS managed node group's node
	// (eks.amazonaws.com/nodegroup).
	OwnerManagedNodeGroup Owner = "managed-nodegroup"
)

// Owners lists every Owner, in the order OwnerOf tests them.
var Owners = []Owner{OwnerAutoMode, OwnerKarpenter, OwnerManagedNodeGroup}

// Labels that name a node's lifecycle owner.
const (
	LabelKarpenterNodePool = "karpenter.sh/nodepool"
	LabelEKSComputeType    = "eks.amazonaws.com/compute-type"
	LabelEKSNodeGroup      = "eks.amazonaws.com/nodegroup"
)

// OwnerOf names the node's other lifecycle owner ("" when none) and the
// label that says so ("key=value"), for the log.
func OwnerOf(n *corev1.Node) (Owner, string) {
	if n == nil {
		return "", ""
	}
	l := n.Labels
	if v := l[LabelEKSComputeType]; v == "auto" {
		return OwnerAutoMode, LabelEKSComputeType + "=" + v
	}
	if v, ok := l[LabelKarpenterNodePool]; ok {
		return OwnerKarpenter, LabelKarpenterNodePool + "=" + v
	}
	if v, ok := l[LabelEKSNodeGroup]; ok {
		return OwnerManagedNodeGroup, LabelEKSNodeGroup + "=" + v
	}
	return "", ""
}
