package conformance

import (
	"context"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/test/harness"
)

// The world's side runs in a synctest bubble: a reflector's first error
// there would sleep until a time apimachinery read in real time, and the
// bubble's clock would jump 26 years (every behaviour's 3-minute context
// expired). test/sim's tests replace the handlers in their own init, which
// this package's binary does not run.
func init() { clustertest.BubbleErrorHandlers() }

var (
	sides = flag.String("sides", "sim,real", "the sides to run: sim, real or both")
	only  = flag.String("only", "", "run only the behaviours whose names match this regexp")
)

// verdict is one side's answer for one behaviour ("ok", or why not).
type verdict struct{ err error }

func (v verdict) String() string {
	if v.err == nil {
		return "ok"
	}
	return "FAIL (" + strings.ReplaceAll(v.err.Error(), "\n", " ") + ")"
}

func runSide(s Side, picked []Behaviour) []verdict {
	out := make([]verdict, len(picked))
	for i, b := range picked {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		ns := fmt.Sprintf("conf-%d", i)
		err := s.Namespace(ctx, ns)
		if err == nil {
			err = b.Run(ctx, s, ns)
		}
		cancel()
		out[i] = verdict{err}
	}
	return out
}

// TestConformance runs every behaviour on the world and on the real
// harness, and prints both verdicts of each.
func TestConformance(t *testing.T) {
	began := time.Now()
	var picked []Behaviour
	re := regexp.MustCompile(*only)
	for _, b := range Behaviours {
		if re.MatchString(b.Name) {
			picked = append(picked, b)
		}
	}
	var simV, realV []verdict
	if strings.Contains(*sides, "sim") {
		synctest.Test(t, func(*testing.T) {
			s := newSimSide()
			defer s.lab.Stop()
			simV = runSide(s, picked)
		})
	}
	simSecs := time.Since(began).Seconds()
	if strings.Contains(*sides, "real") {
		e := harness.New(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		r, err := newRealSide(ctx, e)
		cancel()
		if err != nil {
			t.Fatalf("preparing the harness's nodes: %v", err)
		}
		realV = runSide(r, picked)
	}
	mismatches, bothFail := 0, 0
	for i, b := range picked {
		sv, rv := "-", "-"
		var se, re error
		if simV != nil {
			sv, se = simV[i].String(), simV[i].err
		}
		if realV != nil {
			rv, re = realV[i].String(), realV[i].err
		}
		mark := "=="
		switch {
		case simV != nil && realV != nil && (se == nil) != (re == nil):
			mismatches++
			mark = "!="
		case se != nil && re != nil:
			bothFail++
			mark = "XX"
		case simV == nil && re != nil, realV == nil && se != nil:
			mark = "XX"
			bothFail++
		}
		fmt.Printf("%s %-88s sim=%s real=%s\n", mark, b.Name, sv, rv)
	}
	fmt.Printf("conformance_behaviours=%d\nconformance_mismatches=%d\nconformance_failed_both=%d\nconformance_sim_seconds=%.1f\nconformance_seconds=%.1f\n",
		len(picked), mismatches, bothFail, simSecs, time.Since(began).Seconds())
	if mismatches > 0 || bothFail > 0 {
		t.Errorf("%d behaviours differ between the world and the real harness, %d fail where they ran", mismatches, bothFail)
	}
}
