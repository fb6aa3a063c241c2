package drain

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// Tier names a group of pods evicted together; the tiers go in the order
// of Tiers, each once the previous one's pods are gone or blocked.
type Tier string

// The tiers, in drain order.
const (
	// TierVolumes: pods with ReadWriteOnce volumes go first, as their
	// volumes' detach (and attach elsewhere) is the long pole.
	TierVolumes Tier = "rwo-volumes"
	// TierOther: every other pod.
	TierOther Tier = "other"
	// TierCritical: system-node-critical, system-cluster-critical and pods at
	// or above the critical priority go last (DNS, CNI helpers and the like
	// keep serving the others while they go).
	TierCritical Tier = "critical"
)

// Tiers is the drain order.
var Tiers = []Tier{TierVolumes, TierOther, TierCritical}

// DefaultCriticalPriority is the priority of system-cluster-critical.
const DefaultCriticalPriority = 2000000000

// Plan is the order of a drain: the pods of each tier.
type Plan map[Tier][]corev1.Pod

// String lists each non-empty tier with its pods, for the log.
func (p Plan) String() string {
	var b strings.Builder
	for _, t := range allTiers() {
		if len(p[t]) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(string(t) + ": ")
		for i, pod := range p[t] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(pod.Namespace + "/" + pod.Name)
		}
	}
	return b.String()
}

// Sizes counts each non-empty tier's pods ("rwo-volumes 2, other 108").
func (p Plan) Sizes() string {
	var parts []string
	for _, t := range allTiers() {
		if len(p[t]) > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", t, len(p[t])))
		}
	}
	return strings.Join(parts, ", ")
}

// Order sorts pods into tiers. A pod's claims are read to learn their
// access modes; a claim that cannot be read counts as ReadWriteOnce (the
// order is only an order: first is the safe guess for a volume).
func (d *Drainer) Order(ctx context.Context, pods []corev1.Pod) Plan {
	plan := Plan{}
	modes := map[string]bool{} // claim (namespace/name) -> ReadWriteOnce(Pod)
	for _, p := range pods {
		t := TierOther
		switch {
		case d.critical(p):
			t = TierCritical
		case d.usesRWO(ctx, p, modes):
			t = TierVolumes
		}
		plan[t] = append(plan[t], p)
	}
	return plan
}

func (d *Drainer) critical(p corev1.Pod) bool {
	switch p.Spec.PriorityClassName {
	case "system-node-critical", "system-cluster-critical":
		return true
	}
	return p.Spec.Priority != nil && *p.Spec.Priority >= d.opts.CriticalPriority
}

func rwo(modes []corev1.PersistentVolumeAccessMode) bool {
	return slices.Contains(modes, corev1.ReadWriteOnce) || slices.Contains(modes, corev1.ReadWriteOncePod)
}

func (d *Drainer) usesRWO(ctx context.Context, p corev1.Pod, modes map[string]bool) bool {
	for _, v := range p.Spec.Volumes {
		switch {
		case v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil:
			if rwo(v.Ephemeral.VolumeClaimTemplate.Spec.AccessModes) {
				return true
			}
		case v.PersistentVolumeClaim != nil:
			key := p.Namespace + "/" + v.PersistentVolumeClaim.ClaimName
			is, known := modes[key]
			if !known {
				var pvc *corev1.PersistentVolumeClaim
				err := cluster.Retry(ctx, func() (err error) {
					pvc, err = d.client.CoreV1().PersistentVolumeClaims(p.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
					return err
				})
				switch {
				case err == nil:
					is = rwo(pvc.Spec.AccessModes)
				case apierrors.IsNotFound(err):
					is = false
				default:
					is = true
				}
				modes[key] = is
			}
			if is {
				return true
			}
		}
	}
	return false
}
