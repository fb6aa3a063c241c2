package handler

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/drain"
	"github.com/node-drainer/node-drainer/internal/metrics"
	"github.com/node-drainer/node-drainer/internal/outcome"
	"github.com/node-drainer/node-drainer/internal/version"
)

// Step is one step of an invocation and when it ended, counted from the
// invocation's start: the outcome's timeline answers "why didn't it drain"
// in one line.
type Step struct {
	AtMS   int64  `json:"atMs"`
	Step   string `json:"step"`
	Detail string `json:"detail,omitempty"`
}

// Steps of the timeline.
const (
	StepLookup        = "lookup"
	StepLeftAlone     = "left-alone"
	StepPlanned       = string(drain.PhasePlanned)
	StepMarked        = "marked"
	StepEvicting      = "evicting"
	StepWatching      = string(drain.PhaseWatching)
	StepPodsGone      = string(drain.PhaseGone)
	StepPDBWait       = "pdb-wait"
	StepEvicted       = "evicted"
	StepVolumes       = "volumes-released"
	StepConfirmed     = "confirmed-down"
	StepCordoned      = "cordoned"
	StepForceReleased = "force-released"
	StepOutOfService  = "out-of-service-taint"
	StepContinued     = "continued"
	StepHookCompleted = "hook-completed"
)

// WithMetrics makes the Handler write one CloudWatch embedded metric format
// line per invocation to w (the function's stdout); without it none is
// written.
func WithMetrics(w io.Writer) Option {
	return func(h *Handler) {
		if h.metrics = nil; w != nil {
			h.metrics = &lineWriter{w: w}
		}
	}
}

// lineWriter writes one metrics line at a time: the instances of a Health
// event run in parallel, each ending with its line (a data race on the
// writer, found by make race).
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// report is what one invocation observed, for its timeline and metrics. A
// nil report (an instance handled inside another invocation) records
// nothing.
type report struct {
	mu            sync.Mutex
	begun         time.Time
	now           func() time.Time
	steps         []Step
	pdbBlocked    time.Duration
	retries       map[string]int
	forceReleased time.Duration // the abrupt force-release of an instance gone
	hookResult    string        // the result a completion succeeded with
	hookReason    string        // why: the outcome's action, at-deadline, dry-run
	drainEnded    bool
	drainLength   time.Duration
	// drainLeft: the drain did not finish in this invocation (handed
	// over, or an advisory drain ended with pods left); leftWhy is why,
	// when more than pods were left (the last failure)
	drainLeft bool
	leftWhy   string
	// outcome events put, and not put by why (OUTCOME_EVENT_BUS)
	outcomesPut  int
	outcomesLost outcome.Lost
	// policyDefaulted: values of the group's policy not taken (grouppolicy.go)
	policyDefaulted int
}

func newReport(begun time.Time, now func() time.Time) *report {
	return &report{begun: begun, now: now, retries: map[string]int{}}
}

