package handler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/drain"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/volume"
)

// dryRunLimit bounds how long a dry run of a terminate hook works on its
// plan before it completes the hook: a dry run is never worse than no
// function at all, so the ASG does not wait for it (safety rule 7).
const dryRunLimit = 10 * time.Second

// Plan is what a dry run would have done on the node.
type Plan struct {
	// Order is the drain's tiers (RWO volumes first, critical pods last).
	Order string `json:"order,omitempty"`
	// Evict lists the pods the drain would evict ("ns/name: reason"); a pod
	// whose server-side dry-run eviction was refused now says by what.
	Evict []string `json:"evict"`
	// PDBs are the PodDisruptionBudgets covering those pods: what each
	// allows now and whether it would make the drain wait.
	PDBs []drain.PDBView `json:"pdbs,omitempty"`
	// WouldBlock names the PDBs that would make the drain wait.
	WouldBlock []string `json:"wouldBlock,omitempty"`
	// Attachments are the VolumeAttachments the drain would wait for
	// ("name (pv)").
	Attachments []string `json:"attachments,omitempty"`
	// LBWait says how long the evictions would wait for the load
	// balancers (LB_DRAIN_WAIT; empty: none).
	LBWait string `json:"lbWait,omitempty"`
	// Conditions are the Node conditions the drain would write
	// (NODE_CONDITIONS), while it drains and once drained.
	Conditions []string `json:"conditions,omitempty"`
}

// planDrain computes the plan of a drain of n without writing anything to
// the cluster (no mark, no Event, no eviction but the server-side dry-run
// ones), logs it and puts it in the outcome.
func (r *nodeDrain) planDrain(ctx context.Context, n *corev1.Node, cause node.Cause, end time.Time) (bool, error) {
	p, err := r.drainer(cause, !node.Ready(n), n.Name, end, nil).DryRun(ctx, n.Name)
	if err != nil {
		return false, fmt.Errorf("planning the drain of node %s: %w", n.Name, err)
	}
	plan := &Plan{Order: p.Order, Evict: p.Describe(), PDBs: p.PDBs, WouldBlock: p.Blocking(), LBWait: lbWaitPlan(r.h.cfg.LBDrainWait, node.Ready(n))}
	for _, pl := range p.Pods {
		if pl.Refused && !slices.ContainsFunc(plan.WouldBlock, func(b string) bool { return strings.Contains(pl.Reason, b) }) {
			plan.WouldBlock = append(plan.WouldBlock, pl.String()+" refused now")
		}
	}
	plan.Attachments, err = r.attachmentsToWait(ctx, n, p.Pods)
	if err != nil {
		return false, err
	}
	if r.h.cfg.NodeConditions {
		plan.Conditions = []string{conditionsNow(node.PhaseDraining), conditionsNow(node.PhaseDrained)}
	}
	r.out.Plan = plan
	r.step(StepPlanned, "%d pods to evict, PDBs that would block: %v, %d attachments to wait for", len(plan.Evict), plan.WouldBlock, len(plan.Attachments))
	r.out.Remaining = plan.Evict // what stays on the node: nothing was evicted
	r.out.Action = ActionDrained
	r.out.Detail = "dry run: nothing changed; the plan lists what a drain would do"
	r.log.InfoContext(ctx, "dry run plan", "plan", plan)
	return true, nil
}

// attachmentsToWait names the VolumeAttachments a drain would wait for: those
// on the node but the ones of pods that stay (waitVolumes waits for these and
// for the evicted pods' PVs, whose attachments are on the node too). Unlike
// after a drain, the pods to evict are still on the node: they are not
// counted among those that stay.
func (r *nodeDrain) attachmentsToWait(ctx context.Context, n *corev1.Node, evict []drain.Planned) ([]string, error) {
	vas, err := volume.Attachments(ctx, r.h.c.Kube, n.Name, nil)
	if err != nil || len(vas) == 0 {
		return nil, err
	}
	pods, err := drain.PodsOn(ctx, r.h.c.Kube, n.Name)
	if err != nil {
		return nil, err
	}
	var claims []string
	for _, p := range pods {
		if slices.ContainsFunc(evict, func(pl drain.Planned) bool { return pl.UID == p.UID }) {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				claims = append(claims, p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName)
			}
		}
	}
	keep, err := volume.PersistentVolumes(ctx, r.h.c.Kube, claims)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, va := range vas {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil && !slices.Contains(keep, *pv) {
			out = append(out, va.Name+" ("+*pv+")")
		}
	}
	return out, nil
}
