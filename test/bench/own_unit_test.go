package bench

import (
	"testing"

	"github.com/node-drainer/node-drainer/internal/handler"
)

// ownSteps is a drain's timeline less its pods-gone steps (every round's),
// and nothing without one.
func TestOwnSteps(t *testing.T) {
	steps := func(s ...handler.Step) *handler.Outcome { return &handler.Outcome{Timeline: s} }
	for _, tc := range []struct {
		name string
		out  *handler.Outcome
		want float64
		ok   bool
	}{
		{"one round", steps(handler.Step{AtMS: 40, Step: "lookup"}, handler.Step{AtMS: 100, Step: "watching"},
			handler.Step{AtMS: 700, Step: "pods-gone"}, handler.Step{AtMS: 760, Step: "evicted"}, handler.Step{AtMS: 800, Step: "hook-completed"}), 0.2, true},
		{"two rounds", steps(handler.Step{AtMS: 100, Step: "watching"}, handler.Step{AtMS: 600, Step: "pods-gone"},
			handler.Step{AtMS: 650, Step: "watching"}, handler.Step{AtMS: 850, Step: "pods-gone"}, handler.Step{AtMS: 900, Step: "hook-completed"}), 0.2, true},
		{"no eviction", steps(handler.Step{AtMS: 40, Step: "lookup"}, handler.Step{AtMS: 90, Step: "hook-completed"}), 0.09, false},
		{"no timeline", &handler.Outcome{}, 0, false},
	} {
		got, ok := ownSteps(tc.out)
		if ok != tc.ok || (ok && (got < tc.want-1e-9 || got > tc.want+1e-9)) {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
