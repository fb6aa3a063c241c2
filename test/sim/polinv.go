package sim

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/node"
)

// The invariants of the policies (issue 55), P1-P5; drawn in policy.go.

// policyLead is what a forced drain keeps back, besides the pod's grace
// period, when it evicts a protected pod last (docs/configuration.md: "less
// 3 s for the eviction's round trip").
const policyLead = 3 * time.Second

// startSkew is how much earlier than its action's start a terminate
// drain may count its start from: a late attempt counts from the node's
// terminate mark, which a warm pool's second trip renews to a minute before
// its event (the handler's markSkew).
const startSkew = time.Minute

// defaultGrace is the grace period of the world's pods (none sets
// terminationGracePeriodSeconds).
const defaultGrace = 30 * time.Second

// policyEvicted checks an eviction the apiserver accepted (P1, P2, P4).
func (v *Invariants) policyEvicted(inv *invocation, p *corev1.Pod) {
	n := v.w.kube.node(p.Spec.NodeName)
	if n == nil || n.skipped {
		return
	}
	ac, state := v.terminating(n.id)
	if v.w.honors() && protected(p) {
		v.w.countPolicy("protected_evictions")
		v.check(P1)
		if ac == nil && (state == "InService" || state == "Warmed:Running") {
			v.violate(P1, "%s evicted %s/%s (%s) from %s, whose instance %s is %s, on a voluntary drain (no terminate action of ours pending)",
				inv.id, p.Namespace, p.Name, annotationOf(p), n.name, n.id, state)
		}
		if ac != nil && v.steady(n) {
			v.check(P2)
			earliest := ac.start + v.w.groupTimeout(ac.group) - defaultGrace - policyLead - startSkew - time.Second
			if now := v.w.now(); now < earliest {
				v.violate(P2, "%s evicted %s/%s (%s) from %s at %.3fs, %s after its terminate action began: before its turn (%.3fs: the drain's deadline less its grace period and %s)",
					inv.id, p.Namespace, p.Name, annotationOf(p), n.name, now.Seconds(), (now - ac.start).Round(time.Millisecond), earliest.Seconds(), policyLead)
			}
		}
	}
	v.lbWaited(inv, p, n, ac)
}

// lbWaited checks that an eviction from a live node came once LB_DRAIN_WAIT
// had passed since the node was excluded from load balancers (its drain
// taint's TimeAdded), or at the drain's deadline (P4).
func (v *Invariants) lbWaited(inv *invocation, p *corev1.Pod, n *simNode, ac *action) {
	wait := v.w.lambda.cfg.LBDrainWait
	obj := v.w.kube.getNode(n.name)
	if wait <= 0 || obj == nil || !v.steady(n) {
		return
	}
	var since time.Time
	for _, t := range obj.Spec.Taints {
		if t.Key == node.TaintDraining && t.TimeAdded != nil {
			since = t.TimeAdded.Time
		}
	}
	if since.IsZero() {
		return
	}
	v.check(P4)
	until := since.Add(wait)
	start := since // a rebalance drain counts its deadline from its mark
	if ac != nil {
		start = v.w.t0.Add(ac.start - startSkew)
	}
	if end := start.Add(v.w.groupTimeout(n.group)); end.Before(until) {
		until = end
	}
	if now := time.Now(); now.Before(until.Add(-500 * time.Millisecond)) {
		v.violate(P4, "%s evicted %s/%s from %s %s after its exclusion from load balancers (LB_DRAIN_WAIT %s, the drain's deadline not yet)",
			inv.id, p.Namespace, p.Name, n.name, now.Sub(since).Round(time.Millisecond), wait)
	}
}

// steady reports whether node n's kubelet ran Ready all day: a dead or
// NotReady node is drained without the load balancer's wait, its pods
// evicted within DEAD_NODE_EVICTION_WINDOW (P2 and P4 hold live nodes).
func (v *Invariants) steady(n *simNode) bool {
	k := v.w.kube
	k.mu.Lock()
	defer k.mu.Unlock()
	return n.alive && !n.unready && n.diedAt == 0 && n.unreadyAt == 0
}

// terminating is the earliest pending terminate action of ours on
// instance id (nil: none), and the instance's lifecycle state ("": not in
// a group).
func (v *Invariants) terminating(id string) (*action, string) {
	a := v.w.asg
	a.mu.Lock()
	defer a.mu.Unlock()
	_, m := a.find(id)
	if m == nil {
		return nil, ""
	}
	var first *action
	for _, ac := range m.actions {
		if !ac.done && ac.hook.ours && ac.hook.transition == "autoscaling:EC2_INSTANCE_TERMINATING" && (first == nil || ac.start < first.start) {
			first = ac
		}
	}
	return first, m.state
}

func annotationOf(p *corev1.Pod) string {
	if v, ok := p.Annotations[annDoNotDisrupt]; ok {
		return annDoNotDisrupt + "=" + v
	}
	return annSafeToEvict + "=" + p.Annotations[annSafeToEvict]
}

// returned checks an invocation's end (P5): a bad group policy tag is
// never the reason it failed.
func (v *Invariants) returned(inv *invocation, err error) {
	bad := v.w.badTags()
	if len(bad) == 0 || inv.about == "sweep" || inv.about == "sweep-b" || inv.about == "deploy" {
		return
	}
	if g := v.w.kube.nodeByID(inv.about); g == nil || g.group != "nodes" {
		return
	}
	v.check(P5)
	if err == nil {
		return
	}
	if s := err.Error(); strings.Contains(s, "node-drainer.io/") || strings.Contains(s, "group polic") || strings.Contains(s, "drain-timeout") {
		v.violate(P5, "%s failed on the group's policy tags %v: %v", inv.id, bad, err)
	}
}

// finalConditions checks the drain's Node conditions at the day's end
// (P3): none without NODE_CONDITIONS, and none on a node whose marks are
// lifted (they are removed with the marks).
func (v *Invariants) finalConditions() {
	k := v.w.kube
	for _, n := range k.alive() {
		obj := k.getNode(n.name)
		if obj == nil || n.skipped {
			continue
		}
		v.check(P3)
		var ours []string
		for _, c := range obj.Status.Conditions {
			if (c.Type == node.ConditionDrainInProgress || c.Type == node.ConditionDrained) && strings.HasPrefix(c.Reason, "NodeDrainer") {
				ours = append(ours, string(c.Type)+"="+string(c.Status))
			}
		}
		if len(ours) == 0 {
			continue
		}
		v.w.countPolicy("nodes_ending_with_conditions")
		marked := false
		if s, ok := node.Marks(obj); ok && len(s.Causes) > 0 {
			marked = true
		}
		for _, t := range obj.Spec.Taints {
			marked = marked || t.Key == node.TaintDraining
		}
		switch {
		case !v.w.lambda.cfg.NodeConditions:
			v.violate(P3, "%s carries the drain's conditions %v, NODE_CONDITIONS off", n.name, ours)
		case !marked:
			v.violate(P3, "%s carries the drain's conditions %v, its marks lifted", n.name, ours)
		}
	}
}
