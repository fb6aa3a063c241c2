package handler

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/metrics"
	"github.com/node-drainer/node-drainer/internal/version"
)

// emf is one metrics line, decoded after it was validated as EMF.
type emf map[string]any

func metricsLine(t *testing.T, out *bytes.Buffer) emf {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one metrics line per invocation, got %d: %q", len(lines), out.String())
	}
	if err := metrics.Validate([]byte(lines[0])); err != nil {
		t.Fatalf("metrics line is not EMF: %v\n%s", err, lines[0])
	}
	if err := metrics.CheckCatalog([]byte(lines[0])); err != nil {
		t.Fatalf("metrics line leaves the catalog: %v\n%s", err, lines[0])
	}
	var m emf
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func steps(out Outcome) []string {
	var s []string
	for _, st := range out.Timeline {
		s = append(s, st.Step)
	}
	return s
}

// The outcome's timeline lists each step in order, offsets never going back
// (the handler's clock is the env's fixed one); one EMF line carries the
// invocation's metrics.
func TestTimelineAndMetrics(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload []byte
		ec2     reading
		setup   func(*env)
		steps   []string // in this order (others may come between)
		values  map[string]any
		timeout time.Duration
	}{
		{
			name: "terminate drained", payload: terminateEvent(idA), ec2: running,
			steps: []string{StepLookup, StepMarked, StepEvicting, StepPlanned, StepWatching, StepPodsGone, StepEvicted, StepVolumes, StepHookCompleted},
			values: map[string]any{"FunctionName": "node-drainer", "Event": "terminate", "Result": "drained", "Invocations": 1.0, "PodsEvicted": 2.0,
				"LifecycleResult": "CONTINUE", "CompletionReason": "drained", "HooksCompleted": 1.0, "PDBBlockedSeconds": 0.0,
				"version": version.Get()},
		},
		{
			name: "terminate held by a PDB until the deadline", payload: terminateEvent(idA), ec2: running, timeout: 1500 * time.Millisecond, // room for the evictions on a loaded machine
			setup:  func(e *env) { e.blocked = []string{"db-0"}; e.cfg.ContinueLongDrains = false },
			steps:  []string{StepLookup, StepMarked, StepEvicting, StepPDBWait, StepEvicted, StepHookCompleted},
			values: map[string]any{"Result": "failed", "PodsEvicted": 1.0, "LifecycleResult": "ABANDON", "CompletionReason": "at-deadline", "HooksCompleted": 1.0},
		},
		{
			name: "stopped: force-released", payload: stateEvent(idA, "stopped", time.Now()), ec2: stopped,
			setup:  func(e *env) { e.cfg.NodeLeaseStaleAfter = 0 },
			steps:  []string{StepLookup, StepConfirmed, StepCordoned, StepForceReleased, StepOutOfService},
			values: map[string]any{"Event": "state-change", "Result": "released", "RWOForceReleases": 1.0, "PodsEvicted": nil, "KubeAPIRetries": nil},
		},
		{
			name: "dry run", payload: terminateEvent(idA), ec2: running, setup: func(e *env) { e.cfg.DryRun = true },
			steps:  []string{StepLookup, StepPlanned, StepHookCompleted},
			values: map[string]any{"Result": "dry-run", "CompletionReason": "dry-run", "LifecycleResult": "CONTINUE"},
		},
		{
			name: "sweep", payload: sweepEvent(), ec2: running,
			values: map[string]any{"Event": "sweep", "Result": "swept", "SweepHooks": 0.0, "SweepDeadNodes": 0.0, "SweepUnmarked": 0.0,
				"SweepOrphans": 0.0, "SweepZombies": 0.0, "SweepReplaced": 0.0, "SweepFailed": 0.0, "PodsEvicted": nil},
		},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv(append(aNode(), attachment("csi-db", idA, "pv-db"))...)
			e.ec2.readings[idA] = []reading{tc.ec2}
			var buf bytes.Buffer
			e.metrics = &buf
			if tc.setup != nil {
				tc.setup(e)
			}
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 5 * time.Second
			}
			out, err := e.handle(t, tc.payload, timeout)
			if err != nil {
				t.Fatalf("error %v (outcome %+v)", err, out)
			}
			got := steps(out)
			i := 0
			for _, s := range got {
				if i < len(tc.steps) && s == tc.steps[i] {
					i++
				}
			}
			if i != len(tc.steps) {
				t.Errorf("timeline %v: want %v in this order", got, tc.steps)
			}
			for j := 1; j < len(out.Timeline); j++ {
				if out.Timeline[j].AtMS < out.Timeline[j-1].AtMS {
					t.Errorf("timeline offsets go back: %+v", out.Timeline)
				}
			}
			m := metricsLine(t, &buf)
			for k, v := range tc.values {
				if m[k] != v {
					t.Errorf("metric %s = %v, want %v (line %v)", k, m[k], v, m)
				}
			}
			if tc.name == "terminate held by a PDB until the deadline" {
				if s, _ := m["PDBBlockedSeconds"].(float64); s <= 0 {
					t.Errorf("PDBBlockedSeconds %v: want the time db-0 was held", m["PDBBlockedSeconds"])
				}
				if !strings.Contains(timelineDetail(out, StepPDBWait), "db/db-0 held by") {
					t.Errorf("pdb-wait step %q: want the pod and its PDBs", timelineDetail(out, StepPDBWait))
				}
			}
		}))
	}
}

func timelineDetail(out Outcome, step string) string {
	for _, s := range out.Timeline {
		if s.Step == step {
			return s.Detail
		}
	}
	return ""
}
