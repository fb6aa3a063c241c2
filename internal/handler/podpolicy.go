package handler

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/drain"
	"github.com/node-drainer/node-drainer/internal/node"
)

// podPolicy is what the drain for cause does with the pods that ask not to
// be disrupted (POD_POLICY, docs/configuration.md#pod-policy): nothing
// apart when the policy is ignored; kept on a voluntary drain; evicted
// last, their grace period whole before the deadline, on a forced one.
func (r *nodeDrain) podPolicy(cause node.Cause) drain.Policy {
	switch {
	case r.h.cfg.PodPolicy != config.PodPolicyHonor:
		return drain.PolicyIgnore
	case r.voluntary(cause):
		return drain.PolicyKeep
	}
	return drain.PolicyLast
}

// voluntary reports whether a drain for cause only anticipates: a
// rebalance recommendation, or a scheduled change before its start (the
// instance would keep running if nothing were done). Every other drain is
// forced: a terminate hook, a spot or capacity reservation warning, a
// scheduled change at or past its start. A zombie's replacement is held
// back by the sweep (sweepfixes.go), before any drain.
func (r *nodeDrain) voluntary(cause node.Cause) bool {
	switch cause {
	case node.CauseRebalance:
		return true
	case node.CauseScheduled:
		sc := r.ev.Scheduled
		return sc != nil && r.h.now().Before(sc.StartTime)
	}
	return false
}

// heldByPolicy reports whether the outcome's remaining pods ("ns/name:
// why") include one a voluntary drain kept for its pod policy: the drain
// is blocked by it at once, not after OUTCOME_BLOCKED_AFTER.
func heldByPolicy(remaining []string) bool {
	for _, s := range remaining {
		if _, why, _ := strings.Cut(s, ": "); strings.HasPrefix(why, drain.ErrBlockedByPolicy.Error()) {
			return true
		}
	}
	return false
}

// blockedAtLeast is how long a drain told blocked has been blocked at
// least: OUTCOME_BLOCKED_AFTER once passed; when a pod policy blocks it
// before then, the drain's length (the pod was held from its plan).
func blockedAtLeast(r *invocation, rep reportSnapshot) float64 {
	if !passedBlockedAfter(r.h.cfg.OutcomeBlockedAfter, r.started, rep) {
		return max(rep.now.Sub(r.started).Seconds(), 0.001)
	}
	return r.h.cfg.OutcomeBlockedAfter.Seconds()
}

// zombieHeld names the pods on a zombie's node (name) that ask not to be
// disrupted, with why ("ns/name: blocked by pod policy: <annotation>"),
// when POD_POLICY=honor: the instance still runs, so its replacement is
// voluntary, held back while they are there. The policy ignored, nothing
// is read.
func (r *sweeper) zombieHeld(ctx context.Context, name string) ([]string, error) {
	if r.h.cfg.PodPolicy != config.PodPolicyHonor {
		return nil, nil
	}
	pods, err := drain.PodsOn(ctx, r.h.c.Kube, name)
	if err != nil {
		return nil, err
	}
	var held []string
	for _, p := range pods {
		if ann := drain.Protected(p); ann != "" && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			held = append(held, p.Namespace+"/"+p.Name+": "+drain.ErrBlockedByPolicy.Error()+": "+ann)
		}
	}
	return held, nil
}
