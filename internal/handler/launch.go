package handler

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
)

// launchHook is the path of an ASG launch hook: whose hook it is, then the
// wait for the instance's node to join Ready, the hook completed, and what
// an earlier trip of the instance into a warm pool left on the node lifted.
type launchHook struct{ hook }

// handle completes the launch hook once the instance's node has joined and is
// Ready, or with the failure result at the deadline.
func (k *launchHook) handle(ctx context.Context) error {
	inst, ours, err := k.whose(ctx)
	if !ours {
		return err // whose did what its verdict asks; err: a retry may tell
	}
	if k.ev.Lifecycle.Destination == event.LocationWarmPool {
		// launched into a warm pool, where Auto Scaling stops it (or keeps
		// it running out of service) as soon as the action completes: its
		// node is not to join now, but when the group takes it out of the
		// pool (this hook again, Destination AutoScalingGroup). Waiting for
		// it would fail the launch, and the failure result would terminate
		// every instance meant for the pool.
		k.out.Action = ActionCompleted
		k.out.Detail = "instance launches into the warm pool: its node joins when it leaves the pool; lifecycle action completed at once"
		return k.complete(ctx, lifecycle.Continue, nil)
	}
	stop := k.keepAlive(ctx, nil) // node registration can outlast a short heartbeat timeout
	limit := k.budget(ctx)
	if k.h.cfg.DryRun && k.h.now().Add(dryRunLimit).Before(limit) {
		limit = k.h.now().Add(dryRunLimit) // a dry run completes the hook at once
	}
	wctx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	joined, err := node.WaitReady(wctx, k.h.c.Kube, inst.PrivateDNSName, inst.ID)
	stop()
	if err != nil {
		k.fail(&Failure{Kind: ErrNotReady, Cause: err})
		return k.complete(ctx, k.h.onFailure(), joined)
	}
	k.out.Node = joined.Name
	k.out.Action = ActionNodeJoined
	// the hook first (rule 3): the lift after it, in a bounded time, is a
	// convenience the `running` event's path and the sweep also provide
	err = k.complete(ctx, lifecycle.Continue, joined)
	if left := k.budget(ctx).Sub(k.h.now()); left > 0 {
		lctx, cancel := context.WithTimeout(ctx, min(left, liftLimit))
		k.liftOnLaunch(lctx, joined, inst)
		cancel()
	}
	return err
}

// liftLimit bounds liftOnLaunch, after the launch hook is completed.
const liftLimit = 10 * time.Second

// liftOnLaunch lifts, from a node that joined Ready for a launch, what an
// earlier trip of its instance into a warm pool left: the out-of-service hold
// of its stop there (EC2 said running when this invocation read it, and the
// kubelet is Ready), and the terminate hold of the drain that sent it there,
// once that action is over (terminateOver). A node that joins cordoned takes
// no pods. It runs once the hook is completed; a failure is logged and left
// to the `running` event's path and the sweep.
func (k *launchHook) liftOnLaunch(ctx context.Context, n *corev1.Node, inst instance.Instance) {
	marks, _ := node.Marks(n)
	over, why := k.terminateOver(ctx, inst, marks)
	oos, stopped := marks.Causes[node.CauseOutOfService]
	// a hold placed after the launch began is a stop since: it stays
	stopped = stopped && inst.State == instance.StateRunning && node.Ready(n) && !k.ev.Time.Before(oos.Since.Add(-time.Second))
	if !over && !stopped {
		if why != "" {
			k.out.Detail += "; " + why
		}
		return
	}
	holds := map[node.Cause]time.Time{}
	if stopped {
		holds[node.CauseOutOfService] = oos.Since
	}
	if over {
		holds[node.CauseTerminate] = marks.Causes[node.CauseTerminate].Since
	}
	undone, err := node.ReleaseHolds(ctx, k.h.c.Kube, n.Name, holds, k.h.now(), k.h.cfg.DryRun)
	if err != nil {
		k.log.WarnContext(ctx, "holds not lifted", "error", err)
		k.out.Detail += "; holds not lifted: " + err.Error()
		return
	}
	var said []string
	if stopped {
		said = append(said, "out-of-service hold lifted: EC2 says the instance runs and its node is Ready")
	}
	if over {
		said = append(said, "terminate hold lifted: "+why)
	} else if why != "" {
		said = append(said, why)
	}
	k.out.Detail += fmt.Sprintf("; %s (removed: cordon=%v drain taint=%v out-of-service taint=%v load-balancer exclusion=%v)",
		strings.Join(said, "; "), undone.Cordoned, undone.Draining, undone.OutOfService, undone.Labeled)
	k.record(ctx, n, node.EventRecovered(inst.String(), strings.Join(said, "; ")))
}
