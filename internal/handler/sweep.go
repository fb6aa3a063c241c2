package handler

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/discovery"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/hooks"
	"github.com/node-drainer/node-drainer/internal/sweep"
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
	// RemovalMarked is the removal mark found on the function (its value:
	// since when; internal/hooks), "" none.
	RemovalMarked string `json:"removalMarked,omitempty"`
	ReadMS        int64  `json:"readMs"` // reading everything
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
	pass, ok := r.pass(&cfg)
	if !ok {
		return nil
	}
	// then the hooks of tagged groups (the scheduled invocation's, not a
	// shard's): a group created since the last sweep gets them before
	// anything else is read
	var ensured discovery.Result
	var ensureErr error
	var removal hooks.Removal
	if r.ev.Shard == nil {
		ensured, removal, ensureErr = r.ensureHooks(ctx)
	}
	if ensureErr == nil && ensured.Tagged != nil {
		cfg.Tagged = ensured.Tagged // one describe of the tagged groups a pass
	}
	began := r.h.now()
	rd, err := r.read(ctx, cfg)
	if err != nil {
		r.fail(&Failure{Kind: ErrSweepRead, Cause: err})
		return fmt.Errorf("sweep: %w", err)
	}
	sum := &SweepSummary{Pass: pass, Shard: 0, Shards: 1}
	if sh := cfg.Shard; sh != nil {
		sum.Shard, sum.Shards = sh.Index, sh.Of
	}
	r.invokeShards(ctx, rd, &cfg, sum, began)
	plan := rd.Plan(cfg)
	r.summarize(sum, rd, plan, began, ensured, ensureErr)
	sayRemoval(sum, removal)
	r.out.Sweep = sum
	acting := r.h.now()
	r.runSweep(ctx, plan, sum)
	sum.ActMS = r.h.now().Sub(acting).Milliseconds()
	return r.conclude(sum)
}

// pass names the sweep's pass, and for a shard of one, says it in cfg. A
// shard delivered late is of a pass long over, its continue token expired:
// it is not run (ok false: the outcome says so), the next pass covers its
// nodes.
func (r *sweeper) pass(cfg *sweep.Config) (pass string, ok bool) {
	pass = r.ev.ID
	if pass == "" {
		pass = fmt.Sprintf("sweep-%d", r.h.now().UnixNano()) // invoked by hand
	}
	sh := r.ev.Shard
	if sh == nil {
		return pass, true
	}
	if age := r.h.now().Sub(sh.StartedAt); age > event.ShardMaxAge || age < -event.ContinuationClockSkew {
		r.out.Action, r.out.Detail = ActionIgnored, fmt.Sprintf("sweep shard %d of %d of pass %s started %s ago: too old (or ahead), nothing read or done; the next pass covers its nodes",
			sh.Index, sh.Of, sh.Pass, age.Round(time.Second))
		return "", false
	}
	cfg.Shard = sh
	if !sh.Zombies {
		cfg.ZombiesElsewhere = "another shard of this pass replaces zombies (the shards take turns): report only"
	}
	return sh.Pass, true
}

// read reads everything the sweep plans from. A slow reading (thousands
// of instances) takes what the invocation has; a failing one is retried
// for sweepReadLimit, then left to the next sweep.
func (r *sweeper) read(ctx context.Context, cfg sweep.Config) (*sweep.Readings, error) {
	var rd *sweep.Readings
	rctx, cancel := context.WithDeadline(ctx, r.budget(ctx))
	defer cancel()
	giveUp := r.h.now().Add(sweepReadLimit)
	err := cluster.RetryIf(rctx, func(err error) bool { return cluster.Retriable(err) && r.h.now().Before(giveUp) }, func() (err error) {
		rd, err = sweep.Read(rctx, r.h.c.Kube, r.h.c.EC2, r.h.c.AutoScaling, cfg, r.h.now())
		return err
	})
	return rd, err
}

// invokeShards invokes, for a pass the reading split in shards, each next
// shard now, before acting, so that they run side by side; one of them (in
// turns) replaces zombies, and cfg says when it is not this one.
func (r *sweeper) invokeShards(ctx context.Context, rd *sweep.Readings, cfg *sweep.Config, sum *SweepSummary, began time.Time) {
	if len(rd.Shards) == 0 {
		return
	}
	sum.Shards = len(rd.Shards) + 1
	turn := shardTurn(sum.Pass, sum.Shards)
	if turn != 0 {
		cfg.ZombiesElsewhere = fmt.Sprintf("shard %d of this pass replaces zombies (the shards take turns): report only", turn)
	}
	for i, tok := range rd.Shards {
		if err := r.invokeShard(ctx, event.SweepShard{Pass: sum.Pass, Index: i + 1, Of: sum.Shards, Continue: tok,
			StartedAt: began, Zombies: turn == i+1}); err != nil {
			sum.Failed = append(sum.Failed, fmt.Sprintf("shard %d of %d not invoked (its nodes wait for the next pass): %v", i+1, sum.Shards, err))
		}
	}
}

// summarize puts in the summary what the sweep read and planned, and the
// hooks it put on tagged groups.
func (r *sweeper) summarize(sum *SweepSummary, rd *sweep.Readings, plan sweep.Plan, began time.Time, ensured discovery.Result, ensureErr error) {
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
	for _, g := range ensured.Elsewhere {
		sum.Notes = append(sum.Notes, "tagged group "+g+": another cluster's (another deployment's), no hook put")
	}
	sum.Notes = append(sum.Notes, ensured.NotOurs...) // hooks not this deployment's to change (rule 18): said, not failed
	if ensureErr != nil {
		sum.Failed = append(sum.Failed, "putting hooks on tagged groups: "+ensureErr.Error())
	}
}

// conclude ends the sweep's outcome with what it did; an item that failed
// fails the sweep.
func (r *sweeper) conclude(sum *SweepSummary) error {
	r.out.Action = ActionSwept
	if sum.Shards > 1 {
		r.out.Detail = fmt.Sprintf("shard %d of %d of pass %s: ", sum.Shard, sum.Shards, sum.Pass)
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
		ClusterTagKey: c.ClusterTagKey, ASGNames: c.ASGNames, GroupTag: groupTag(c), HookNames: c.OwnedHooks(),
		TerminateHook: c.TerminateHookName, LaunchHook: c.LaunchHookName, LeaseNamespace: c.LeaseNamespace,
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
func (r *sweeper) ensureHooks(ctx context.Context) (discovery.Result, hooks.Removal, error) {
	c := r.h.cfg
	if !c.SelectsByTag() || r.h.c.Hooks == nil {
		return discovery.Result{}, hooks.Removal{}, nil
	}
	wanted := discovery.Wanted(c.TerminateHookName, c.CreateTerminateHook, c.LaunchHookName, c.CreateLaunchHook, int32(c.HeartbeatTimeout/time.Second))
	res, removal, err := r.h.hooks.EnsureTagged(ctx, groupTag(c), wanted, c.DryRun)
	if len(res.Put) > 0 {
		msg := "lifecycle hooks put on tagged groups"
		if c.DryRun {
			msg = "lifecycle hooks that would be put on tagged groups (dry run)"
		}
		r.log.InfoContext(ctx, msg, "hooks", res.Put, "tag", c.ASGTagKey+"="+c.ASGTagValue)
	}
	return res, removal, err
}

// sayRemoval puts the removal mark's state in the sweep's summary.
func sayRemoval(sum *SweepSummary, st hooks.Removal) {
	if n := st.Note(); n != "" {
		sum.Notes = append(sum.Notes, n)
	}
	sum.RemovalMarked = st.Marked()
}
