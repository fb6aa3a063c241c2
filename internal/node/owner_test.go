package node

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestOwnerOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		labels   map[string]string
		owner    Owner
		evidence string
	}{
		{"plain node", map[string]string{"kubernetes.io/os": "linux"}, "", ""},
		{"karpenter", map[string]string{LabelKarpenterNodePool: "default"}, OwnerKarpenter, "karpenter.sh/nodepool=default"},
		{"auto mode (carries a nodepool too)", map[string]string{LabelEKSComputeType: "auto", LabelKarpenterNodePool: "general-purpose"}, OwnerAutoMode, "eks.amazonaws.com/compute-type=auto"},
		{"compute type other than auto", map[string]string{LabelEKSComputeType: "ec2"}, "", ""},
		{"managed node group", map[string]string{LabelEKSNodeGroup: "ng-1"}, OwnerManagedNodeGroup, "eks.amazonaws.com/nodegroup=ng-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner, evidence := OwnerOf(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: tc.labels}})
			if owner != tc.owner || evidence != tc.evidence {
				t.Errorf("OwnerOf = %q, %q; want %q, %q", owner, evidence, tc.owner, tc.evidence)
			}
		})
	}
}
