// Package handler is node-drainer's orchestration: it turns one invocation
// (an EventBridge event, or a continuation of a long drain) into the steps of
// the graceful or the abrupt path and completes the lifecycle action. Only
// this package knows the flows; every step it calls is idempotent, so
// duplicate and out-of-order events are safe.
//
// Each path is a type of its own, on the invocation's state (invocation):
//
//	terminateHook  terminate.go   whose hook, claim, drain kept alive, then complete / hand over / fail
//	launchHook     launch.go      wait for the node to join Ready, complete
//	hook           hook.go        what both do with their hook; ownership.go decides whose it is
//	advisory       advisory.go    spot warning, rebalance; scheduled.go: AWS Health changes; capacity.go: capacity reservations
//	stateChange    statechange.go an instance down (released), or running again (marks lifted)
//	abruptRelease  abrupt.go      the force-release of a node whose instance is down; guard.go
//	nodeDrain      drainnode.go   the graceful drain; volumes.go, dryrun.go
//	sweeper        sweep.go       the scheduled sweep and its shards; sweepitems.go, sweephook.go, sweepfixes.go
//
// Time comes from one clock (WithClock), handed down to every package the
// handler calls, so that a simulation can drive it. The deadlines of the
// contexts it derives (the budget, a step's bound) are context deadlines:
// they fire on the runtime's own timer, whatever the clock says.
package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	corev1 "k8s.io/api/core/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/discovery"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/hooks"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/outcome"
)

// Invoker re-invokes the function to continue a long drain.
type Invoker interface {
	Invoke(ctx context.Context, in *lambda.InvokeInput, opts ...func(*lambda.Options)) (*lambda.InvokeOutput, error)
}

// Clients are the APIs the handler uses.
type Clients struct {
	Kube   kubernetes.Interface
	EC2    instance.EC2API
	ASG    lifecycle.API
	Lambda Invoker // nil: long drains are not continued
	// AutoScaling serves the sweep (groups, hooks, SetInstanceHealth) and
	// reads a group's tags (ASG_TAG_KEY); nil: the sweep does not look for
	// hooks left waiting, and no group is ours by its tag.
	AutoScaling AutoScaling
	// Hooks puts the function's lifecycle hooks on tagged groups at each
	// sweep (ASG_TAG_KEY: internal/hooks); nil: it does not.
	Hooks discovery.API
	// Self is Lambda's view of the function itself, where the removal of
	// its deployment is marked (internal/hooks); nil: no mark is read.
	Self hooks.SelfAPI
}

// Handler handles invocations.
type Handler struct {
	cfg config.Config
	c   Clients
	log *slog.Logger
	// clock is what the handler, and every package it calls, reads the
	// time from and waits on. The invocation's own deadline (its context's)
	// and the deadlines derived from it run on the real clock.
	clock clock.WithTicker
	// StoppingPollInterval is how often EC2 is asked while an instance stops.
	StoppingPollInterval time.Duration
	metrics              io.Writer // EMF lines (nil: none)
	// outcomes puts the events the people on call route (nil: none)
	outcomes *outcome.Publisher
	// foreign remembers instances found without the cluster tag, so that a
	// warm function answers their later events with no AWS call (the EC2
	// state-change rule cannot filter by tag: every instance of the account
	// and region invokes the function).
	foreign *utilcache.LRUExpireCache
	// hooks puts the sweep's hooks on tagged groups, heeding the removal
	// mark (internal/hooks)
	hooks *hooks.Keeper
	// groups keeps the groups' policy tags a while (grouppolicy.go)
	groups *utilcache.LRUExpireCache
}

// Foreign instances are remembered for foreignTTL (an instance tagged into
// the cluster after its first event is seen again after at most that long;
// the sweep catches what it missed meanwhile), at most foreignMax of them.
const (
	foreignTTL = 10 * time.Minute
	foreignMax = 10000
)

// Option changes a Handler that New builds.
type Option func(*Handler)

