package handler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/volume"
)

// stateChange handles EC2 instance state changes: an instance going down
// takes the abrupt path (only once EC2 confirms it is down); one running
// again gets back what node-drainer changed on its node.
func (r *run) stateChange(ctx context.Context) error {
	id := r.ev.InstanceIDs[0]
	r.log = r.log.With("instance", id)
	switch r.ev.State {
	case event.StateRunning:
		return r.recover(ctx, id)
	case event.StateStopping, event.StateStopped, event.StateShuttingDown, event.StateTerminated:
		return r.abrupt(ctx, id)
	default:
		r.out.Action, r.out.Detail = ActionIgnored, "state "+string(r.ev.State)+" needs nothing"
		return nil
	}
}

// abrupt releases a node whose instance is gone: confirm with EC2 that it is
// not running (waiting, bounded, while it stops), then force-release.
func (r *run) abrupt(ctx context.Context, id string) error {
	inst, ours, err := r.ours(ctx, id)
	if err != nil || !ours {
		return err // unreadable state: nothing is done, a retry may read it
	}
	if inst.GoingDown() {
		wait := r.h.cfg.StoppingWaitTimeout
		if left := r.budget(ctx).Sub(r.h.now()); left < wait {
			wait = left
		}
		if inst, err = instance.WaitDown(ctx, r.h.c.EC2, r.h.clock, id, r.h.StoppingPollInterval, wait); err != nil {
			return err
		}
	}
	n, err := r.findNode(ctx, inst)
	if n == nil || err != nil || r.leftAlone(ctx, n, true) {
		return err
	}
	return r.release(ctx, n, inst)
}

// release is the abrupt path's destructive part, guarded by the EC2 evidence:
// only for an instance EC2 reports stopped, terminated or gone.
func (r *run) release(ctx context.Context, n *corev1.Node, inst instance.Instance) error {
	if !inst.Down() {
		r.out.Action = ActionNotForced
		r.out.Detail = inst.String() + ": not forcing anything while it may still run"
		r.out.err = fmt.Errorf("%w: %s", ErrNotSafe, inst)
		r.log.WarnContext(ctx, "not forcing release", "evidence", inst.String())
		r.record(ctx, n, node.EventNotForced(inst.String(), false))
		return nil
	}
	g := r.guard(n, inst.ID)
	check := g.check
	// each forced step, and each attempt at one, acts on a verdict of the
	// guard no older than volume.GuardFresh
	verdict := volume.NewVerdict(check)
	guarded := r.h.now()
	if err := r.safeToForce(ctx, n.Name, check); err != nil {
		r.step(StepConfirmed, "not confirmed after %s: %v", r.h.now().Sub(guarded).Round(time.Millisecond), err)
		return r.notForced(ctx, n, err)
	}
	r.step(StepConfirmed, "EC2, providerID, node age and kubelet Lease read again (waited %s)", r.h.now().Sub(guarded).Round(time.Millisecond))
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
		r.rep.released = r.h.now().Sub(begin)
		r.rep.mu.Unlock()
	}
	if errors.Is(relErr, ErrNotSafe) {
		r.out.PodsDeleted, r.out.AttachmentsDeleted = rel.PodsDeleted, rel.AttachmentsDeleted
		return r.notForced(ctx, n, relErr)
	}
	if r.h.cfg.OutOfServiceTaint && relErr == nil {
		if err := verdict.Check(ctx); err != nil {
			return r.notForced(ctx, n, err)
		}
		// still needed: the attach/detach controller force-detaches at once
		// for a tainted node, and later pods are evicted by the taint manager
		mark := node.Mark{Cause: node.CauseOutOfService, Cordon: true, OutOfService: true, Guard: verdict.Fresh}
		// read first, pinned to the UID checked: the attach/detach
		// controller writes the Node's status as its attachments go, and a
		// write at the guard's version met that conflict (1 run in 3)
		read := g.node().DeepCopy()
		read.ResourceVersion = ""
		if _, err := node.ApplyTo(ctx, r.h.c.Kube, read, mark, begin, r.h.cfg.DryRun); errors.Is(err, ErrNotSafe) {
			return r.notForced(ctx, n, err)
		} else if err != nil {
			relErr = errors.Join(relErr, err)
		} else {
			r.step(StepOutOfService, "%s", node.TaintOutOfService)
		}
	}
	r.out.PodsDeleted, r.out.AttachmentsDeleted = rel.PodsDeleted, rel.AttachmentsDeleted
	r.out.Action = ActionReleased
	r.log.InfoContext(ctx, "force-released node", "evidence", inst.String(),
		"podsDeleted", rel.PodsDeleted, "attachmentsDeleted", rel.AttachmentsDeleted, "dryRun", r.h.cfg.DryRun)
	if len(rel.PodsDeleted) > 0 || len(rel.AttachmentsDeleted) > 0 {
		r.record(ctx, n, node.EventOutOfService(inst.String(), r.h.cfg.OutOfServiceTaint, rel.PodsDeleted, rel.AttachmentsDeleted, r.h.now().Sub(begin)))
	}
	if relErr != nil {
		return relErr
	}
	terminated := !inst.Found || inst.State == instance.StateTerminated
	if terminated && r.h.cfg.DeleteTerminatedNodes && !r.h.cfg.DryRun {
		if err := verdict.Check(ctx); err != nil {
			return r.notForced(ctx, n, err)
		}
		if err := node.Delete(ctx, r.h.c.Kube, n); err != nil {
			return fmt.Errorf("deleting node %s of terminated instance: %w", n.Name, err)
		}
		r.out.Detail = "node of terminated instance deleted"
	}
	return nil
}

