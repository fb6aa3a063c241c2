package handler

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/discovery"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/sweep"
	"github.com/node-drainer/node-drainer/internal/volume"
)

// AutoScaling is the part of Auto Scaling the sweep uses besides lifecycle
// actions: the groups' instances and hooks, and SetInstanceHealth for a
// zombie the operator asked to replace.
type AutoScaling interface {
	sweep.ASGAPI
	SetInstanceHealth(ctx context.Context, in *autoscaling.SetInstanceHealthInput, opts ...func(*autoscaling.Options)) (*autoscaling.SetInstanceHealthOutput, error)
}

// sweepReadLimit is how long a failing reading is retried: one that fails
// for longer waits for the next sweep, minutes away.
const sweepReadLimit = 20 * time.Second

// SweepSummary is what a sweep looked at and did (Outcome.Sweep).
type SweepSummary struct {
	// Pass names the logical pass (the scheduled event's id); a pass split
	// across invocations has Shards of them, this one Shard (0: the
	// scheduled invocation, which reads every Node and invokes the others).
	Pass   string `json:"pass,omitempty"`
	Shard  int    `json:"shard"`
	Shards int    `json:"shards"`
	Nodes  int    `json:"nodes"`
	// NodesElsewhere counts the Nodes of the pass's other shards (shard 0).
	NodesElsewhere int      `json:"nodesInOtherShards,omitempty"`
	Groups         int      `json:"groups"`
	Attachments    int      `json:"attachments"`
	Hooks          []string `json:"hooks,omitempty"`    // lifecycle actions handled as if their event had come
	Dead           []string `json:"dead,omitempty"`     // nodes of instances down, released
	Unmarked       []string `json:"unmarked,omitempty"` // nodes whose lapsed marks were lifted
	Orphans        []string `json:"orphans,omitempty"`  // volume attachments deleted
	Zombies        []string `json:"zombies,omitempty"`  // nodes NotReady on a running instance
	Replaced       []string `json:"replaced,omitempty"` // zombie instances marked Unhealthy
	Leases         int      `json:"leasesDeleted,omitempty"`
	Held           []string `json:"held,omitempty"` // instances an invocation holds: left alone
	// Tagged is how many groups carry ASG_TAG_KEY; HooksPut the hooks put
	// on them ("<group>/<hook>"), which they lacked (discovery.Ensure).
	Tagged   int      `json:"tagged,omitempty"`
	HooksPut []string `json:"hooksPut,omitempty"`
	ReadMS   int64    `json:"readMs"` // reading everything
	// ReadMSBy is the reading's time by source (cluster, autoscaling, ec2, pods).
	ReadMSBy map[string]int64 `json:"readMsBy,omitempty"`
	ActMS    int64            `json:"actMs"` // carrying the plan out
	Notes    []string         `json:"notes,omitempty"`
	Failed   []string         `json:"failed,omitempty"`
}

// sweeper is the path of the scheduled sweep and of its shards: it reads
// everything once, plans, and carries the plan out, each item on the
// function's own path (sweepitems.go): a hook the sweep takes, a dead
// node, a node to unmark; orphaned attachments, zombies and stale leases
// are its own to handle.
type sweeper struct{ *invocation }