// step adds a step to the timeline, now.
func (r *invocation) step(name, format string, args ...any) {
	rep := r.rep
	if rep == nil {
		return
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	rep.steps = append(rep.steps, Step{AtMS: rep.now().Sub(rep.begun).Milliseconds(), Step: name, Detail: fmt.Sprintf(format, args...)})
}

// retried counts a Kubernetes call retried for cause.
func (rep *report) retried(cause string) {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	rep.retries[cause]++
}

// pdbWait is the drain's report of a pod a PodDisruptionBudget held.
func (r *invocation) pdbWait(p drain.Pod, pdbs string, waited time.Duration, evicted bool) {
	what := "then evicted"
	if !evicted {
		what = "still held"
	}
	r.step(StepPDBWait, "%s held by %s for %s, %s", p, pdbs, waited.Round(time.Millisecond), what)
	if r.rep != nil {
		r.rep.mu.Lock()
		r.rep.pdbBlocked += waited
		r.rep.mu.Unlock()
	}
}

// hookCompleted records a completion this invocation made.
func (r *invocation) hookCompleted(result string) {
	if r.rep == nil {
		return
	}
	reason := string(r.out.Action)
	switch {
	case r.h.cfg.DryRun:
		reason = "dry-run"
	case r.out.Action == ActionFailed:
		reason = "at-deadline" // completed because the drain's time ran out
	}
	r.rep.mu.Lock()
	r.rep.hookResult, r.rep.hookReason = result, reason
	r.rep.mu.Unlock()
	r.step(StepHookCompleted, "%s (%s)", result, reason)
}

// drainEnded records that a drain ended in this invocation (drained, or
// given up), started long ago for a continued drain.
func (r *invocation) drainEnded() {
	if r.rep == nil {
		return
	}
	r.rep.mu.Lock()
	r.rep.drainEnded, r.rep.drainLength = true, r.h.now().Sub(r.started)
	r.rep.mu.Unlock()
}

// drainNotDone records that this invocation leaves its drain unfinished:
// err is the last failure (nil when only pods were left, which are in
// r.out.Remaining).
func (r *invocation) drainNotDone(err error) {
	if r.rep == nil {
		return
	}
	r.rep.mu.Lock()
	defer r.rep.mu.Unlock()
	r.rep.drainLeft = true
	if err != nil {
		r.rep.leftWhy = err.Error()
	}
}

// finishReport puts the timeline in the outcome and writes the
// invocation's metrics line (metricsLine).
func (r *invocation) finishReport() {
	rep := r.rep
	rep.mu.Lock()
	defer rep.mu.Unlock()
	r.out.Timeline = rep.steps
	if r.h.metrics == nil {
		return
	}
	if err := rep.metricsLine(r.out, r.h.cfg).Write(r.h.metrics, r.h.now()); err != nil {
		r.log.Warn("could not write metrics", "error", err)
	}
}

// metricsLine is the invocation's metrics line (rep locked): one directive
// by event kind and result, one by lifecycle result and by completion
// reason for a completed hook.
func (rep *report) metricsLine(out Outcome, cfg config.Config) *metrics.Entry {
	result := string(out.Action)
	if cfg.DryRun {
		result = "dry-run"
	}
	// FunctionName in every dimension set: two deployments in one account
	// and region keep their metrics, and their alarms, apart
	fn := metrics.Dimension{Name: metrics.DimFunctionName, Value: cfg.FunctionName}
	if fn.Value == "" {
		fn.Value = "node-drainer" // outside Lambda (local runs)
	}
	e := metrics.New(metrics.Namespace)
	d := e.Directive([]metrics.Dimension{fn, {Name: metrics.DimEvent, Value: string(out.Event)}, {Name: metrics.DimResult, Value: result}})
	d.Put(metrics.Invocations, metrics.Count, 1)
	d.Put(metrics.DurationSeconds, metrics.Seconds, float64(out.DurationMS)/1000)
	if rep.drainEnded {
		d.Put(metrics.DrainSeconds, metrics.Seconds, rep.drainLength.Seconds())
	}
	// a metric absent from a line creates no series for its dimensions (each
	// series is billed): drain metrics only where a drain ran
	if rep.drainEnded || len(out.Evicted) > 0 || rep.pdbBlocked > 0 || out.Action == ActionContinued {
		d.Put(metrics.PodsEvicted, metrics.Count, float64(len(out.Evicted)))
		d.Put(metrics.PDBBlockedSeconds, metrics.Seconds, rep.pdbBlocked.Seconds())
	}
	if !cfg.DryRun && (len(out.AttachmentsDeleted) > 0 || len(out.PodsDeleted) > 0) {
		d.Put(metrics.RWOForceReleases, metrics.Count, float64(len(out.AttachmentsDeleted)))
		d.Put(metrics.RWOReleaseSeconds, metrics.Seconds, rep.forceReleased.Seconds())
	}
	if out.Action == ActionContinued {
		d.Put(metrics.Continuations, metrics.Count, 1)
	}
	if lost := rep.outcomesLost.Total(); rep.outcomesPut > 0 || lost > 0 {
		d.Put(metrics.OutcomeEventsPut, metrics.Count, float64(rep.outcomesPut))
		d.Put(metrics.OutcomeEventsFailed, metrics.Count, float64(lost))
		for why, n := range rep.outcomesLost {
			d.Put(metrics.OutcomeEventsFailedFor+why, metrics.Count, float64(n))
		}
	}
	rep.putCounters(d)
	if sw := out.Sweep; sw != nil {
		for name, n := range map[string]int{metrics.SweepHooks: len(sw.Hooks), metrics.SweepDeadNodes: len(sw.Dead), metrics.SweepUnmarked: len(sw.Unmarked),
			metrics.SweepOrphans: len(sw.Orphans), metrics.SweepZombies: len(sw.Zombies), metrics.SweepReplaced: len(sw.Replaced), metrics.SweepFailed: len(sw.Failed)} {
			d.Put(name, metrics.Count, float64(n))
		}
		if sw.RemovalMarked != "" { // no series where no mark ever is
			d.Put(metrics.SweepRemovalMarked, metrics.Count, 1)
		}
	}
	if rep.hookResult != "" {
		e.Directive([]metrics.Dimension{fn, {Name: metrics.DimLifecycleResult, Value: rep.hookResult}},
			[]metrics.Dimension{fn, {Name: metrics.DimCompletionReason, Value: rep.hookReason}}).
			Put(metrics.HooksCompleted, metrics.Count, 1)
	}
	e.Property("instance", out.Instance)
	e.Property("node", out.Node)
	e.Property("version", version.Get()) // which build, for Logs Insights across an upgrade
	return e
}

// putCounters puts the Kubernetes calls retried, by cause and in all, and
// the group policy's values not taken.
func (rep *report) putCounters(d *metrics.Directive) {
	if rep.policyDefaulted > 0 { // no series where no tag is ever refused
		d.Put(metrics.GroupPolicyDefaulted, metrics.Count, float64(rep.policyDefaulted))
	}
	total := 0
	for cause, n := range rep.retries {
		d.Put(metrics.KubeAPIRetriesFor+cause, metrics.Count, float64(n))
		total += n
	}
	if total > 0 {
		d.Put(metrics.KubeAPIRetries, metrics.Count, float64(total))
	}
}
