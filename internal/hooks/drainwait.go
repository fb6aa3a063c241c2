package hooks

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/internal/discovery"
)

// Deleting a lifecycle hook completes every action pending under it
// (CONTINUE for a terminating instance, ABANDON for a launching one), so a
// removal of the deployment's hooks — an uninstall, an update's release
// step for the groups leaving it, the old name of a hook renamed — first
// waits for the instances waiting under the hooks it deletes when it
// begins (in the hook's transition: Terminating:Wait, Pending:Wait, and
// a warm pool's, read with DescribeWarmPool: waitsUnder) to leave their
// action: their drains, run by the function's own invocations, which
// heartbeat them, end and complete them. It
// heartbeats nothing itself (rule 17: an action is kept alive by its own
// drain, never by a removal). The wait is bounded (drainWaitBound); once
// it has passed the hooks are deleted all the same, and each action the
// deletion cut is said (sayCut). docs/deploy.md's Uninstall and
// docs/safety.md say what it waits for and how long.
const (
	// drainWait is the longest a removal waits for the drains in flight
	// under the hooks it deletes.
	drainWait = 3 * time.Minute
	// drainWaitPoll is how often it reads the groups' instances again
	// (one DescribeAutoScalingGroups of the groups a read).
	drainWaitPoll = 10 * time.Second
	// drainWaitReserve is kept back from the request's deadlines for what
	// follows the wait: the deletions, and CloudFormation's answer (at most
	// stackAnswerTries attempts of stackAnswerAttempt, answerStack).
	drainWaitReserve = time.Minute
)

// drainWaitBound is how long a removal of a request begun at start may
// wait: drainWait, less what would overrun the invocation's deadline (less
// margin, DEADLINE_MARGIN, and drainWaitReserve) or the custom resource's
// ServiceTimeout counted from start (less drainWaitReserve; the template's
// 300 s leaves drainWait whole); never below 0. terraform's invocation has
// the function's timeout (900 s) alone.
func drainWaitBound(ctx context.Context, margin time.Duration, start time.Time, p hookProperties) time.Duration {
	bound := drainWait
	if d, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(d)-margin-drainWaitReserve)
	}
	if p.ServiceTimeout > 0 {
		bound = min(bound, time.Until(start.Add(time.Duration(p.ServiceTimeout)*time.Second))-drainWaitReserve)
	}
	return max(bound, 0)
}

// seconds is a property of whole seconds as CloudFormation sends it (a
// string) or a test does (a number); one unreadable is none (0), never a
// request refused for it.
type seconds int64

func (s *seconds) UnmarshalJSON(b []byte) error {
	if n, err := strconv.ParseInt(strings.Trim(string(b), `"`), 10, 64); err == nil {
		*s = seconds(n)
	}
	return nil
}

// removeAfterDrains removes from each group of take the hooks it names
// that are owner's (discovery.Remove), once the instances waiting under
// those it deletes when it begins have left their lifecycle action, or the
// bound has passed (awaitDrains); p are the properties the names are of
// (their transitions). It says what it removed, then each action a
// deletion cut (sayCut), and returns the groups' failures.
func (s *hooksServed) removeAfterDrains(ctx context.Context, p hookProperties, take map[string][]string, owner string) (failed []string) {
	groups := slices.Sorted(maps.Keys(take))
	s.awaitDrains(ctx, p, take, owner)
	// read again just before the deletions: what still waits is cut
	waiting, werr := discovery.Waiting(ctx, s.k.c.Hooks, groups)
	var removed []string
	for _, g := range groups {
		r, f := discovery.Remove(ctx, s.k.c.Hooks, []string{g}, take[g], owner, hooksDryRun)
		removed, failed = append(removed, r...), append(failed, f...)
	}
	for _, r := range removed {
		s.did = append(s.did, "removed "+r)
	}
	s.sayCut(ctx, p, removed, waiting, werr)
	return failed
}