// sweep reconciles what events missed: it reads everything once, plans, and
// carries the plan out through the function's own paths (each re-reads what
// it needs before acting). A reading that fails acts on nothing.
func (r *sweeper) sweep(ctx context.Context) error {
	cfg := r.sweepConfig()
	pass := r.ev.ID
	if pass == "" {
		pass = fmt.Sprintf("sweep-%d", r.h.now().UnixNano()) // invoked by hand
	}
	if sh := r.ev.Shard; sh != nil {
		// a shard delivered late is of a pass long over, its continue
		// token expired: the next pass covers its nodes
		if age := r.h.now().Sub(sh.StartedAt); age > event.ShardMaxAge || age < -event.ContinuationClockSkew {
			r.out.Action, r.out.Detail = ActionIgnored, fmt.Sprintf("sweep shard %d of %d of pass %s started %s ago: too old (or ahead), nothing read or done; the next pass covers its nodes",
				sh.Index, sh.Of, sh.Pass, age.Round(time.Second))
			return nil
		}
		cfg.Shard, pass = sh, sh.Pass
		if !sh.Zombies {
			cfg.ZombiesElsewhere = "another shard of this pass replaces zombies (the shards take turns): report only"
		}
	}
	// then the hooks of tagged groups (the scheduled invocation's, not a
	// shard's): a group created since the last sweep gets them before
	// anything else is read
	var ensured discovery.Result
	var ensureErr error
	if r.ev.Shard == nil {
		ensured, ensureErr = r.ensureHooks(ctx)
	}
	// a slow reading (thousands of instances) takes what the invocation
	// has; a failing one is retried for sweepReadLimit, then left to the
	// next sweep
	if ensureErr == nil && ensured.Tagged != nil {
		cfg.Tagged = ensured.Tagged // one describe of the tagged groups a pass
	}
	var rd *sweep.Readings
	began := r.h.now()
	rctx, cancel := context.WithDeadline(ctx, r.budget(ctx))
	giveUp := r.h.now().Add(sweepReadLimit)
	err := cluster.RetryIf(rctx, func(err error) bool { return cluster.Retriable(err) && r.h.now().Before(giveUp) }, func() (err error) {
		rd, err = sweep.Read(rctx, r.h.c.Kube, r.h.c.EC2, r.h.c.AutoScaling, cfg, r.h.now())
		return err
	})
	cancel()
	if err != nil {
		r.fail(&Failure{Kind: ErrSweepRead, Cause: err})
		return fmt.Errorf("sweep: %w", err)
	}
	sum := &SweepSummary{Pass: pass, Shard: 0, Shards: 1}
	if sh := cfg.Shard; sh != nil {
		sum.Shard, sum.Shards = sh.Index, sh.Of
	}
	if len(rd.Shards) > 0 {
		// the pass in shards: each next one invoked now, before acting, so
		// that they run side by side; one of them (in turns) replaces zombies
		sum.Shards = len(rd.Shards) + 1
		turn := shardTurn(pass, sum.Shards)
		if turn != 0 {
			cfg.ZombiesElsewhere = fmt.Sprintf("shard %d of this pass replaces zombies (the shards take turns): report only", turn)
		}
		for i, tok := range rd.Shards {
			if err := r.invokeShard(ctx, event.SweepShard{Pass: pass, Index: i + 1, Of: sum.Shards, Continue: tok,
				StartedAt: began, Zombies: turn == i+1}); err != nil {
				sum.Failed = append(sum.Failed, fmt.Sprintf("shard %d of %d not invoked (its nodes wait for the next pass): %v", i+1, sum.Shards, err))
			}
		}
	}
	plan := rd.Plan(cfg)
	by := map[string]int64{}
	for k, v := range rd.Took {
		by[k] = v.Milliseconds()
	}
	sum.Nodes, sum.NodesElsewhere, sum.Groups, sum.Attachments = len(rd.Nodes), rd.Elsewhere, len(rd.Groups), len(rd.Attachments)
	sum.Held, sum.Notes, sum.ReadMS, sum.ReadMSBy = plan.Held, plan.Notes, r.h.now().Sub(began).Milliseconds(), by
	if r.h.c.AutoScaling == nil {
		sum.Notes = append(sum.Notes, "no Auto Scaling client: hooks left waiting are not looked for")
	}
	sum.Tagged, sum.HooksPut, sum.Failed = ensured.Groups, ensured.Put, append(sum.Failed, ensured.Failed...)
	if ensureErr != nil {
		sum.Failed = append(sum.Failed, "putting hooks on tagged groups: "+ensureErr.Error())
	}
	r.out.Sweep = sum
	acting := r.h.now()
	r.runSweep(ctx, plan, sum)
	sum.ActMS = r.h.now().Sub(acting).Milliseconds()
	r.out.Action = ActionSwept
	if sum.Shards > 1 {
		r.out.Detail = fmt.Sprintf("shard %d of %d of pass %s: ", sum.Shard, sum.Shards, pass)
	}
	r.out.Detail += fmt.Sprintf("looked at %d nodes, %d groups (%d tagged, %d hooks put), %d attachments: %d hooks, %d dead nodes, %d unmarked, %d orphaned attachments, %d zombies (%d replaced), %d leases deleted, %d failed",
		sum.Nodes, sum.Groups, sum.Tagged, len(sum.HooksPut), sum.Attachments, len(sum.Hooks), len(sum.Dead), len(sum.Unmarked), len(sum.Orphans),
		len(sum.Zombies), len(sum.Replaced), sum.Leases, len(sum.Failed))
	if len(sum.Failed) > 0 {
		return fmt.Errorf("sweep: %d actions failed: %s", len(sum.Failed), strings.Join(sum.Failed, "; "))
	}
	return nil
}

