package handler

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/volume"
)

// abruptRelease is the abrupt force-release of a node whose instance is
// down: confirmed by the guard, read again before each irreversible step
// (guard.go), then cordon, pods force-deleted, VolumeAttachments deleted,
// the out-of-service taint, and the Node of a terminated instance deleted.
// "Release" means this, and only this, in the handler.
type abruptRelease struct{ *invocation }

// release is the abrupt path's destructive part, guarded by the EC2 evidence:
// only for an instance EC2 reports stopped, terminated or gone.
func (r *abruptRelease) release(ctx context.Context, n *corev1.Node, inst instance.Instance) error {
	if !inst.Down() {
		return r.mayRun(ctx, n, inst)
	}
	g := r.guard(n, inst.ID)
	// each forced step, and each attempt at one, acts on a verdict of the
	// guard no older than volume.GuardFresh
	verdict := volume.NewVerdict(g.check)
	if err := r.confirm(ctx, n.Name, g.check); err != nil {
		return r.notForced(ctx, n, err)
	}
	begin := r.h.now()
	// cordon first, so nothing new lands on the node; force-delete; then the
	// out-of-service taint. Tainting first would let the taint manager queue
	// the old pod's deletion by name, and its queue then deletes the
	// StatefulSet's replacement, which has the same name (seen on 1.35).
	// Each mark is written onto the Node as the guard before it read it.
	if _, err := node.ApplyTo(ctx, r.h.c.Kube, g.node(), node.Mark{Cause: node.CauseOutOfService, Cordon: true}, begin, r.h.cfg.DryRun); err != nil {
		return err
	}
	r.step(StepCordoned, "%s", inst)
	rel, relErr := volume.ForceRelease(ctx, r.h.c.Kube, n.Name, r.h.cfg.DryRun, verdict)
	r.step(StepForceReleased, "%d pods force-deleted, %d attachments deleted%s", len(rel.PodsDeleted), len(rel.AttachmentsDeleted),
		map[bool]string{true: " (incomplete: " + fmt.Sprint(relErr) + ")"}[relErr != nil])
	if r.rep != nil {
		r.rep.mu.Lock()
		r.rep.forceReleased = r.h.now().Sub(begin)
		r.rep.mu.Unlock()
	}
	if errors.Is(relErr, ErrNotSafe) {
		r.out.PodsDeleted, r.out.AttachmentsDeleted = rel.PodsDeleted, rel.AttachmentsDeleted
		return r.notForced(ctx, n, relErr)
	}
	if r.h.cfg.OutOfServiceTaint && relErr == nil {
		err, notSafe := r.taintOutOfService(ctx, g, verdict, begin)
		if notSafe != nil {
			return r.notForced(ctx, n, notSafe)
		}
		if err != nil {
			relErr = errors.Join(relErr, err)
		}
	}
	r.out.PodsDeleted, r.out.AttachmentsDeleted = rel.PodsDeleted, rel.AttachmentsDeleted
	r.out.Action, r.out.Evidence = ActionReleased, inst.String()
	r.log.InfoContext(ctx, "force-released node", "evidence", inst.String(),
		"podsDeleted", rel.PodsDeleted, "attachmentsDeleted", rel.AttachmentsDeleted, "dryRun", r.h.cfg.DryRun)
	if len(rel.PodsDeleted) > 0 || len(rel.AttachmentsDeleted) > 0 {
		r.record(ctx, n, node.EventOutOfService(inst.String(), r.h.cfg.OutOfServiceTaint, rel.PodsDeleted, rel.AttachmentsDeleted, r.h.now().Sub(begin)))
	}
	if relErr != nil {
		return relErr
	}
	return r.deleteNode(ctx, n, inst, verdict)
}

// mayRun refuses the release of a node whose instance EC2 does not report
// down: it may still run. Logged and recorded, with that evidence.
func (r *abruptRelease) mayRun(ctx context.Context, n *corev1.Node, inst instance.Instance) error {
	r.out.Action = ActionNotForced
	r.out.Detail = inst.String() + ": not forcing anything while it may still run"
	r.out.err = fmt.Errorf("%w: %s", ErrNotSafe, inst)
	r.log.WarnContext(ctx, "not forcing release", "evidence", inst.String())
	r.record(ctx, n, node.EventNotForced(inst.String(), false))
	return nil
}

// confirm runs the guard before the first forced step (safeToForce), and
// puts in the timeline what it found, and how long it waited.
func (r *abruptRelease) confirm(ctx context.Context, nodeName string, check func(context.Context) error) error {
	guarded := r.h.now()
	if err := r.safeToForce(ctx, nodeName, check); err != nil {
		r.step(StepConfirmed, "not confirmed after %s: %v", r.h.now().Sub(guarded).Round(time.Millisecond), err)
		return err
	}
	r.step(StepConfirmed, "EC2, providerID, node age and kubelet Lease read again (waited %s)", r.h.now().Sub(guarded).Round(time.Millisecond))
	return nil
}

// taintOutOfService puts the out-of-service taint on the node once its pods
// were force-deleted and its attachments deleted: still needed, as the
// attach/detach controller force-detaches at once for a tainted node, and
// later pods are evicted by the taint manager. notSafe: the guard, read
// again, objects; err: the taint could not be written.
func (r *abruptRelease) taintOutOfService(ctx context.Context, g *guard, verdict *volume.Verdict, begin time.Time) (err, notSafe error) {
	if err := verdict.Check(ctx); err != nil {
		return nil, err
	}
	mark := node.Mark{Cause: node.CauseOutOfService, Cordon: true, OutOfService: true, Guard: verdict.Fresh}
	// read first, pinned to the UID checked: the attach/detach
	// controller writes the Node's status as its attachments go, and a
	// write at the guard's version met that conflict (1 run in 3)
	read := g.node().DeepCopy()
	read.ResourceVersion = ""
	if _, err := node.ApplyTo(ctx, r.h.c.Kube, read, mark, begin, r.h.cfg.DryRun); errors.Is(err, ErrNotSafe) {
		return nil, err
	} else if err != nil {
		return err, nil
	}
	r.step(StepOutOfService, "%s", node.TaintOutOfService)
	return nil, nil
}

// deleteNode deletes the Node of a terminated instance when
// DELETE_TERMINATED_NODES asks for it (a self-managed cluster with no cloud
// controller to do it), the guard read again first.
func (r *abruptRelease) deleteNode(ctx context.Context, n *corev1.Node, inst instance.Instance, verdict *volume.Verdict) error {
	terminated := !inst.Found || inst.State == instance.StateTerminated
	if !terminated || !r.h.cfg.DeleteTerminatedNodes || r.h.cfg.DryRun {
		return nil
	}
	if err := verdict.Check(ctx); err != nil {
		return r.notForced(ctx, n, err)
	}
	if err := node.Delete(ctx, r.h.c.Kube, n); err != nil {
		return fmt.Errorf("deleting node %s of terminated instance: %w", n.Name, err)
	}
	r.out.Detail = "node of terminated instance deleted"
	return nil
}

// notForced stops the abrupt path: the evidence read again does not show
// the machine down (or the Node is not the one the event meant). It is
// logged and recorded with that evidence; no error, since a retry of the
// same event would read the same.
func (r *abruptRelease) notForced(ctx context.Context, n *corev1.Node, why error) error {
	r.out.Action = ActionNotForced
	r.out.Detail = why.Error()
	r.out.err = why
	r.log.WarnContext(ctx, "not forcing release", "evidence", why.Error())
	r.record(ctx, n, node.EventNotForced(why.Error(), true))
	return nil
}