// notForced stops the abrupt path: the evidence read again does not show
// the machine down (or the Node is not the one the event meant). It is
// logged and recorded with that evidence; no error, since a retry of the
// same event would read the same.
func (r *run) notForced(ctx context.Context, n *corev1.Node, why error) error {
	r.out.Action = ActionNotForced
	r.out.Detail = why.Error()
	r.out.err = why
	r.log.WarnContext(ctx, "not forcing release", "evidence", why.Error())
	r.record(ctx, n, node.EventNotForced(why.Error(), true))
	return nil
}

// recover undoes what node-drainer changed on the node of an instance that is
// running again, and only that; a stale event (older than our changes) or an
// instance EC2 does not report running changes nothing. Two holds are undone:
// the out-of-service one (EC2, read above, says the instance runs), and the
// terminate one when its action is over (the instance's group has it in
// service again: it went to a warm pool and came back; terminateOver).
func (r *run) recover(ctx context.Context, id string) error {
	inst, ours, err := r.ours(ctx, id)
	if err != nil || !ours {
		return err
	}
	if !inst.Found || inst.State != instance.StateRunning {
		r.out.Action, r.out.Detail = ActionIgnored, inst.String()+": not running, nothing to undo"
		return nil
	}
	n, err := r.findNode(ctx, inst)
	if n == nil || err != nil {
		return err
	}
	marks, _ := node.Marks(n)
	hold, down := marks.Causes[node.CauseOutOfService]
	if down && !r.ev.Time.IsZero() && r.ev.Time.Before(hold.Since.Add(-time.Second)) {
		down = false // a stale running event: it says nothing of the instance since
	}
	back, why := r.terminateOver(ctx, inst, marks)
	if !down && !back && slices.ContainsFunc(marks.CauseList(), func(c node.Cause) bool { return marks.Causes[c].Expired(r.h.now()) }) {
		// the instance runs past an advisory cause's window (a rebalance
		// recommendation or spot warning that came to nothing): its marks go
		undone, err := node.Release(ctx, r.h.c.Kube, n.Name, "", r.h.now(), r.h.cfg.DryRun)
		if err != nil {
			return err
		}
		r.out.Action = ActionUnmarked
		r.out.Detail = fmt.Sprintf("expired causes released (cordon=%v drain taint=%v); %s", undone.Cordoned, undone.Draining, inst)
		r.record(ctx, n, node.EventRecovered("", r.out.Detail))
		return nil
	}
	switch {
	case !down && !back && hold.Since.IsZero():
		// nothing to undo for this event; a drain in progress (the instance
		// still runs while its hook is handled) keeps its own causes
		r.out.Action, r.out.Detail = ActionIgnored, fmt.Sprintf("node-drainer holds no out-of-service mark here (causes held: %v)", marks.CauseList())
		if why != "" {
			r.out.Detail += "; " + why
		}
		return nil
	case !down && !back:
		r.out.Action, r.out.Detail = ActionIgnored, "event is older than node-drainer's changes"
		return nil
	}
	// EC2 (above) and the Node were read for this event: the instance runs
	// again, so the out-of-service cause goes, and the terminate cause of an
	// action that is over; marks other causes hold stay
	var lifted []string
	holds := map[node.Cause]time.Time{}
	if down {
		holds[node.CauseOutOfService] = time.Time{} // whenever it began
		lifted = append(lifted, string(node.CauseOutOfService))
	}
	if back {
		// only the hold read above: a terminate action begun since renews it
		holds[node.CauseTerminate] = marks.Causes[node.CauseTerminate].Since
		lifted = append(lifted, string(node.CauseTerminate)+" ("+why+")")
	}
	undone, err := node.ReleaseHolds(ctx, r.h.c.Kube, n.Name, holds, r.h.now(), r.h.cfg.DryRun)
	if err != nil {
		return err
	}
	r.out.Action = ActionRecovered
	r.out.Detail = fmt.Sprintf("undid node-drainer's changes: cordon=%v out-of-service taint=%v drain taint=%v load-balancer exclusion=%v; lifted: %s; causes still held: %v",
		undone.Cordoned, undone.OutOfService, undone.Draining, undone.Labeled, strings.Join(lifted, ", "),
		slices.DeleteFunc(marks.CauseList(), func(c node.Cause) bool {
			return (down && c == node.CauseOutOfService) || (back && c == node.CauseTerminate)
		}))
	if !back && why != "" {
		r.out.Detail += "; " + why
	}
	r.record(ctx, n, node.EventRecovered(inst.String(), r.out.Detail))
	return nil
}