// shardTurn is the shard of a pass of n shards that replaces zombies:
// drawn from the pass id, so that every shard has its turn.
func shardTurn(pass string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(pass))
	return int(h.Sum32() % uint32(n))
}

// invokeShard invokes the function asynchronously with a shard of the pass.
func (r *sweeper) invokeShard(ctx context.Context, sh event.SweepShard) error {
	payload, err := sh.Payload()
	if err != nil {
		return err
	}
	if err := r.invokeSelf(ctx, payload); err != nil {
		return fmt.Errorf("invoking %s: %w", r.h.cfg.FunctionName, err)
	}
	r.log.InfoContext(ctx, "sweep shard invoked", "pass", sh.Pass, "shard", sh.Index, "of", sh.Of)
	return nil
}

func (r *sweeper) sweepConfig() sweep.Config {
	c := r.h.cfg
	shardNodes := c.SweepShardNodes
	if r.ev.Shard == nil && (r.h.c.Lambda == nil || c.FunctionName == "") {
		shardNodes = 0 // no way to invoke a shard: the pass is this invocation's
	}
	return sweep.Config{
		ShardNodes:    shardNodes,
		ClusterTagKey: c.ClusterTagKey, ASGNames: c.ASGNames, GroupTag: discovery.Tag{Key: c.ASGTagKey, Value: c.ASGTagValue}, HookNames: c.OwnedHooks(), LeaseNamespace: c.LeaseNamespace,
		ZombieAfter: c.ZombieAfter, ZombieReplace: c.ZombieAction == config.ZombieReplace,
		ZombieMaxPerSweep: c.ZombieMaxPerSweep, ZombieMaxASGShare: c.ZombieMaxASGShare,
		Clock: r.h.clock,
	}
}

// ensureHooks puts the function's hooks on the groups carrying
// ASG_TAG_KEY=ASG_TAG_VALUE that lack them (discovery.Ensure), with the
// settings the templates give the hooks they create: the hooks
// CREATE_TERMINATE_HOOK and CREATE_LAUNCH_HOOK ask for, HEARTBEAT_TIMEOUT,
// default result CONTINUE. A dry run says what it would put and puts
// nothing. Without tag selection, or without a client that may put hooks,
// it does nothing.
func (r *sweeper) ensureHooks(ctx context.Context) (discovery.Result, error) {
	c := r.h.cfg
	if !c.SelectsByTag() || r.h.c.Hooks == nil {
		return discovery.Result{}, nil
	}
	hooks := discovery.Wanted(c.TerminateHookName, c.CreateTerminateHook, c.LaunchHookName, c.CreateLaunchHook, int32(c.HeartbeatTimeout/time.Second))
	res, err := discovery.Ensure(ctx, r.h.c.Hooks, discovery.Tag{Key: c.ASGTagKey, Value: c.ASGTagValue}, hooks, c.DryRun)
	if len(res.Put) > 0 {
		msg := "lifecycle hooks put on tagged groups"
		if c.DryRun {
			msg = "lifecycle hooks that would be put on tagged groups (dry run)"
		}
		r.log.InfoContext(ctx, msg, "hooks", res.Put, "tag", c.ASGTagKey+"="+c.ASGTagValue)
	}
	return res, err
}

// sweepPathFloor is the least time a sweep item needs to start, whatever
// DEADLINE_MARGIN says: an apiserver write and an AWS call, each with a retry.
const sweepPathFloor = 2 * time.Second

