// Package soak plays the simulation's random days (test/sim's plans: the
// configuration, the nodes and workloads, the events and the faults of one
// seed) on the real harness with the real bootstrap under the Lambda
// runtime emulation, and checks the simulation's invariants from outside
// only: what the apiserver was asked (the fault proxy in front of it
// records every request of the function, as an audit log would), the
// lifecycle calls Auto Scaling received (moto's record), watches of pods,
// Nodes and VolumeAttachments, EC2's states as the soak set them, and the
// Lambda platform's record of invocations. Never the function's own logs.
//
// A day's clock is compressed: the plan's world times (when an event
// happens, how long a stop lasts, how late a delivery comes, the sweep's
// schedule) and the function's own timeouts are divided by Compress; Auto
// Scaling's heartbeat timeouts are not (they are the hooks' own).
//
// `make soak` (SOAK_MINUTES, default 30; SEED=N plays one day again) prints
// soak_days= soak_events= soak_faults= soak_minutes= soak_checks_I1..=
// soak_violations=, and how often each event kind and fault class was
// played. docs/testing.md says what each invariant is checked with here,
// and what the soak does not play.
package soak

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/node-drainer/node-drainer/test/sim"
)

// Compress divides the plan's world times and the function's timeouts.
const Compress = 6

// scaled is a world time of the plan on the soak's clock.
func scaled(d time.Duration) time.Duration { return d / Compress }

// numInv is the number of invariants (sim.Names).
const numInv = 12

// Violation is one invariant broken on a day.
type Violation struct {
	Inv  int
	At   time.Duration // since the day began
	When time.Time
	What string
}

func (v Violation) String() string {
	return fmt.Sprintf("I%d at %.1fs: %s", v.Inv, v.At.Seconds(), v.What)
}

// Tally is what days came to: checks per invariant, violations, and how
// often each event kind and fault class was played.
type Tally struct {
	mu         sync.Mutex
	Days       int
	Checks     [numInv + 1]uint64
	Violations int
	Events     map[string]int
	Faults     map[string]int
	Failed     []int64 // the seeds of the days that broke an invariant
	First      time.Time
	FirstSeed  int64 // the day of the first violation
	Errors     []string
}

// NewTally is an empty tally.
func NewTally() *Tally { return &Tally{Events: map[string]int{}, Faults: map[string]int{}} }

// Add adds a day's result.
func (t *Tally) Add(r *Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.Err != nil && len(r.Violations) == 0 {
		t.Errors = append(t.Errors, fmt.Sprintf("seed %d: %v", r.Seed, r.Err))
		return
	}
	for _, v := range r.Violations {
		if t.First.IsZero() || v.When.Before(t.First) {
			t.First, t.FirstSeed = v.When, r.Seed
		}
	}
	t.Days++
	for i := range t.Checks {
		t.Checks[i] += r.Checks[i]
	}
	t.Violations += len(r.Violations)
	if len(r.Violations) > 0 {
		t.Failed = append(t.Failed, r.Seed)
	}
	for k, v := range r.Events {
		t.Events[k] += v
	}
	for k, v := range r.Faults {
		t.Faults[k] += v
	}
}

// Lines are the tally's summary lines.
func (t *Tally) Lines(minutes float64) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	sum := func(m map[string]int) int {
		n := 0
		for k, v := range m {
			if k != "sweep" && !strings.HasPrefix(k, "not-played:") && !strings.HasPrefix(k, "no-op:") {
				n += v
			}
		}
		return n
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(t.Events)) {
		out = append(out, fmt.Sprintf("soak_event %s=%d", k, t.Events[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(t.Faults)) {
		out = append(out, fmt.Sprintf("soak_fault %s=%d", k, t.Faults[k]))
	}
	var checks []string
	for i := 1; i <= numInv; i++ {
		checks = append(checks, fmt.Sprintf("soak_checks_I%d=%d", i, t.Checks[i]))
	}
	out = append(out, fmt.Sprintf("soak_days=%d soak_events=%d soak_sweeps=%d soak_faults=%d soak_minutes=%.1f %s soak_violations=%d soak_errors=%d",
		t.Days, sum(t.Events), t.Events["sweep"], sum(t.Faults), minutes, strings.Join(checks, " "), t.Violations, len(t.Errors)))
	return out
}

// Result is one day's outcome.
type Result struct {
	Seed       int64
	Plan       sim.Plan
	Checks     [numInv + 1]uint64
	Violations []Violation
	Events     map[string]int
	Faults     map[string]int
	Trace      []string
	Minutes    float64
	Err        error // the harness failed the day (not the product)
}
