package drain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// The annotations by which a pod asks not to be disrupted: Karpenter's and
// the cluster autoscaler's.
const (
	AnnotationDoNotDisrupt = "karpenter.sh/do-not-disrupt"                    // "true"
	AnnotationSafeToEvict  = "cluster-autoscaler.kubernetes.io/safe-to-evict" // "false"
)

// Policy is what a drain does with a pod that asks not to be disrupted
// (Protected): POD_POLICY, and whether the drain is voluntary or forced.
type Policy int

// The pod policies.
const (
	// PolicyIgnore: such a pod is evicted as any other (POD_POLICY=ignore,
	// the default: the behaviour before the policy).
	PolicyIgnore Policy = iota
	// PolicyKeep: a voluntary drain does not evict it; the drain is
	// reported blocked by it (Result.Remaining, ErrBlockedByPolicy).
	PolicyKeep
	// PolicyLast: a forced drain evicts it last, at the latest moment that
	// lets its grace period (capped by GraceCap) run whole before the
	// drain's deadline, through the eviction API under its PDB; a pod gone
	// on its own before then is not evicted.
	PolicyLast
)

// TierPolicy names, in a Plan, the pods a forced drain evicts last
// (PolicyLast); they are not one of Tiers: each goes at its own moment.
const TierPolicy Tier = "pod-policy-last"

// ErrBlockedByPolicy: a voluntary drain left the pod, which asks not to be
// disrupted (PolicyKeep).
var ErrBlockedByPolicy = errors.New("blocked by pod policy")

// lastLead is kept back, besides a pod's grace period, from the drain's
// deadline when it is evicted last: the eviction's round trip and the
// kubelet's noticing the deletion.
const lastLead = 3 * time.Second

// Protected names the annotation by which the pod asks not to be disrupted
// ("karpenter.sh/do-not-disrupt=true"); "" when it does not. The values are
// matched as Karpenter and the cluster autoscaler match them.
func Protected(p corev1.Pod) string {
	switch {
	case p.Annotations[AnnotationDoNotDisrupt] == "true":
		return AnnotationDoNotDisrupt + "=true"
	case p.Annotations[AnnotationSafeToEvict] == "false":
		return AnnotationSafeToEvict + "=false"
	}
	return ""
}

// protect sets apart the pods the policy holds: rest are drained in
// tiers; last (PolicyLast) are evicted last; kept (PolicyKeep) are not
// evicted, and remain with ErrBlockedByPolicy. PolicyIgnore holds none,
// and reads nothing.
func (o Options) protect(pods []corev1.Pod) (rest, last []corev1.Pod, kept []Pod) {
	if o.Policy == PolicyIgnore {
		return pods, nil, nil
	}
	for _, p := range pods {
		ann := Protected(p)
		switch {
		case ann == "":
			rest = append(rest, p)
		case o.Policy == PolicyLast:
			last = append(last, p)
		default:
			err := fmt.Errorf("%w: %s: a voluntary drain does not evict it", ErrBlockedByPolicy, ann)
			kept = append(kept, Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Reason: err.Error(), Err: err})
		}
	}
	return rest, last, kept
}

// order is the drain's plan: rest in tiers (one tier when Unordered), and
// the pods evicted last apart.
func (d *Drainer) order(ctx context.Context, rest, last []corev1.Pod) Plan {
	plan := Plan{TierOther: rest}
	if !d.opts.Unordered {
		plan = d.Order(ctx, rest)
	}
	if len(last) > 0 {
		plan[TierPolicy] = last
	}
	return plan
}