// sweepPathMinimum is the least time the invocation's budget must still
// hold for the sweep to start an item — an instance's path above all, a
// hook's most of all. Before its budget ends, a hook's path must claim the
// instance's lease, heartbeat the hook (its age is unknown), find and mark
// the node and start evicting: calls of the same kind as the completion or
// the hand-over that DEADLINE_MARGIN is kept for, and then some progress. So
// it needs at least that margin again (and never less than sweepPathFloor).
// Started later, it would claim with a context already ended, act without
// a lease, and hand over or complete having done nothing: such an item is
// left to the next sweep, minutes away, where it starts with a full budget.
func (r *sweeper) sweepPathMinimum() time.Duration {
	return max(sweepPathFloor, r.h.cfg.DeadlineMargin)
}

// runSweep carries the plan out: the instances' paths in parallel (at most
// maxParallelInstances at once), each on a run of its own, as if its event
// had come now. An item whose turn comes when the budget holds less than
// sweepPathMinimum is not started: it is left for the next sweep, and a
// note says so.
func (r *sweeper) runSweep(ctx context.Context, plan sweep.Plan, sum *SweepSummary) {
	var (
		mu sync.Mutex
		g  errgroup.Group // its functions return nil: failures are noted
	)
	g.SetLimit(maxParallelInstances)
	minimum := r.sweepPathMinimum()
	note := func(list *[]string, item string, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			sum.Failed = append(sum.Failed, item+": "+err.Error())
		case list != nil:
			*list = append(*list, item)
		}
	}
	remark := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		sum.Notes = append(sum.Notes, fmt.Sprintf(format, args...))
	}
	// Go waits for a free slot: the budget is looked at when the item
	// would start, not when it was queued. An item left so is kept for the
	// next sweep by keep, when it has one (it says how, "" when it did
	// nothing)
	doOr := func(list *[]string, item string, fn func() error, keep func() string) {
		g.Go(func() error {
			if left := r.budget(ctx).Sub(r.h.now()); left < minimum {
				how := ""
				if keep != nil {
					how = keep()
				}
				remark("%s: left for the next sweep: budget spent (%s left, an item needs %s)%s", item, max(left, 0).Round(time.Millisecond), minimum, how)
				return nil
			}
			note(list, item, fn())
			return nil
		})
	}
	do := func(list *[]string, item string, fn func() error) { doOr(list, item, fn, nil) }
	// an instance's own path: it acted (the item is listed) or it found
	// nothing to do once it read again (the note says why)
	path := func(list *[]string, id string, sub *invocation, fn func(*invocation) error) func() error {
		return func() error {
			err := sub.end(ctx, fn(sub))
			switch sub.out.Action {
			case ActionIgnored, ActionLeftAlone, ActionNotForced, ActionNoNode:
				remark("%s: %s: %s", id, sub.out.Action, sub.out.Detail)
				return err
			case ActionFailed:
				if err == nil && sub.out.LifecycleResult != "" {
					// its hook completed with the failure result at its
					// deadline: handled, as the path decides; a retry of the
					// sweep would change nothing
					remark("%s: hook completed with %s: %s", id, sub.out.LifecycleResult, sub.out.Detail)
					break
				}
				if err == nil {
					err = sub.out.Err() // a *Failure: a failed run says why
				}
			}
			if err == nil {
				note(list, id, nil)
			}
			return err
		}
	}
	now := r.h.now()
	for _, h := range plan.Hooks {
		sub, err := r.swept(h)
		if err != nil {
			note(&sum.Hooks, h.Action.InstanceID, err)
			continue
		}
		var keep func() string
		if h.Taken {
			keep = func() string { return r.keepForNextSweep(ctx, h) }
		}
		doOr(nil, h.Action.InstanceID, path(&sum.Hooks, h.Action.InstanceID, sub, func(sub *invocation) error { return sub.dispatch(ctx) }), keep)
	}
	for _, id := range plan.Dead {
		do(nil, id, path(&sum.Dead, id, r.sub(event.KindStateChange, id, now), func(sub *invocation) error { return (&stateChange{sub}).abrupt(ctx, id) }))
	}
	for _, id := range plan.Unmark {
		do(nil, id, path(&sum.Unmarked, id, r.sub(event.KindStateChange, id, now), func(sub *invocation) error { return (&stateChange{sub}).recover(ctx, id) }))
	}
	for _, o := range plan.Orphans {
		do(nil, o.Attachment.Name, func() error {
			kept, err := r.deleteOrphan(ctx, o)
			switch {
			case err != nil:
				return err
			case kept != "":
				remark("attachment %s to missing node %s kept: %s", o.Attachment.Name, o.Attachment.Spec.NodeName, kept)
			default:
				note(&sum.Orphans, o.Attachment.Name, nil)
			}
			return nil
		})
	}
	for _, z := range plan.Zombies {
		do(&sum.Zombies, z.Node, func() error {
			replaced, err := r.zombie(ctx, z)
			if replaced {
				note(&sum.Replaced, z.InstanceID, nil)
			}
			return err
		})
	}
	var leases []string
	for _, l := range plan.Leases {
		do(&leases, l.Name, func() error {
			if r.h.cfg.DryRun {
				return nil
			}
			return lease.Delete(ctx, r.h.c.Kube, &l) // gone already, or taken again since the reading: nil
		})
	}
	_ = g.Wait() // nil: every failure is in sum.Failed
	sum.Leases = len(leases)
}

