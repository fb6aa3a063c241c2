package bench

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/node-drainer/node-drainer/test/harness"
)

// apiCounts is a reading of the apiserver's request counters: every request
// (apiserver_request_total) by "VERB resource[/subresource]", and the
// function's own under the key fnKey, from API Priority and Fairness: the
// requests dispatched for the FlowSchema node-drainer (rbac.yaml), which
// only the function's group matches.
type apiCounts map[string]float64

const fnKey = "node-drainer (flow schema)"

// peerKey is the peer's own requests (aws-node-termination-handler's
// FlowSchema, harness.PeerGroup).
const peerKey = "aws-node-termination-handler (flow schema)"

// evictionRequests counts every eviction the apiserver was asked for,
// whatever it answered (a 429 of a PDB, a 409, ...); evictionsAccepted the
// ones it accepted (2xx: the pod was evicted, or was already going).
const (
	evictionRequests  = "POST pods/eviction"
	evictionsAccepted = "POST pods/eviction accepted"
)

// scraped are the apiserver's metrics readAPICounts reads.
var scraped = []string{
	"apiserver_request_total", "apiserver_flowcontrol_dispatched_requests_total",
	"apiserver_request_duration_seconds_sum", "apiserver_request_duration_seconds_count",
	"apiserver_flowcontrol_request_wait_duration_seconds_sum", "apiserver_flowcontrol_request_wait_duration_seconds_count",
	"go_cpu_classes_gc_total_cpu_seconds_total", "go_gc_cycles_total_gc_cycles_total",
}

// timing prefixes the keys of apiCounts that are latencies' sums and counts,
// not requests: "eviction" (every eviction's time in the apiserver) and
// "queued <flow schema>" (the drainer's requests' wait in their priority
// level's queue), each with _sum and _count (see mean).
const timing = "~"

// gcCPU and gcCycles are the apiserver's garbage collector: the CPU it
// spent (its Go runtime's estimate) and its cycles. Its heap grows with
// the cluster (7 GiB at 5,000 nodes here), and a cycle that falls in a
// drain takes the cores the evictions need.
const (
	gcCPU    = timing + "gc cpu"
	gcCycles = timing + "gc cycles"
)

// readAPICounts scrapes the apiserver's /metrics with the admin client.
func readAPICounts(ctx context.Context) (apiCounts, error) {
	raw, err := env.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the apiserver's /metrics: %w", err)
	}
	return parseAPICounts(raw)
}

// parseAPICounts reads the apiserver's /metrics text raw as readAPICounts
// does.
func parseAPICounts(raw []byte) (apiCounts, error) {
	out := apiCounts{}
	err := eachSample(raw, scraped, func(name string, labels map[string]string, v float64) {
		switch name {
		case "apiserver_request_duration_seconds_sum", "apiserver_request_duration_seconds_count":
			if labels["verb"] == "POST" && labels["resource"] == "pods" && labels["subresource"] == "eviction" {
				out[timing+"eviction"+strings.TrimPrefix(name, "apiserver_request_duration_seconds")] += v
			}
			return
		case "apiserver_flowcontrol_request_wait_duration_seconds_sum", "apiserver_flowcontrol_request_wait_duration_seconds_count":
			if fs := labels["flow_schema"]; fs == "node-drainer" || fs == harness.PeerGroup {
				out[timing+"queued "+fs+strings.TrimPrefix(name, "apiserver_flowcontrol_request_wait_duration_seconds")] += v
			}
			return
		case "go_cpu_classes_gc_total_cpu_seconds_total":
			out[gcCPU] = v
			return
		case "go_gc_cycles_total_gc_cycles_total":
			out[gcCycles] = v
			return
		}
		if name == "apiserver_flowcontrol_dispatched_requests_total" {
			switch labels["flow_schema"] {
			case "node-drainer":
				out[fnKey] += v
			case harness.PeerGroup:
				out[peerKey] += v
			}
			return
		}
		key := labels["verb"] + " " + labels["resource"]
		if labels["subresource"] != "" {
			key += "/" + labels["subresource"]
		}
		out[key] += v
		if key == evictionRequests && strings.HasPrefix(labels["code"], "2") {
			out[evictionsAccepted] += v
		}
	})
	return out, err
}

