package handler

import (
	"context"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
)

// Steps of the timeline of BATCH_CORDON and NODE_CONDITIONS.
const (
	StepBatchCordon = "batch-cordon"
	StepConditions  = "conditions"
)

// batchCordonLimit bounds cordonBatch: a group unreadable or an apiserver
// slow costs this much of the drain's time, never the drain itself.
const batchCordonLimit = 10 * time.Second

// cordonBatch (BATCH_CORDON) cordons, right after this drain's own mark and
// before its evictions begin, the nodes of the other instances of the group already in
// Terminating:Wait: a scale-in of many, an instance refresh, a spot storm
// leave together, and a pod evicted here must not land on the next node to
// go. The group's terminate hook is ours (this event's), and every hook of a
// transition holds its instances, so these wait under a hook of ours; each
// is drained by its own event's invocation, never by this one (cordon only:
// nothing is evicted, nothing tainted, no hook touched). The cordon is held
// for CauseBatch until DRAIN_TIMEOUT from now and lapses then as every
// expiring hold does (the sweep's and the next event's release of expired
// causes), or earlier when the instance is in service again (back from a
// warm pool: terminateOver); the instance's own drain holds the node for
// its own cause meanwhile. A failure here is logged and the drain goes on.
// Safety rules kept: 10 (the cordon is recorded as ours, for its own cause;
// one someone else placed stays theirs), 4 (only nodes of this cluster, of
// a group the event made ours), 7 (a dry run lists, changes nothing), 3 and
// 14 (no other instance's hook is heartbeated or completed from here).
func (t *terminateHook) cordonBatch(ctx context.Context) {
	if !t.h.cfg.BatchCordon || t.h.c.AutoScaling == nil {
		return
	}
	bctx, cancel := context.WithTimeout(ctx, batchCordonLimit)
	defer cancel()
	ids, err := t.waitingWithUs(bctx)
	if err != nil {
		t.log.WarnContext(ctx, "batch cordon: the group's instances unreadable; draining without it", "error", err)
		return
	}
	if ids.Len() == 0 {
		return
	}
	nodes, err := node.OfInstances(bctx, t.h.c.Kube, ids)
	if err != nil {
		t.log.WarnContext(ctx, "batch cordon: nodes unreadable; draining without it", "error", err)
		return
	}
	now := t.h.now()
	// IfSchedulable: a node another writer cordoned since the list (its own
	// drain, another invocation's batch cordon) is not written again
	mark := node.Mark{Cause: node.CauseBatch, Cordon: true, Expires: now.Add(t.h.cfg.DrainTimeout), IfSchedulable: true}
	for _, id := range sets.List(ids) {
		n, ok := nodes[id]
		if !ok || n.Spec.Unschedulable || t.othersNode(n) {
			// cordoned already (its own drain, another invocation's batch
			// cordon, someone else): nothing to write, so that a storm's
			// invocations write each node once, not once each
			continue
		}
		if t.h.cfg.DryRun {
			t.out.BatchCordoned = append(t.out.BatchCordoned, n.Name+" (dry run: would cordon)")
			continue
		}
		made, err := node.ApplyTo(bctx, t.h.c.Kube, n, mark, now, false)
		switch {
		case err != nil:
			t.log.WarnContext(ctx, "batch cordon: node not cordoned", "batchNode", n.Name, "batchInstance", id, "error", err)
		case made.Cordoned:
			t.out.BatchCordoned = append(t.out.BatchCordoned, n.Name)
		}
	}
	t.step(StepBatchCordon, "%d of %d instances in Terminating:Wait: %v", len(t.out.BatchCordoned), ids.Len(), t.out.BatchCordoned)
	t.log.InfoContext(ctx, "batch cordon", "waiting", ids.Len(), "cordoned", t.out.BatchCordoned)
}

// waitingWithUs are the other instances of act's group in Terminating:Wait:
// from the group as whose read it (its tags), or else from one
// DescribeAutoScalingGroups of the group (the one read BATCH_CORDON adds
// to a drain, none when the group is chosen by its tag).
func (t *terminateHook) waitingWithUs(ctx context.Context) (sets.Set[string], error) {
	g := t.group
	if g == nil {
		var err error
		if g, err = lifecycle.Group(ctx, t.h.c.AutoScaling, t.act.ASG); err != nil {
			return nil, err
		}
	}
	return terminatingWait(g, t.act.InstanceID), nil
}

// terminatingWait lists the instances of g (nil: none) in Terminating:Wait,
// but self.
func terminatingWait(g *astypes.AutoScalingGroup, self string) sets.Set[string] {
	ids := sets.New[string]()
	if g == nil {
		return ids
	}
	for _, i := range g.Instances {
		if id := aws.ToString(i.InstanceId); id != self && i.LifecycleState == astypes.LifecycleStateTerminatingWait {
			ids.Insert(id)
		}
	}
	return ids
}

// othersNode says that n is left to its lifecycle owner (SKIP_NODES_OWNED_BY),
// as its own event would leave it.
func (t *terminateHook) othersNode(n *corev1.Node) bool {
	owner, _ := node.OwnerOf(n)
	return owner != "" && t.h.cfg.SkipsOwner(string(owner))
}

// afterMark runs the invocation's marked once (see invocation.onMarked).
func (r *nodeDrain) afterMark(ctx context.Context) {
	if f := r.onMarked; f != nil {
		r.onMarked = nil
		f(ctx)
	}
}

// drainConditions writes the drain's Node conditions of phase
// (NODE_CONDITIONS), on a node whose conditions are node-drainer's (owned,
// as the marks are) and that does not show them already. A failure is
// logged: the conditions tell the drain, they never stop it. Rule 10: only
// conditions recorded as ours are written, and removed (node.ReleaseHolds).
func (r *nodeDrain) drainConditions(ctx context.Context, n *corev1.Node, owned bool, phase node.DrainPhase, cause node.Cause) {
	if !r.h.cfg.NodeConditions || !owned || node.InPhase(n, phase) {
		return
	}
	rctx, cancel := r.reserved(ctx)
	defer cancel()
	lctx, lcancel := context.WithTimeout(rctx, conditionsLimit)
	defer lcancel()
	if err := node.SetDrainConditions(lctx, r.h.c.Kube, n.Name, phase, cause, r.h.now(), r.h.cfg.DryRun); err != nil {
		r.log.WarnContext(ctx, "the drain's node conditions not written", "error", err)
		return
	}
	r.step(StepConditions, "%s", conditionsNow(phase))
}

// conditionsNow says what phase's conditions are.
func conditionsNow(phase node.DrainPhase) string {
	cs := node.DrainConditions(phase, "", time.Time{})
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c.Type) + "=" + string(c.Status)
	}
	return strings.Join(out, ", ")
}

// conditionsLimit bounds one write of the drain's conditions.
const conditionsLimit = 3 * time.Second
