package bench

import (
	"context"
	"testing"
	"time"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/test/harness"
)

// foreignEvents is how many state changes of one foreign instance a warm
// function answers per run.
const foreignEvents = 20

// BenchmarkForeignEvent: the cost of an event node-drainer must ignore. The
// EC2 state-change rule cannot filter by cluster tag, so every instance of
// the account and region invokes the function. Per run, a fresh function
// (cold start) gets the state changes of instances of another cluster:
//   - init_ms: process start to its first Runtime API next request;
//   - foreign_event_first_ms: a foreign instance's first event on the warm
//     function (one DescribeInstances to learn it is foreign);
//   - foreign_event_ms: its later events, answered from memory (the median
//     of foreignEvents), start to response as the runtime saw them.
func BenchmarkForeignEvent(b *testing.B) {
	needHarness(b)
	defer failedIfFailed(b, "init_ms", "foreign_event_first_ms", "foreign_event_ms")
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	for i := range *flagRuns {
		initMS, first, warm := foreignRun(b, ctx, i)
		progress("foreign_event run %d: init %.1f ms, first event %.2f ms, later events %.2f ms (median of %d)", i+1, initMS, first, warm, foreignEvents)
		record("init_ms", initMS)
		record("foreign_event_first_ms", first)
		record("foreign_event_ms", warm)
	}
	b.ReportMetric(0, "ns/op")
	report(b, "init_ms")
	report(b, "foreign_event_first_ms")
	report(b, "foreign_event_ms")
}

func foreignRun(b *testing.B, ctx context.Context, run int) (initMS, firstMS, warmMS float64) {
	name := sceneName("foreign")
	insts, err := env.CreateASG(ctx, harness.ASGSpec{Name: name, Size: 2, ClusterTag: "kubernetes.io/cluster/someone-else"})
	if err != nil {
		b.Fatal(err)
	}
	f, err := startFunction(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer f.stop()
	invoke := func(id, state string) handler.Outcome {
		payload, err := harness.StateChangeEvent(id, state)
		if err != nil {
			b.Fatal(err)
		}
		out, err := harness.Invoke(ctx, f.rt, payload)
		if err != nil {
			f.dump(b)
			b.Fatal(err)
		}
		if out.Action != handler.ActionIgnored {
			f.dump(b)
			b.Fatalf("run %d: event for %s: outcome %+v, want ignored", run, id, out)
		}
		return out
	}
	// the cold start, with the first foreign instance
	invoke(insts[0].ID, "stopping")
	// the second instance's first event on the warm function, then its
	// later ones
	invoke(insts[1].ID, "stopping")
	for j := range foreignEvents {
		// every one of these states makes the function ask whose instance it is
		invoke(insts[1].ID, []string{"stopped", "running", "stopping", "shutting-down", "terminated"}[j%5])
	}
	invs := f.rt.Invocations()
	if len(invs) != foreignEvents+2 {
		b.Fatalf("%d invocations recorded, want %d", len(invs), foreignEvents+2)
	}
	if invs[0].Init <= 0 {
		b.Fatalf("the cold start's init was not measured: %+v", invs[0])
	}
	ms := func(inv int) float64 { return float64(invs[inv].End.Sub(invs[inv].Start).Microseconds()) / 1000 }
	var warm []float64
	for j := 2; j < len(invs); j++ {
		warm = append(warm, ms(j))
	}
	return float64(invs[0].Init.Microseconds()) / 1000, ms(1), medianOf(warm)
}