// awaitDrains waits, bounded (drainWaitBound), until none of the instances
// waiting under the hooks the removal deletes (deleting) when it begins
// still waits there. A read failing while it waits is made again at the
// next poll; the first read failing gives up the wait (the read just
// before the deletions then says whether any was cut).
func (s *hooksServed) awaitDrains(ctx context.Context, p hookProperties, take map[string][]string, owner string) {
	hooks := s.deleting(ctx, take, owner)
	groups := slices.Sorted(maps.Keys(take))
	waiting, err := discovery.Waiting(ctx, s.k.c.Hooks, groups)
	held := under(p, hooks, waiting)
	if err != nil || len(held) == 0 {
		return
	}
	bound := drainWaitBound(ctx, s.k.cfg.DeadlineMargin, s.start, p)
	s.k.log.InfoContext(ctx, "waiting for the drains in flight under the hooks removed", "held", held, "bound", bound.String())
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	_ = wait.PollUntilContextCancel(wctx, drainWaitPoll, false, func(ctx context.Context) (bool, error) {
		now, err := discovery.Waiting(ctx, s.k.c.Hooks, groups)
		if err != nil {
			return false, nil // read again at the next poll, within the bound
		}
		held = still(held, under(p, hooks, now))
		return len(held) == 0, nil
	})
}

// deleting are the hooks of take ("<group>/<hook>") a removal by owner
// would delete (a dry run of discovery.Remove): not those kept for another
// deployment (rewritten without owner, which ends no action), nor those
// unread (the removal fails on them too).
func (s *hooksServed) deleting(ctx context.Context, take map[string][]string, owner string) []string {
	var hooks []string
	for g, names := range take {
		r, _ := discovery.Remove(ctx, s.k.c.Hooks, []string{g}, names, owner, true)
		hooks = append(hooks, slices.DeleteFunc(r, func(x string) bool { return strings.Contains(x, " kept for ") })...)
	}
	return hooks
}

// under are, of the instances waiting (by group, "<id> in <state>"), those
// in the transition of one of hooks ("<group>/<hook>", of p's names), by
// hook.
func under(p hookProperties, hooks []string, waiting map[string][]string) map[string][]string {
	held := map[string][]string{}
	for g, w := range waiting {
		for _, n := range p.names() {
			if !slices.Contains(hooks, g+"/"+n) {
				continue
			}
			for _, x := range w {
				if p.waitsUnder(n, x) {
					held[g+"/"+n] = append(held[g+"/"+n], x)
				}
			}
		}
	}
	return held
}

// still is, of held, what waits now too.
func still(held, now map[string][]string) map[string][]string {
	left := map[string][]string{}
	for h, w := range held {
		if w = slices.DeleteFunc(slices.Clone(w), func(x string) bool { return !slices.Contains(now[h], x) }); len(w) > 0 {
			left[h] = w
		}
	}
	return left
}

// waitsUnder reports whether an instance waiting (x: "<id> in <state>")
// may wait under the properties' hook named n: the terminate hook's
// Terminating:Wait (Warmed:Terminating:Wait: terminated from a warm pool),
// the launch hook's Pending:Wait; and, for both, Warmed:Pending:Wait,
// which Auto Scaling uses for a launch into a warm pool and for a scale-in
// into it (ReuseOnScaleIn, under the terminate hook: "Use lifecycle hooks
// with a warm pool", the user guide). Which one holds it is not asked (a
// heartbeat would answer; a removal heartbeats nothing, rule 17): it is
// waited for under either, and said cut under each deleted.
func (p hookProperties) waitsUnder(n, x string) bool {
	if strings.HasSuffix(x, " in "+string(astypes.LifecycleStateWarmedPendingWait)) {
		return true
	}
	if n == p.TerminateHookName {
		return strings.HasSuffix(x, "Terminating:Wait")
	}
	return strings.HasSuffix(x, "Pending:Wait")
}
