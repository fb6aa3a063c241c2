package handler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
)

// stateChange is the path of an EC2 instance state change: an instance going
// down is released (abruptRelease), one running again gets back what
// node-drainer changed on its node.
type stateChange struct{ *invocation }

// stateChange handles EC2 instance state changes: an instance going down
// takes the abrupt path (only once EC2 confirms it is down); one running
// again gets back what node-drainer changed on its node.
func (r *stateChange) stateChange(ctx context.Context) error {
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
func (r *stateChange) abrupt(ctx context.Context, id string) error {
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
	return (&abruptRelease{r.invocation}).release(ctx, n, inst)
}

// recover undoes what node-drainer changed on the node of an instance that is
// running again, and only that; a stale event (older than our changes) or an
// instance EC2 does not report running changes nothing. Two holds are undone:
// the out-of-service one (EC2, read above, says the instance runs), and the
// terminate one when its action is over (the instance's group has it in
// service again: it went to a warm pool and came back; terminateOver).
func (r *stateChange) recover(ctx context.Context, id string) error {
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
		return r.unmarkExpired(ctx, n, inst)
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
	return r.lift(ctx, n, inst, marks, down, back, why)
}

// unmarkExpired lifts the marks of a node whose instance runs past an
// advisory cause's window (a rebalance recommendation or spot warning that
// came to nothing).
func (r *stateChange) unmarkExpired(ctx context.Context, n *corev1.Node, inst instance.Instance) error {
	undone, err := node.Release(ctx, r.h.c.Kube, n.Name, "", r.h.now(), r.h.cfg.DryRun)
	if err != nil {
		return err
	}
	r.out.Action = ActionUnmarked
	r.out.Detail = fmt.Sprintf("expired causes lifted (cordon=%v drain taint=%v); %s", undone.Cordoned, undone.Draining, inst)
	r.record(ctx, n, node.EventRecovered("", r.out.Detail))
	return nil
}

// lift undoes, on the node of an instance running again, the holds of the
// out-of-service cause (down) and of a terminate action that is over
// (back, why); EC2 and the Node were read for this event. Marks other
// causes hold stay.
func (r *stateChange) lift(ctx context.Context, n *corev1.Node, inst instance.Instance, marks node.State, down, back bool, why string) error {
	var lifted []string
	holds := map[node.Cause]time.Time{}
	if down {
		holds[node.CauseOutOfService] = time.Time{} // whenever it began
		lifted = append(lifted, string(node.CauseOutOfService))
	}
	if back {
		// only the holds read above: a terminate action begun since renews
		// them; a batch cordon (BATCH_CORDON) of an instance in service
		// again is over too
		for _, c := range []node.Cause{node.CauseTerminate, node.CauseBatch} {
			if h, held := marks.Causes[c]; held {
				holds[c] = h.Since
				lifted = append(lifted, string(c)+" ("+why+")")
			}
		}
	}
	undone, err := node.ReleaseHolds(ctx, r.h.c.Kube, n.Name, holds, r.h.now(), r.h.cfg.DryRun)
	if err != nil {
		return err
	}
	r.out.Action = ActionRecovered
	r.out.Detail = fmt.Sprintf("undid node-drainer's changes: cordon=%v out-of-service taint=%v drain taint=%v load-balancer exclusion=%v; lifted: %s; causes still held: %v",
		undone.Cordoned, undone.OutOfService, undone.Draining, undone.Labeled, strings.Join(lifted, ", "),
		slices.DeleteFunc(marks.CauseList(), func(c node.Cause) bool {
			return (down && c == node.CauseOutOfService) || (back && (c == node.CauseTerminate || c == node.CauseBatch))
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
func (r *invocation) terminateOver(ctx context.Context, inst instance.Instance, marks node.State) (over bool, why string) {
	_, held := marks.Causes[node.CauseTerminate]
	if _, batch := marks.Causes[node.CauseBatch]; !held && !batch {
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
