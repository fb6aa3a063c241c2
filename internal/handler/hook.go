package handler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kretry "k8s.io/client-go/util/retry"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
)

// hook is a lifecycle hook's path (terminate, launch): its action, once
// whose has found it ours, and what every such path does with it — keep it
// alive, complete it, hand it over to a continuation.
type hook struct {
	*invocation
	act lifecycle.Action
	// siblings are the instance's actions under the other hooks of ours on
	// act's transition (HOOK_NAMES), kept alive and completed with act
	// (rule 17); read says they were read from the group's hooks
	siblings []lifecycle.Action
	read     bool
	// group is the act's group as whose read it (its tags; nil: not read)
	group *astypes.AutoScalingGroup
}

// keepAlive heartbeats the hook, and its siblings, while the drain runs, at
// half the shortest heartbeat timeout among them: one reading of the
// group's hooks gives both (read in the background: nothing waits for it).
// Every action of ours pending on the transition is heartbeated until it is
// completed (rule 17): a sibling left alone would time out with its own
// default result, and an ABANDON ends the instance's other actions too.
func (k *hook) keepAlive(ctx context.Context, gone func(error)) (stop func()) {
	if k.h.cfg.DryRun {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan func(), 1)
	// the logger as of now: the drain replaces k.log (findNode adds the
	// node) while this goroutine runs (a data race, found by make race)
	log := k.log
	go func() {
		// read again on a failure (a throttle): unread, the siblings would
		// never be heartbeated, and one would time out mid-drain with its
		// default result (rule 17; the simulation's H5, seed 8262)
		var hooks []astypes.LifecycleHook
		err := kretry.OnError(hooksReadBackoff, func(error) bool { return ctx.Err() == nil }, func() (err error) {
			hooks, err = lifecycle.Hooks(ctx, k.h.c.ASG, k.act.ASG)
			return err
		})
		if err != nil {
			log.WarnContext(ctx, "could not read the group's hooks: heartbeats at the fallback interval", "error", err)
		} else {
			k.found(hooks)
		}
		acts := append([]lifecycle.Action{k.act}, k.siblings...)
		names := make([]string, len(acts))
		for i, a := range acts {
			names[i] = a.Hook
		}
		interval := lifecycle.Interval(hooks, names, time.Minute)
		onErr := func(a lifecycle.Action, err error) { k.beatFailed(ctx, log, a, err, gone) }
		// an event that arrives late (EventBridge retries) or a continuation
		// (queued for an unknown time) may find the hook past half its
		// timeout: the first heartbeat cannot wait a whole interval
		// (a hook the sweep found waiting has an unknown age: at once too)
		if age := k.h.now().Sub(k.ev.Time); k.attempt > 1 || k.fromSweep || k.ev.Time.IsZero() || age >= interval {
			log.InfoContext(ctx, "heartbeat at once", "hookAge", age.Round(time.Second).String(), "interval", interval.String(), "attempt", k.attempt)
			// one that fails is tried again within seconds, not an interval
			// later: the hook may be that close to its timeout (rule 3; the
			// simulation's I3, seed 5628)
			_ = kretry.OnError(hooksReadBackoff, func(error) bool { return ctx.Err() == nil }, func() error {
				var failed bool
				if acts, failed = lifecycle.Beat(ctx, k.h.c.ASG, acts, onErr); failed {
					return errBeatFailed
				}
				return nil
			})
		}
		stopped <- lifecycle.KeepAlive(ctx, k.h.c.ASG, k.h.clock, acts, interval, onErr)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			(<-stopped)()
		})
	}
}

// errBeatFailed: a heartbeat at once failed (keepAlive tries it again).
var errBeatFailed = errors.New("a heartbeat failed")

// hooksReadBackoff paces keepAlive's reads of the group's hooks: 1, 2 and
// 4 s apart, well within the least heartbeat timeout a sibling may have.
var hooksReadBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: 4}

// canContinue says whether a drain cut short by this invocation's deadline
// may go on in a fresh invocation.
func (k *hook) canContinue(deadline time.Time) bool {
	// the next invocation is continuation number k.attempt: past
	// MAX_CONTINUATIONS it would be refused, so this one completes the hook
	return k.h.cfg.ContinueLongDrains && k.h.c.Lambda != nil && k.h.cfg.FunctionName != "" &&
		!k.h.cfg.DryRun && k.attempt <= k.h.cfg.MaxContinuations && k.h.now().Before(deadline.Add(-time.Second))
}