// WithClock makes the Handler, and every package it calls, read the time
// from c and wait on it (tests, the simulation); the default is the real
// clock.
func WithClock(c clock.WithTicker) Option {
	return func(h *Handler) { h.clock = c }
}

// now is the time by the handler's clock.
func (h *Handler) now() time.Time { return h.clock.Now() }

// New returns a Handler.
func New(cfg config.Config, c Clients, log *slog.Logger, opts ...Option) *Handler {
	if log == nil {
		log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	h := &Handler{cfg: cfg, c: c, log: log, clock: clock.RealClock{}, StoppingPollInterval: 2 * time.Second}
	for _, o := range opts {
		o(h)
	}
	if h.clock == nil {
		h.clock = clock.RealClock{}
	}
	h.foreign = utilcache.NewLRUExpireCacheWithClock(foreignMax, h.clock)
	h.groups = utilcache.NewLRUExpireCacheWithClock(groupTagsMax, h.clock)
	h.hooks = hooks.New(cfg, hooks.Clients{Hooks: c.Hooks, Self: c.Self}, log, hooks.WithClock(h.clock))
	return h
}

// onFailure is the configured result of a lifecycle action whose drain
// failed (config keeps it a string: it imports no AWS package).
func (h *Handler) onFailure() lifecycle.Result {
	return lifecycle.Result(h.cfg.LifecycleResultOnFailure)
}

// Outcome is the function's response: what was done and why.
type Outcome struct {
	Event              event.Kind `json:"event"`
	Instance           string     `json:"instance,omitempty"`
	Node               string     `json:"node,omitempty"`
	Action             Action     `json:"action"`
	Detail             string     `json:"detail,omitempty"`
	Evicted            []string   `json:"evicted,omitempty"`
	Remaining          []string   `json:"remaining,omitempty"`
	PodsDeleted        []string   `json:"podsDeleted,omitempty"`
	AttachmentsDeleted []string   `json:"attachmentsDeleted,omitempty"`
	// Evidence is what EC2 said of the instance before a release forced
	// anything.
	Evidence        string `json:"evidence,omitempty"`
	LifecycleResult string `json:"lifecycleResult,omitempty"`
	Attempt         int    `json:"attempt,omitempty"`
	DryRun          bool   `json:"dryRun,omitempty"`
	DurationMS      int64  `json:"durationMs"`
	// Instances are the outcomes of each instance of a scheduled change
	// handled in parallel in this invocation (Action ActionPerInstance).
	Instances []Outcome `json:"instances,omitempty"`
	// Sweep is what a sweep looked at and did (Action ActionSwept).
	Sweep *SweepSummary `json:"sweep,omitempty"`
	// Plan is what a dry run would have done on the node.
	Plan *Plan `json:"plan,omitempty"`
	// GroupPolicy is what the group's tags set (GROUP_POLICY_TAGS).
	GroupPolicy *GroupPolicy `json:"groupPolicy,omitempty"`
	// BatchCordoned are the nodes of the group's other instances in
	// Terminating:Wait that BATCH_CORDON cordoned before this drain's
	// evictions (dry run: would cordon).
	BatchCordoned []string `json:"batchCordoned,omitempty"`
	// Timeline lists this invocation's steps, each with its time.
	Timeline []Step `json:"timeline,omitempty"`

	err error // see Err
}

// Action is what an invocation did, as its Outcome reports it.
type Action string

// Actions an Outcome reports.
const (
	ActionIgnored    Action = "ignored"
	ActionDrained    Action = "drained"
	ActionUnfinished Action = "drain-unfinished" // an advisory drain ended at its deadline with pods left (no hook to complete)
	// ActionEndedElsewhere: the drain ended, but Auto Scaling refused its
	// completion as no longer active: the action had ended otherwise (its
	// hook timed out or was deleted, someone else completed it), maybe while
	// pods were still on the node; never told drained
	ActionEndedElsewhere Action = "ended-elsewhere"
	ActionCordoned       Action = "cordoned"
	ActionReleased       Action = "released"
	ActionNotForced      Action = "not-forced"
	ActionRecovered      Action = "recovered"
	ActionContinued      Action = "continued"
	ActionCompleted      Action = "lifecycle-completed"
	ActionFailed         Action = "failed"
	ActionNoNode         Action = "node-not-found"
	ActionNodeJoined     Action = "node-joined"
	ActionUnmarked       Action = "unmarked"     // a cause's hold lifted (a scheduled change closed, an advisory cause expired)
	ActionFannedOut      Action = "fanned-out"   // one invocation per instance sent
	ActionPerInstance    Action = "per-instance" // see Outcome.Instances
	ActionSwept          Action = "swept"        // see Outcome.Sweep
)

// Handle runs one invocation. A malformed event is an error and changes
// nothing; an error is also returned when nothing was done and a retry may
// help (EC2 or the cluster unreadable). Once a lifecycle action is ours it is
// always completed, and the failure is reported in the Outcome instead.
func (h *Handler) Handle(ctx context.Context, payload json.RawMessage) (Outcome, error) {
	start := h.now()
	ev, cont, err := event.ParseInvocation(payload)
	if err != nil {
		h.log.ErrorContext(ctx, "rejected invocation", "error", err)
		return Outcome{Action: ActionIgnored, Detail: err.Error()}, err
	}
	if cont != nil {
		// a continuation is refused whole, before anything is read or changed:
		// the drain it continues completed its hook when it ran out of attempts
		// or of time (canContinue), so this one is a replay or a stray
		if err := cont.Check(start, h.cfg.MaxContinuations, h.continuationTimeout()); err != nil {
			h.log.ErrorContext(ctx, "rejected invocation", "event", ev, "error", err)
			return Outcome{Event: ev.Kind, Action: ActionIgnored, Detail: err.Error(), Attempt: cont.Attempt}, err
		}
	}
	r := &invocation{h: h, ev: ev, raw: payload, started: start, attempt: 1,
		out: Outcome{Event: ev.Kind, DryRun: h.cfg.DryRun}}
	if cont != nil {
		r.raw, r.started, r.attempt, r.predecessors = cont.Event, cont.StartedAt, cont.Attempt, cont.MayTakeFrom()
		r.startUntold, r.drainTimeout = cont.StartUntold, cont.DrainTimeout
		r.out.Attempt = cont.Attempt
	}
	r.deadline, _ = ctx.Deadline()
	if len(ev.InstanceIDs) > 0 {
		r.out.Instance = ev.InstanceIDs[0]
	}
	r.log = h.log.With("event", ev)
	r.rep = newReport(start, h.now)
	ctx = cluster.WithLogger(ctx, r.log)
	ctx = cluster.WithClock(ctx, h.clock)
	ctx = cluster.WithRetryObserver(ctx, r.rep.retried)
	err = r.end(ctx, r.dispatch(ctx))
	return r.out, err
}

// end ends a run: its duration, timeline and metrics line, and its one
// "handled" log line. The sweep ends the run of each instance it handles so
// too.
func (r *invocation) end(ctx context.Context, err error) error {
	r.recording.Wait()
	r.out.DurationMS = r.h.now().Sub(r.rep.begun).Milliseconds()
	putOutcomes(ctx, r)
	r.finishReport()
	level := slog.LevelInfo
	if err != nil || r.out.Action == ActionFailed {
		level = slog.LevelError
	}
	r.log.Log(ctx, level, "handled", "outcome", r.out, "error", err)
	return err
}

// invocation is one invocation's state.
type invocation struct {
	h       *Handler
	ev      event.Event
	raw     []byte    // the original EventBridge event, for continuations
	started time.Time // when the drain began (first attempt)
	attempt int
	out     Outcome
	log     *slog.Logger
	rep     *report      // timeline and metrics (nil: not recorded)
	claimed *lease.Claim // the instance's lease, while this invocation holds it (nil: none)
	// onMarked, if set, runs once, right after the drain's own mark and
	// before its evictions (a dry run: before its plan): BATCH_CORDON's
	// cordons, so that a storm's nodes are cordoned by their own drains
	// first and the batch writes only those whose drain has not begun
	onMarked func(context.Context)
	// deadline is the invocation's (zero: none): every budget derives from
	// it, whatever context a step was given
	deadline time.Time
	// predecessors are the invocations that handed this drain over (a
	// continuation's): the lease may be taken from them at once
	predecessors []string
	// drainTimeout is the timeout of the drain (a continuation's: the one
	// it began with; zero: not known yet), handed over with it
	drainTimeout time.Duration
	// fromSweep: the sweep took this lifecycle action; its age is unknown
	fromSweep bool
	// recording: the Events recordSoon is writing and the reads begun
	// ahead (readAttachmentsSoon); end waits for them
	recording sync.WaitGroup
	// attachments: the node's VolumeAttachments being read since its pods
	// went (nil: none); waitVolumes takes it
	attachments *attachmentsRead
	// marked: this invocation marked the node for its drain (the drain
	// began here): its first eviction is told (startTeller); startUntold:
	// a continuation of a drain that has evicted nothing yet (told
	// likewise); told: this invocation told the drain's start
	marked, startUntold bool
	told                atomic.Bool
}

func (r *invocation) dispatch(ctx context.Context) error {
	switch r.ev.Kind {
	case event.KindTerminate:
		return (&terminateHook{hook: hook{invocation: r}}).handle(ctx)
	case event.KindLaunch:
		return (&launchHook{hook{invocation: r}}).handle(ctx)
	case event.KindSpotInterruption:
		return (&advisory{r}).advisory(ctx, r.ev.InstanceIDs[0], config.ActionDrain, r.h.cfg.SpotDrainTimeout)
	case event.KindCapacityInterruption:
		return (&advisory{r}).capacityInterruption(ctx)
	case event.KindCapacityBlockExpiry:
		return (&advisory{r}).capacityBlock(ctx)
	case event.KindRebalance:
		return (&advisory{r}).advisory(ctx, r.ev.InstanceIDs[0], r.h.cfg.RebalanceAction, r.h.cfg.DrainTimeout)
	case event.KindScheduledChange:
		return (&advisory{r}).scheduledChange(ctx)
	case event.KindStateChange:
		return (&stateChange{r}).stateChange(ctx)
	case event.KindSweep:
		return (&sweeper{r}).sweep(ctx)
	default: // unknown and test notifications
		r.out.Action, r.out.Detail = ActionIgnored, "not an event node-drainer acts on: "+r.ev.Source+" / "+r.ev.DetailType
		return nil
	}
}

// budget is the invocation's deadline less the margin kept to complete the
// hook or hand over to a continuation.
func (r *invocation) budget(ctx context.Context) time.Time {
	d, ok := r.invocationDeadline(ctx)
	if !ok {
		d = r.h.now().Add(15 * time.Minute)
	}
	return d.Add(-r.h.cfg.DeadlineMargin)
}

// invocationDeadline is the Lambda deadline: the one Handle was given, or
// ctx's for a run made without it.
func (r *invocation) invocationDeadline(ctx context.Context) (time.Time, bool) {
	if !r.deadline.IsZero() {
		return r.deadline, true
	}
	return ctx.Deadline()
}

// reserved bounds ctx for the work done after the budget (Events on the
// Node, the continuation): the first half of the margin. The second half is
// the completion's alone, so nothing else can make the hook miss it.
func (r *invocation) reserved(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := r.invocationDeadline(ctx)
	if !ok {
		return context.WithCancel(ctx)
	}
	// not bounded by ctx's own end: a step's context may end at the budget,
	// and this work comes after it
	return context.WithDeadline(context.WithoutCancel(ctx), d.Add(-r.h.cfg.DeadlineMargin/2))
}

// ours describes the instance and says whether it belongs to this cluster.
// An instance EC2 no longer knows cannot be checked; the node lookup (in this
// cluster only) decides then.
// An instance found foreign is remembered (foreignTTL): its next events are
// answered from memory, with no AWS call and no cluster request.
func (r *invocation) ours(ctx context.Context, id string) (instance.Instance, bool, error) {
	if v, ok := r.h.foreign.Get(id); ok {
		f := v.(foreignSeen)
		r.out.Action = ActionIgnored
		r.out.Detail = fmt.Sprintf("instance %s has no tag %s: not this cluster's (as EC2 said at %s)", id, r.h.cfg.ClusterTagKey, f.at.UTC().Format(time.RFC3339))
		return instance.Instance{ID: id, Tags: f.clusterTags}, false, nil
	}
	inst, err := instance.Describe(ctx, r.h.c.EC2, r.h.clock, id)
	if err != nil {
		return inst, false, err
	}
	if inst.Found && !inst.HasTag(r.h.cfg.ClusterTagKey) {
		r.h.foreign.Add(id, foreignSeen{at: r.h.now(), clusterTags: clusterTags(inst.Tags)}, foreignTTL)
		r.out.Action = ActionIgnored
		r.out.Detail = fmt.Sprintf("instance %s has no tag %s: not this cluster's", id, r.h.cfg.ClusterTagKey)
		return inst, false, nil
	}
	return inst, true, nil
}

// foreignSeen is what is remembered of an instance found foreign: when,
// and the tags that say which cluster it is (otherCluster), a few bytes.
type foreignSeen struct {
	at          time.Time
	clusterTags map[string]string
}

// clusterTags keeps of an instance's tags those that name a cluster.
func clusterTags(tags map[string]string) map[string]string {
	var kept map[string]string
	for k, v := range tags {
		if strings.HasPrefix(k, clusterTagPrefix) || k == eksClusterNameTag {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[k] = v
		}
	}
	return kept
}

// findNode finds the instance's node. A node this cluster does not have is
// no error: n is nil and the outcome says so.
func (r *invocation) findNode(ctx context.Context, inst instance.Instance) (*corev1.Node, error) {
	n, err := node.Find(ctx, r.h.c.Kube, inst.PrivateDNSName, inst.ID)
	if errors.Is(err, node.ErrNotFound) {
		r.out.Action, r.out.Detail = ActionNoNode, "instance has no node in this cluster"
		r.step(StepLookup, "no node for %s", inst.ID)
		return nil, nil
	}
	if err != nil {
		r.step(StepLookup, "failed (%s)", cluster.Cause(err))
		return nil, err
	}
	r.step(StepLookup, "node %s", n.Name)
	r.out.Node = n.Name
	r.log = r.log.With("node", n.Name)
	return n, nil
}

func (r *invocation) recorder() node.Recorder {
	return node.Recorder{Client: r.h.c.Kube, DryRun: r.h.cfg.DryRun, Clock: r.h.clock}
}

// record writes the Event e on n, within the reserved part of the margin.
func (r *invocation) record(ctx context.Context, n *corev1.Node, e node.Event) {
	ctx, cancel := r.reserved(ctx)
	defer cancel()
	if err := r.recorder().Record(ctx, n, e); err != nil {
		r.log.WarnContext(ctx, "could not record event", "error", err)
	}
}

// recordSoon is record in the background, for an Event that nothing after
// it waits for: a drain's end is told to the people reading the node while
// the hook is being completed, not before. The invocation's end waits for it.
func (r *invocation) recordSoon(ctx context.Context, n *corev1.Node, e node.Event) {
	r.recording.Go(func() { r.record(ctx, n, e) })
}

// invokeSelf invokes the function asynchronously with payload: a drain's
// continuation, one instance of a scheduled event, or a shard of a sweep
// pass.
func (r *invocation) invokeSelf(ctx context.Context, payload []byte) error {
	_, err := r.h.c.Lambda.Invoke(ctx, &lambda.InvokeInput{
		FunctionName:   aws.String(r.h.cfg.FunctionName),
		InvocationType: types.InvocationTypeEvent,
		Payload:        payload,
	})
	return err
}
