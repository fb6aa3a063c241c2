package harness

import corev1 "k8s.io/api/core/v1"

// PodReady reports a pod running and Ready, not being deleted: one a PDB
// counts as healthy.
func PodReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// StaysOnNode reports a pod a drain leaves on its node, as kubectl's does:
// a mirror pod, or a DaemonSet's.
func StaysOnNode(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return true
	}
	for _, r := range p.OwnerReferences {
		if r.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// NodeReadyStatus is the status of the node's Ready condition: True,
// False (its kubelet says so), Unknown (the node controller's, for a silent
// kubelet); "" without one.
func NodeReadyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}