// eachSample calls fn for every sample of the Prometheus text raw whose
// metric is one of names, with its labels; a histogram's or a summary's
// samples are its <name>_sum and <name>_count, as the text names them.
func eachSample(raw []byte, names []string, fn func(name string, labels map[string]string, v float64)) error {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("reading metrics text: %w", err)
	}
	emit := func(name string, labels map[string]string, v float64) {
		if slices.Contains(names, name) {
			fn(name, labels, v)
		}
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.Histogram != nil:
				emit(name+"_sum", labels, m.GetHistogram().GetSampleSum())
				emit(name+"_count", labels, float64(m.GetHistogram().GetSampleCount()))
			case m.Summary != nil:
				emit(name+"_sum", labels, m.GetSummary().GetSampleSum())
				emit(name+"_count", labels, float64(m.GetSummary().GetSampleCount()))
			case m.Counter != nil:
				emit(name, labels, m.GetCounter().GetValue())
			case m.Gauge != nil:
				emit(name, labels, m.GetGauge().GetValue())
			case m.Untyped != nil:
				emit(name, labels, m.GetUntyped().GetValue())
			}
		}
	}
	return nil
}

// since is the delta from an earlier reading.
func (c apiCounts) since(before apiCounts) apiCounts {
	out := apiCounts{}
	for k, v := range c {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// mean is the mean of a timing ("eviction", "queued"), in seconds (0: none).
func (c apiCounts) mean(name string) float64 {
	if n := c[timing+name+"_count"]; n > 0 {
		return c[timing+name+"_sum"] / n
	}
	return 0
}

// String lists the counts, largest first (the function's own first), then
// the timings' means.
func (c apiCounts) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		if k != fnKey && k != peerKey && !strings.HasPrefix(k, timing) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return c[keys[i]] > c[keys[j]] || c[keys[i]] == c[keys[j]] && keys[i] < keys[j] })
	parts := []string{fmt.Sprintf("%s %.0f", fnKey, c[fnKey])}
	if c[peerKey] > 0 {
		parts = append(parts, fmt.Sprintf("%s %.0f", peerKey, c[peerKey]))
	}
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, c[k]))
	}
	out := fmt.Sprintf("%s; mean eviction %.3f s in the apiserver", strings.Join(parts, ", "), c.mean("eviction"))
	for _, fs := range []string{"node-drainer", harness.PeerGroup} {
		if c[timing+"queued "+fs+"_count"] > 0 {
			out += fmt.Sprintf(", mean wait of %s's requests in their priority level's queue %.3f s", fs, c.mean("queued "+fs))
		}
	}
	if c[gcCycles] > 0 || c[gcCPU] > 0 {
		out += fmt.Sprintf("; the apiserver's garbage collector %.0f cycles, %.2f s of CPU", c[gcCycles], c[gcCPU])
	}
	return out
}

// queueCounts is a reading of one work queue of kube-controller-manager:
// the sums and counts of the time items waited in the queue and the time
// the controller's workers spent on them.
type queueCounts struct {
	waitSum, waitCount, workSum, workCount float64
}

// readQueue reads the work queue name (a controller's: "disruption",
// "replicaset", ...) from the controller-manager's /metrics.
func readQueue(ctx context.Context, name string) (queueCounts, error) {
	raw, err := env.ControllerManagerMetrics(ctx)
	if err != nil {
		return queueCounts{}, err
	}
	var q queueCounts
	fields := map[string]*float64{
		"workqueue_queue_duration_seconds_sum":   &q.waitSum,
		"workqueue_queue_duration_seconds_count": &q.waitCount,
		"workqueue_work_duration_seconds_sum":    &q.workSum,
		"workqueue_work_duration_seconds_count":  &q.workCount,
	}
	err = eachSample(raw, slices.Collect(maps.Keys(fields)), func(metric string, labels map[string]string, v float64) {
		if labels["name"] == name {
			*fields[metric] += v
		}
	})
	return q, err
}

// summary says, from the reading before, how many items the queue's
// workers took, their mean wait in the queue and time worked, and the
// share of the span they were busy (a controller with one worker, as the
// disruption controller has, is saturated near 100 %).
func (q queueCounts) summary(before queueCounts, span time.Duration) string {
	n, wait, work := q.workCount-before.workCount, q.waitSum-before.waitSum, q.workSum-before.workSum
	if n <= 0 {
		return "no items"
	}
	waited := q.waitCount - before.waitCount
	return fmt.Sprintf("%.0f items, mean wait in the queue %.3f s, mean work %.3f s, workers busy %.0f %% of %.1f s",
		n, wait/max(waited, 1), work/n, 100*work/span.Seconds(), span.Seconds())
}