// keepForNextSweep heartbeats a waiting hook of ours that this sweep leaves
// for the next (its budget spent) when an invocation took it before (its
// Lease is there): that invocation may have failed to hand it over (an
// Invoke refused, then Lambda's retries), and the function owes the hook a
// completion before it times out (rule 3); the heartbeat gives the next
// sweep, 5 minutes away, a hook of a longer timeout than that to find. A
// hook nobody took (its event lost) is not heartbeated: that would take it
// on with no invocation to carry it. The call is bounded by the
// invocation's reserve, not by the spent budget. It says what it did, for
// the sweep's note; a dry run heartbeats nothing.
func (r *sweeper) keepForNextSweep(ctx context.Context, h sweep.Hook) string {
	if r.h.cfg.DryRun {
		return ""
	}
	rctx, cancel := r.reserved(ctx)
	defer cancel()
	hctx, hcancel := context.WithTimeout(rctx, keepHeartbeatLimit)
	defer hcancel()
	act := actionOf(h.Action)
	if err := lifecycle.Heartbeat(hctx, r.h.c.ASG, act); err != nil {
		r.log.WarnContext(ctx, "could not heartbeat a hook left for the next sweep", "asg", act.ASG, "hook", act.Hook, "instance", act.InstanceID, "error", err)
		return "; its heartbeat failed: " + err.Error()
	}
	return "; heartbeated, so it outlives the wait"
}

// keepHeartbeatLimit bounds keepForNextSweep's heartbeat.
const keepHeartbeatLimit = 2 * time.Second

// sub is a run of its own for one instance of the sweep, as if an event of
// kind had come at now.
func (r *sweeper) sub(kind event.Kind, id string, now time.Time) *invocation {
	ev := event.Event{Kind: kind, ID: r.ev.ID, Source: r.ev.Source, DetailType: r.ev.DetailType, Time: now,
		InstanceIDs: []string{id}}
	return &invocation{h: r.h, ev: ev, raw: r.raw, started: r.started, attempt: 1, deadline: r.deadline,
		out: Outcome{Event: kind, Instance: id, DryRun: r.h.cfg.DryRun}, log: r.log.With("sweep", true),
		rep: newReport(r.h.now(), r.h.now)}
}

// swept is the run of a lifecycle action the sweep found waiting: its event
// made anew (no token), so a continuation of its drain carries it.
func (r *sweeper) swept(h sweep.Hook) (*invocation, error) {
	raw, err := event.NewSwept(h.Kind, h.Action, r.ev.Region, r.h.now())
	if err != nil {
		return nil, err
	}
	ev, err := event.Parse(raw)
	if err != nil {
		return nil, err
	}
	// its age unknown: heartbeated at once, and its drain's start read
	// from the node's drain mark (see resumeStart)
	return &invocation{h: r.h, ev: ev, raw: raw, started: r.h.now(), attempt: 1, deadline: r.deadline, fromSweep: true,
		out: Outcome{Event: ev.Kind, Instance: h.Action.InstanceID, DryRun: r.h.cfg.DryRun},
		log: r.h.log.With("sweep", true, "event", ev), rep: newReport(r.h.now(), r.h.now)}, nil
}