// graceOf is the grace period the pod's eviction gives it: its own (or
// the configured one), capped by GraceCap.
func (o Options) graceOf(p corev1.Pod) time.Duration {
	g := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if p.Spec.TerminationGracePeriodSeconds != nil {
		g = time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	if o.GracePeriodSeconds >= 0 {
		g = time.Duration(o.GracePeriodSeconds) * time.Second
	}
	if o.GraceCap > 0 && g > o.GraceCap.Truncate(time.Second) {
		g = o.GraceCap.Truncate(time.Second) // as deleteOptions caps it
	}
	return g
}

// lastTurn is how long from now a pod evicted last waits: until the
// drain's deadline (Deadline, else ctx's) less its grace period and
// lastLead. known is false when the drain has no deadline: it then goes
// once the tiers are done.
func (o Options) lastTurn(ctx context.Context, p corev1.Pod) (wait time.Duration, known bool) {
	end := o.Deadline
	if end.IsZero() {
		if end, known = ctx.Deadline(); !known {
			return 0, false
		}
	}
	return max(end.Sub(o.Clock.Now())-o.graceOf(p)-lastLead, 0), true
}

// evictLast evicts a pod the policy holds to the end of a forced drain
// (PolicyLast): at its turn (lastTurn; once tiersDone is closed when the
// drain has no deadline), unless it is gone on its own before then, in
// which case it is not evicted at all. The eviction is the eviction API's,
// under the pod's PDB, naming its UID, as any other pod's: never a delete
// (ARCHITECTURE.md §4, rules 2 and 9). Its wait ends with the drain's
// context, so the hook's completion keeps its time (rule 3).
func (d *Drainer) evictLast(ctx context.Context, r *run, p corev1.Pod, tiersDone <-chan struct{}) error {
	wait, known := d.opts.lastTurn(ctx, p)
	var at <-chan time.Time
	if known {
		t := d.opts.Clock.NewTimer(wait)
		defer t.Stop()
		at, tiersDone = t.C(), nil
		cluster.Logger(ctx).InfoContext(ctx, "pod policy: the pod is evicted last, its grace period whole before the drain's deadline",
			"pod", p.Namespace+"/"+p.Name, "annotation", Protected(p), "in", wait.Round(time.Second).String(), "grace", d.opts.graceOf(p).String())
	}
	if !waitTurn(ctx, r, p, at, tiersDone) {
		return lastEnded(r, p)
	}
	if r.gone(p) {
		return nil // gone on its own: not evicted
	}
	r.set(p.UID, stateStarted, nil)
	return d.evict(ctx, r, p, d.opts.GraceCap)
}

// waitTurn waits for the pod's turn (at, or done closed), or until it is
// gone (true both); false when ctx ended first.
func waitTurn(ctx context.Context, r *run, p corev1.Pod, at <-chan time.Time, done <-chan struct{}) bool {
	for {
		podsC := r.pods.Changed()
		if r.gone(p) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-at:
			return true
		case <-done:
			return true
		case <-podsC:
		}
	}
}

// lastEnded is why a pod evicted last was not: the drain ended before its
// turn (nil when it went on its own meanwhile).
func lastEnded(r *run, p corev1.Pod) error {
	if r.gone(p) {
		return nil
	}
	return timedOut{fmt.Errorf("not evicted: the drain ended before its turn, last (pod policy: %s)", Protected(p))}
}

// dryRunPolicy is what a dry run says of a pod the policy holds (ok false:
// none holds it).
func dryRunPolicy(ctx context.Context, o Options, p corev1.Pod) (Planned, bool) {
	rest, last, kept := o.protect([]corev1.Pod{p})
	switch {
	case len(rest) > 0:
		return Planned{}, false
	case len(kept) > 0:
		k := kept[0]
		k.Reason = "dry run: not evicted: " + k.Reason + " (the drain would be reported blocked by it)"
		return Planned{Pod: k, Refused: true}, true
	}
	p = last[0]
	when := "once the other pods are done"
	if wait, known := o.lastTurn(ctx, p); known {
		when = fmt.Sprintf("%s before the drain's deadline (in %s now)", (o.graceOf(p) + lastLead).String(), wait.Round(time.Second))
	}
	return Planned{Pod: Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID,
		Reason: fmt.Sprintf("dry run: would evict last, %s, its grace period of %s whole (pod policy: %s)", when, o.graceOf(p), Protected(p))}}, true
}

// allTiers are the tiers a Plan may hold, in drain order, the pods evicted
// last at the end.
func allTiers() []Tier { return append(slices.Clone(Tiers), TierPolicy) }