// terminateOver says whether the node's terminate hold belongs to an action
// that is over: the instance's Auto Scaling group (EC2's
// aws:autoscaling:groupName tag says which) has it in service or pending
// again, read now. An instance terminated into a warm pool (ReuseOnScaleIn)
// keeps its Node, cordoned by the drain, and comes back with it: nothing else
// would lift the cordon. An instance whose hook still waits is
// Terminating:Wait, one in the pool Warmed:*: their holds stay, as does a
// hold whose group cannot be read (the next event or sweep reads it again).
// The group is read only when such a hold is there; why says what was read
// ("" when there is no hold).
func (r *run) terminateOver(ctx context.Context, inst instance.Instance, marks node.State) (over bool, why string) {
	if _, held := marks.Causes[node.CauseTerminate]; !held {
		return false, ""
	}
	group := inst.Group()
	switch {
	case group == "":
		return false, "terminate hold kept: EC2 names no Auto Scaling group of the instance"
	case r.h.c.AutoScaling == nil:
		return false, "terminate hold kept: Auto Scaling is not read here"
	}
	state, err := lifecycle.GroupState(ctx, r.h.c.AutoScaling, group, inst.ID)
	switch {
	case err != nil:
		r.log.WarnContext(ctx, "terminate hold kept: group unreadable", "error", err)
		return false, "terminate hold kept: " + err.Error()
	case state == "":
		return false, "terminate hold kept: group " + group + " does not list the instance (it is in the group's warm pool, or gone)"
	case !lifecycle.InService(state):
		return false, fmt.Sprintf("terminate hold kept: group %s has the instance %s", group, state)
	}
	return true, fmt.Sprintf("group %s has the instance %s again: its terminate action is over", group, state)
}