// deleteOrphan deletes an attachment to a node the cluster no longer has,
// whose instance EC2 reported terminated or gone. The reading is up to a
// whole sweep old: both are read again at the moment of acting (safety rule
// 11) — the node is still missing, and EC2 still reports every instance of
// that name down (sweep.Orphan.ReadAgain); an EC2 that cannot be read now
// is an error, and nothing is done. It returns why the attachment was kept
// ("" when it was deleted, or would be in a dry run).
func (r *sweeper) deleteOrphan(ctx context.Context, o sweep.Orphan) (kept string, err error) {
	va := o.Attachment
	if _, err := node.Get(ctx, r.h.c.Kube, va.Spec.NodeName); err == nil {
		return "the node is back", nil
	} else if !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("reading node %s again: %w", va.Spec.NodeName, err)
	}
	orphaned, evidence, err := o.ReadAgain(ctx, r.h.c.EC2, r.h.clock)
	if err != nil {
		return "", fmt.Errorf("reading EC2 again before deleting volume attachment %s: %w", va.Name, err)
	}
	if !orphaned {
		return evidence + " (read again before deleting)", nil
	}
	if r.h.cfg.DryRun {
		return "", nil
	}
	if err := volume.DeleteAttachment(ctx, r.h.c.Kube, &va); err != nil {
		return "", err
	}
	r.log.InfoContext(ctx, "deleted orphaned volume attachment", "attachment", va.Name, "node", va.Spec.NodeName,
		"volume", ptr.Deref(va.Spec.Source.PersistentVolumeName, ""), "evidence", "node not in the cluster (read again); "+evidence)
	return "", nil
}

// zombie reports a node NotReady on a running instance, and marks the
// instance Unhealthy in its ASG when the plan says so — after reading again
// that the node is still NotReady and EC2 still reports it running. The
// function never stops or terminates an instance itself: its ASG replaces
// it, through the terminate hook and this function's drain.
func (r *sweeper) zombie(ctx context.Context, z sweep.Zombie) (bool, error) {
	log := r.log.With("node", z.Node, "instance", z.InstanceID, "asg", z.ASG)
	n, err := node.Get(ctx, r.h.c.Kube, z.Node)
	if err != nil {
		return false, fmt.Errorf("reading node %s: %w", z.Node, err)
	}
	if node.Ready(n) {
		return false, nil // back since the reading
	}
	if !z.Replace {
		log.WarnContext(ctx, "zombie node", "since", z.Since, "action", z.Why)
		r.record(ctx, n, node.EventZombie(z.Since, z.InstanceID, z.Why))
		return false, nil
	}
	inst, err := instance.Describe(ctx, r.h.c.EC2, r.h.clock, z.InstanceID)
	if err != nil {
		return false, err
	}
	if !inst.Found || inst.State != instance.StateRunning {
		return false, nil // not a zombie any more: the abrupt path is the next sweep's
	}
	if r.h.cfg.DryRun {
		log.WarnContext(ctx, "zombie node: would mark its instance Unhealthy (dry run)", "since", z.Since)
		return false, nil
	}
	if _, err := r.h.c.AutoScaling.SetInstanceHealth(ctx, &autoscaling.SetInstanceHealthInput{
		InstanceId: aws.String(z.InstanceID), HealthStatus: aws.String("Unhealthy"), ShouldRespectGracePeriod: aws.Bool(true),
	}); err != nil {
		return false, fmt.Errorf("marking instance %s Unhealthy: %w", z.InstanceID, err)
	}
	log.WarnContext(ctx, "zombie node: instance marked Unhealthy for its ASG to replace", "since", z.Since, "evidence", inst.String())
	r.record(ctx, n, node.EventZombieReplaced(z.Since, z.InstanceID, z.ASG))
	return true, nil
}
