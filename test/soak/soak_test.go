package soak

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/soak/pick"
)

var (
	env       *harness.Env
	bootstrap string
)

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, &env, &bootstrap))
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestSoak plays random days for SOAK_MINUTES (SOAK_PARALLEL at once), or
// the one day of SOAK_SEED, and fails when a day broke an invariant. A day
// starts only when it should end before SOAK_MINUTES are over (Describe's
// length); of the seeds ahead, the chooser takes first the days that play
// what no day has played yet (pick).
// SOAK_BOOTSTRAP plays them with that bootstrap instead of the tree's.
func TestSoak(t *testing.T) {
	minutes := envInt("SOAK_MINUTES", 30)
	parallel := envInt("SOAK_PARALLEL", 12)
	began := time.Now()
	deadline := began.Add(time.Duration(minutes) * time.Minute)
	// next is the day to play next, when one fits before the deadline: the
	// chooser's (pick) from a random seed on, or the one day of SOAK_SEED
	var next func(i int) (int64, bool)
	if s, err := strconv.ParseInt(os.Getenv("SOAK_SEED"), 10, 64); err == nil {
		next = func(i int) (int64, bool) { return s, i == 0 }
	} else {
		days := pick.New(int64(1+rand.IntN(1<<30)), 4*parallel, Describe)
		if k := os.Getenv("SOAK_PREFER"); k != "" {
			days.Prefer = strings.Split(k, ",") // only days that play these kinds (a fix's teeth)
		}
		next = func(int) (int64, bool) {
			d, ok := days.Next(time.Until(deadline))
			return d.Seed, ok
		}
	}
	if b := os.Getenv("SOAK_BOOTSTRAP"); b != "" {
		bootstrap = b // a bootstrap built apart (a fix reverted: docs/testing.md, the soak's teeth)
	}
	if os.Getenv("SOAK_TRACE") == "1" {
		Live = os.Stdout
	}
	soak, stopSoak := context.WithCancel(context.Background())
	defer stopSoak()
	if os.Getenv("SOAK_FIRST") == "1" {
		OnViolation = stopSoak
	}
	tally := NewTally()
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := 0; time.Now().Before(deadline) && soak.Err() == nil; i++ {
		sem <- struct{}{}
		seed, ok := next(i)
		if !ok {
			<-sem
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(soak, 40*time.Minute)
			defer cancel()
			r := PlayDay(ctx, env, bootstrap, seed)
			if soak.Err() != nil && len(r.Violations) == 0 {
				fmt.Printf("soak_day seed=%d cut short: another day broke an invariant first\n", seed)
				return
			}
			report(t, r)
			tally.Add(r)
		})
		select { // the days' set-ups apart (each creates a group, nodes and workloads at once)
		case <-time.After(5 * time.Second):
		case <-soak.Done():
		}
	}
	wg.Wait()
	for _, l := range tally.Lines(time.Since(began).Minutes()) {
		fmt.Println(l)
	}
	if !tally.First.IsZero() {
		fmt.Printf("soak_first_violation_minutes=%.1f soak_first_violation_seed=%d\n", tally.First.Sub(began).Minutes(), tally.FirstSeed)
	}
	for _, e := range tally.Errors {
		t.Errorf("harness: %s", e)
	}
	if tally.Violations > 0 {
		t.Errorf("%d violations on the days of seeds %v (make soak SEED=N plays one again)", tally.Violations, tally.Failed)
	}
	if tally.Days == 0 {
		t.Errorf("no day was played")
	}
}

var printMu sync.Mutex

// report prints a day's line; a failing day's seed, plan, violations and
// trace, and how to play it again.
func report(t *testing.T, r *Result) {
	printMu.Lock()
	defer printMu.Unlock()
	var evs []string
	for _, k := range slices.Sorted(maps.Keys(r.Events)) {
		evs = append(evs, fmt.Sprintf("%s:%d", k, r.Events[k]))
	}
	fmt.Printf("soak_day seed=%d minutes=%.1f violations=%d events=%s err=%v\n", r.Seed, r.Minutes, len(r.Violations), strings.Join(evs, ","), r.Err)
	if len(r.Violations) == 0 && r.Err == nil && os.Getenv("SOAK_SEED") == "" {
		return
	}
	fmt.Printf("--- day of seed %d (make soak SEED=%d plays it again)\nplan: %s\n", r.Seed, r.Seed, r.Plan)
	for _, v := range r.Violations {
		fmt.Printf("VIOLATION %s\n", v)
	}
	for _, l := range r.Trace {
		fmt.Println("  " + l)
	}
	t.Logf("day of seed %d: %d violations", r.Seed, len(r.Violations))
}
