package handler

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/logging"
	"github.com/node-drainer/node-drainer/internal/metrics"
)

// syncBuffer is the function's standard output: the logger and the metrics
// lines both write to it, each write one line.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n"))
}

// A drain's metrics line reaches CloudWatch Logs at every level the
// templates allow (logging.Levels): the function, as main wires it
// (internal/logging's logger and the metrics on one output), applies the
// level itself, and Lambda's filter, at the level the templates give it
// (logging.LambdaFilterLevel), keeps the metrics line. With the filter at
// the chosen level instead (the templates' former configuration) the line
// is dropped at WARN and ERROR.
func TestMetricsKeptAtEveryLogLevel(t *testing.T) {
	for _, name := range logging.Levels {
		t.Run(name, clustertest.InBubble(func(t *testing.T) {
			level, err := logging.ParseLevel(name)
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(append(aNode(), attachment("csi-db", idA, "pv-db"))...)
			e.ec2.readings[idA] = []reading{running}
			out := &syncBuffer{}
			h := New(e.cfg, Clients{Kube: e.kube, EC2: e.ec2, ASG: e.asg, AutoScaling: e.asg, Lambda: e.lam},
				logging.New(out, "JSON", level), WithClock(newMovingClock(func() time.Time { return e.now })), WithMetrics(out))
			h.StoppingPollInterval = 10 * time.Millisecond
			res, err := e.handleWith(h, terminateEvent(idA), 5*time.Second)
			if err != nil || res.Action != ActionDrained {
				t.Fatalf("outcome %+v, error %v: want a drain", res, err)
			}

			var metricLines, logLines [][]byte
			for _, l := range out.lines() {
				if bytes.Contains(l, []byte(`"_aws"`)) {
					metricLines = append(metricLines, l)
				} else {
					logLines = append(logLines, l)
				}
			}
			if len(metricLines) != 1 {
				t.Fatalf("want one metrics line, got %d:\n%s", len(metricLines), bytes.Join(out.lines(), []byte("\n")))
			}
			if err := metrics.Validate(metricLines[0]); err != nil {
				t.Fatalf("metrics line is not EMF: %v", err)
			}
			if err := metrics.CheckCatalog(metricLines[0]); err != nil {
				t.Fatalf("metrics line leaves the catalog: %v", err)
			}
			if !logging.LambdaKeeps(metricLines[0], logging.LambdaFilterLevel) {
				t.Errorf("Lambda's filter at %s drops the metrics line: %s", logging.LambdaFilterLevel, metricLines[0])
			}
			handled := false
			for _, l := range logLines {
				var rec struct{ Level, Message string }
				if err := json.Unmarshal(l, &rec); err != nil {
					t.Fatalf("log line is not JSON: %s", l)
				}
				var got slog.Level
				if err := got.UnmarshalText([]byte(rec.Level)); err != nil || got < level {
					t.Errorf("log line below %s written: %s", name, l)
				}
				if !logging.LambdaKeeps(l, logging.LambdaFilterLevel) {
					t.Errorf("Lambda's filter at %s drops a log line the function wrote: %s", logging.LambdaFilterLevel, l)
				}
				handled = handled || rec.Message == "handled"
			}
			if want := level <= slog.LevelInfo; handled != want {
				t.Errorf("the INFO line \"handled\" written: %t, want %t at %s", handled, want, name)
			}
			if old := logging.LambdaKeeps(metricLines[0], name); old != (level <= slog.LevelInfo) {
				t.Errorf("Lambda's filter at %s itself keeps the metrics line: %t (the rule as stated drops a line without level above INFO)", name, old)
			}
		}))
	}
}