// continueLater heartbeats the hook and invokes the function again,
// asynchronously, with the original event, the drain's start, the next
// attempt number and the holder it may take the lease from. Should the
// continuation be lost, the hook's heartbeat timeout and default result
// are the backstop.
func (k *hook) continueLater(ctx context.Context, n *corev1.Node, holders []string) error {
	if err := lifecycle.Heartbeat(ctx, k.h.c.ASG, k.act); err != nil {
		if lifecycle.IsNotActive(err) {
			k.out.Action, k.out.Detail = ActionCompleted, "lifecycle action no longer active"
			return nil
		}
		// the continuation heartbeats at once: a heartbeat lost here is not
		// a reason to stop
		k.log.WarnContext(ctx, "heartbeat before the hand-over failed; handing over all the same", "error", err)
	}
	// the siblings too: their actions wait for the continuation as this
	// one's does (rule 17)
	lifecycle.Beat(ctx, k.h.c.ASG, k.siblingActions(ctx), func(a lifecycle.Action, err error) { k.beatFailed(ctx, k.log, a, err, nil) })
	payload, err := event.Continuation{Event: k.raw, StartedAt: k.started, Attempt: k.attempt + 1,
		Holder: holders[len(holders)-1], Holders: holders,
		// this drain's start, ours to tell, not told yet: the next tells it
		StartUntold:  (k.marked || k.startUntold) && !k.told.Load(),
		DrainTimeout: k.drainTimeout}.Payload()
	if err != nil {
		return err
	}
	if err := k.invokeSelf(ctx, payload); err != nil {
		return fmt.Errorf("invoking %s to continue: %w", k.h.cfg.FunctionName, err)
	}
	k.out.Action = ActionContinued
	k.out.Detail = fmt.Sprintf("drain continues in attempt %d", k.attempt+1)
	k.step(StepContinued, "attempt %d invoked", k.attempt+1)
	k.record(ctx, n, node.EventContinued(k.h.now().Sub(k.started), k.attempt+1, k.out.Remaining))
	return nil
}

// complete completes the lifecycle action with result (dry run: says so).
func (k *hook) complete(ctx context.Context, result lifecycle.Result, n *corev1.Node) error {
	if k.out.Action == "" {
		k.out.Action = ActionCompleted
	}
	if k.h.cfg.DryRun && result != lifecycle.Continue {
		// never worse than no function: the instance goes on as it would
		k.out.Detail = strings.TrimSpace(k.out.Detail + " (dry run: would complete with " + string(result) + ", completed with CONTINUE)")
		result = lifecycle.Continue
	}
	k.out.LifecycleResult = string(result)
	// a context of its own: the margin kept from the deadline is for this
	// call (the SDK retries throttling with backoff), up to the deadline itself
	end := k.h.now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Add(-500*time.Millisecond).After(end) {
		end = d.Add(-500 * time.Millisecond)
	}
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
	defer cancel()
	c := lifecycle.NewCompletion(k.h.c.ASG, k.act, result)
	completed, err := c.Try(cctx)
	// the SDK's retries given up (a throttling storm) leave the rest of the
	// margin: tried again within it, not left to Lambda's retry a minute
	// later, past a short heartbeat timeout
	for b := cluster.Backoff(); err != nil && awsRetryable(err); {
		pause := cluster.Pause(&b, err)
		if end.Sub(k.h.now()) < pause+time.Second {
			break
		}
		k.log.WarnContext(ctx, "completing the lifecycle action failed; trying again", "error", err, "pause", pause.String())
		select {
		case <-cctx.Done():
		case <-k.h.clock.After(pause):
		}
		if cctx.Err() != nil {
			break
		}
		// an attempt that failed may have landed (its answer lost): the
		// action then found no longer active is taken as ours (Completion)
		completed, err = c.Try(cctx)
	}
	if err != nil {
		return err
	}
	k.completeSiblings(cctx, result)
	if !completed {
		k.endedElsewhere()
	} else {
		k.hookCompleted(string(result))
	}
	if n != nil && completed { // a completion by someone else is not ours to record
		// cctx has its own deadline, not the invocation's: record directly
		if err := k.recorder().Record(cctx, n, node.EventLifecycleCompleted(k.act.ASG, k.act.Hook, string(result), result != lifecycle.Continue)); err != nil {
			k.log.WarnContext(ctx, "could not record event", "error", err)
		}
	}
	return nil
}

// endedElsewhere says that the action was no longer active when completed:
// a drain's is then not "drained" (issue 54, C1: the instance may have
// left with pods on it).
func (k *hook) endedElsewhere() {
	note := " (lifecycle action was no longer active)"
	if k.out.Action == ActionDrained {
		k.out.Action = ActionEndedElsewhere
		note = " the node drained, but its lifecycle action was no longer active: it had ended otherwise (its hook timed out or was deleted, or someone else completed it), maybe before the drain did"
	}
	k.out.Detail = strings.TrimSpace(k.out.Detail + note)
	k.step(StepHookCompleted, "no longer active (completed by someone else, or timed out)")
}

// awsRetryable: an AWS error the SDK's own retryer would retry (throttling,
// 5xx, a connection lost).
func awsRetryable(err error) bool {
	return retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary
}
