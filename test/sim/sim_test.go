package sim

import (
	"context"

	"flag"
	"fmt"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var (
	seeds   = flag.Int("seeds", 200, "how many seeds to play")
	seed    = flag.Int64("seed", 1, "the first seed")
	verbose = flag.Bool("trace", false, "print each seed's plan and trace (replay)")
	first   = flag.Bool("first", false, "stop at the first seed that breaks an invariant (finding a bug: how long it takes)")
)

// TestSim plays -seeds days from -seed and prints the summary lines; a
// violated invariant fails it with the seed, the plan and the trace.
func TestSim(t *testing.T) {
	begun := time.Now()
	var (
		mu     sync.Mutex
		steps  int
		checks [numInvariants + 1]uint64
		bad    []Result
		played int
		// watches from a resourceVersion, and the writes between their
		// read and their start they delivered
		watchesFrom, replayed    int
		dups, throttled, dropped int
		newUnseen                int
		deploys                  = map[string]int{}
		policies                 = map[string]int{}

		found atomic.Bool
		// the first failing seed, told to a goroutine outside the bubbles,
		// which reads the real clock (a bubble's starts in 2000)
		firstSeed = make(chan [2]int64, 1)
		firstAt   = make(chan string, 1)
	)
	go func() {
		f := <-firstSeed
		firstAt <- fmt.Sprintf("sim_first_failing_seed=%d after %.1fs (%d seeds played)", f[0], time.Since(begun).Seconds(), f[1])
	}()
	t.Run("seeds", func(t *testing.T) {
		for s := *seed; s < *seed+int64(*seeds); s++ {
			t.Run(fmt.Sprint(s), func(t *testing.T) {
				t.Parallel()
				if *first && found.Load() {
					return
				}
				var log *slog.Logger
				if *verbose {
					log = slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
				}
				synctest.Test(t, func(*testing.T) {
					r := Run(s, log)
					mu.Lock()
					defer mu.Unlock()
					played++
					steps += r.Steps
					watchesFrom += r.WatchesFrom
					replayed += r.Replayed
					dups += r.Duplicates
					throttled += r.Throttled
					dropped += r.Dropped
					newUnseen += r.NewUnseen
					for k, n := range r.Deploys {
						deploys[k] += n
					}
					for k, n := range r.Policies {
						policies[k] += n
					}
					for i := range checks {
						checks[i] += r.Checks[i]
					}
					if len(r.Violations) > 0 {
						bad = append(bad, r)
						if !found.Swap(true) {
							firstSeed <- [2]int64{s, int64(played)}
						}
					}
					if *verbose {
						fmt.Printf("seed %d: %s\n%s\n", s, r.Plan, strings.Join(r.Trace, "\n"))
					}
				})
			})
		}
	})
	sort.Slice(bad, func(i, j int) bool { return bad[i].Seed < bad[j].Seed })
	violations := 0
	for _, r := range bad {
		violations += len(r.Violations)
	}
	fmt.Printf("sim_seeds=%d\nsim_first_seed=%d\nsim_steps=%d\nsim_invariants=%d\n", played, *seed, steps, numInvariants)
	for i := 1; i <= numInvariants; i++ {
		fmt.Printf("sim_checks_%s=%d  # %s\n", strings.SplitN(Names[i], " ", 2)[0], checks[i], strings.SplitN(Names[i], " ", 2)[1])
	}
	fmt.Printf("sim_watches_from_version=%d\nsim_watch_replayed=%d  # writes between a read and its watch, delivered on it\n", watchesFrom, replayed)
	fmt.Printf("sim_lambda_duplicates=%d  # events Lambda's queue ran twice\nsim_lambda_throttled=%d\nsim_lambda_dropped=%d  # throttled past the maximum event age\n", dups, throttled, dropped)
	fmt.Printf("sim_ec2_new_not_found=%d  # describes of a just-launched instance answered NotFound\n", newUnseen)
	keys := make([]string, 0, len(deploys))
	for k := range deploys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys { // days of deployments, each kind of change, the faults on calls about hooks
		fmt.Printf("sim_deploy_%s=%d\n", k, deploys[k])
	}
	keys = keys[:0]
	for k := range policies {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys { // what the policies' days played (policy.go)
		fmt.Printf("sim_policy_%s=%d\n", k, policies[k])
	}
	fmt.Printf("sim_violations=%d\nsim_seconds=%.1f\n", violations, time.Since(begun).Seconds())
	if found.Load() {
		fmt.Println(<-firstAt)
	}
	for _, r := range bad {
		for _, v := range r.Violations {
			t.Errorf("seed %d: %s", r.Seed, v)
		}
	}
	if len(bad) > 0 {
		r := bad[0]
		t.Errorf("replay: make sim SEEDS=1 SEED=%d\nplan: %s", r.Seed, r.Plan)
		if !*verbose {
			tail := r.Trace
			if len(tail) > 200 {
				tail = tail[len(tail)-200:]
			}
			t.Errorf("trace of seed %d (last %d steps):\n%s", r.Seed, len(tail), strings.Join(tail, "\n"))
		}
	}
}

func init() {
	// apimachinery's error handlers rate-limit on a clock shared by every
	// bubble (each bubble's time starts in 2000): without this, a seed's
	// reflector sleeps until another seed's last error, years away. Their
	// log lines are the apiserver's faults the sim injects: not worth printing.
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{func(context.Context, error, string, ...any) {}}
}
