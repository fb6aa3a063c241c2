package drain

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// Planned is one pod a drain would evict, and what the apiserver answers
// now to a server-side dry-run eviction of it.
type Planned struct {
	Pod
	// Refused: the dry-run eviction was refused now (a PDB, or another
	// error: see Reason); the drain would wait for it.
	Refused bool `json:"refused,omitempty"`
}

// PDBView is a PodDisruptionBudget that covers pods of the node.
type PDBView struct {
	Name               string `json:"name"` // namespace/name
	DisruptionsAllowed int32  `json:"disruptionsAllowed"`
	Covers             int    `json:"covers"` // pods of the node it selects
	// WouldBlock: it covers more of the node's pods than it allows to go
	// now, so the drain would wait for replacements to be Ready.
	WouldBlock bool `json:"wouldBlock,omitempty"`
}

// DryRunPlan is what a drain of a node would do, computed without changing
// anything.
type DryRunPlan struct {
	// Order is the drain's tiers, as the real drain would take them.
	Order    string
	Pods     []Planned
	PDBs     []PDBView
	Warnings string
	// Claims are the PersistentVolumeClaims (namespace/name) the pods use.
	Claims []string
}

// Blocking names the PDBs that would make the drain wait.
func (p DryRunPlan) Blocking() []string {
	var out []string
	for _, v := range p.PDBs {
		if v.WouldBlock {
			out = append(out, v.Name)
		}
	}
	return out
}

// DryRun computes a drain's plan and changes nothing: the pods the drain
// would evict (the same selection as Drain), each checked with a
// server-side dry-run eviction (policy/v1 Eviction whose DeleteOptions
// carry DryRun [All]: the apiserver runs its PDB check and persists
// nothing), and the PDBs that cover them with what each allows now.
func (d *Drainer) DryRun(ctx context.Context, node string) (DryRunPlan, error) {
	pods, warnings, err := d.Plan(ctx, node)
	plan := DryRunPlan{Warnings: warnings, Claims: claimsOf(pods)}
	if err != nil {
		return plan, err
	}
	rest, last, _ := d.opts.protect(pods)
	plan.Order = d.order(ctx, rest, last).String()
	for _, p := range pods {
		pl := Planned{Pod: Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Reason: "dry run: would evict"}}
		held, ok := dryRunPolicy(ctx, d.opts, p)
		if ok {
			pl = held // kept: nothing asked; last: asked as the others are
		}
		if pl.Refused {
			plan.Pods = append(plan.Pods, pl)
			continue
		}
		if err := d.dryRunEvict(ctx, p); err != nil {
			pl.Refused = true
			pl.Err = err
			if apierrors.IsTooManyRequests(err) || isMultiplePDBs(err) {
				pl.Err = fmt.Errorf("%w: %s", ErrBlockedByPDB, pdbMessage(err))
				pl.Reason = fmt.Sprintf("dry run: eviction refused now by %s: %s", d.listBlockers(ctx, p), pdbMessage(err))
			} else {
				pl.Reason = "dry run: eviction refused now: " + err.Error()
			}
			if ok {
				pl.Reason += "; " + held.Reason
			}
		}
		plan.Pods = append(plan.Pods, pl)
	}
	plan.PDBs, err = d.pdbViews(ctx, pods)
	return plan, err
}

// dryRunEvict asks the eviction API whether it would evict the pod now,
// retrying transient failures (not a PDB's 429: that is the answer; nor a
// conflict: the UID precondition says the pod read is gone, and the same
// request would meet it until the deadline).
func (d *Drainer) dryRunEvict(ctx context.Context, p corev1.Pod) error {
	o := d.deleteOptions(p, 0)
	o.DryRun = []string{metav1.DryRunAll}
	retriable := func(err error) bool {
		return cluster.RetriablePinned(err) && !apierrors.IsTooManyRequests(err) && !isMultiplePDBs(err)
	}
	return cluster.RetryIf(ctx, retriable, func() error {
		err := d.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			DeleteOptions: &o,
		})
		if apierrors.IsNotFound(err) {
			return nil // already gone: nothing to wait for
		}
		return err
	})
}

// pdbViews lists the PDBs of the pods' namespaces that cover any of them.
func (d *Drainer) pdbViews(ctx context.Context, pods []corev1.Pod) ([]PDBView, error) {
	byNS := map[string][]corev1.Pod{}
	for _, p := range pods {
		byNS[p.Namespace] = append(byNS[p.Namespace], p)
	}
	var views []PDBView
	for ns, ps := range byNS {
		var list *policyv1.PodDisruptionBudgetList
		err := cluster.Retry(ctx, func() (err error) {
			list, err = d.client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
			return err
		})
		if err != nil {
			return views, fmt.Errorf("listing PodDisruptionBudgets of %s: %w", ns, err)
		}
		for _, pdb := range list.Items {
			v := PDBView{Name: ns + "/" + pdb.Name, DisruptionsAllowed: pdb.Status.DisruptionsAllowed}
			for _, p := range ps {
				if covers(pdb, p) {
					v.Covers++
				}
			}
			if v.Covers > 0 {
				v.WouldBlock = int32(v.Covers) > v.DisruptionsAllowed
				views = append(views, v)
			}
		}
	}
	sort.Slice(views, func(i, j int) bool { return views[i].Name < views[j].Name })
	return views, nil
}

// String says what the PDB allows, for logs and the outcome.
func (v PDBView) String() string {
	s := fmt.Sprintf("%s allows %d disruption(s) now and covers %d pod(s) of the node", v.Name, v.DisruptionsAllowed, v.Covers)
	if v.WouldBlock {
		s += ": the drain would wait for replacements to be Ready"
	}
	return s
}

// Describe is the plan in one line per pod, for the outcome.
func (p DryRunPlan) Describe() []string {
	out := make([]string, 0, len(p.Pods))
	for _, pl := range p.Pods {
		out = append(out, pl.String()+": "+pl.Reason)
	}
	return out
}

// listBlockers names the PDBs that cover the pod (namespace/name, comma
// separated) from a list of its namespace's PDBs: a dry run has no PDB
// watch; "unknown" when they cannot be listed.
func (d *Drainer) listBlockers(ctx context.Context, p corev1.Pod) string {
	list, err := d.client.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "unknown"
	}
	var names []string
	for _, pdb := range list.Items {
		if covers(pdb, p) {
			names = append(names, fmt.Sprintf("%s/%s (disruptions allowed %d)", pdb.Namespace, pdb.Name, pdb.Status.DisruptionsAllowed))
		}
	}
	if len(names) == 0 {
		return "none matching"
	}
	return strings.Join(names, ", ")
}
