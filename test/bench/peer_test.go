package bench

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"
)

// The peer in the same run: aws-node-termination-handler (NTH) v1.25.6 in
// queue mode (hack/tools/nth.sh builds it; harness.StartNTH runs it against
// this harness), on the same scenes as node-drainer, its metrics named
// nth_<ours> (shipped defaults) and nth_tuned_<ours> (one setting raised),
// and ratio_<case> = NTH ÷ ours in the table.

var flagNTHWait = flag.Duration("nth-wait", 20*time.Minute, "longest wait for aws-node-termination-handler to complete a scene's hooks")

// nthDefaults is NTH with its shipped defaults: only what queue mode
// against this harness needs is set (harness.StartNTH). The scenes'
// instances carry its managed tag, so CHECK_TAG_BEFORE_DRAINING stays on.
func nthDefaults() nth { return nth{prefix: "nth_", name: "nth", wait: *flagNTHWait} }

// nthWorkersDefault is NTH's WORKERS default (its parallel event processors).
const nthWorkersDefault = 10

// nthTuned is NTH with WORKERS (parallel event processors, default 10)
// raised to the storm's node count, so every hook of the storm is drained
// at once: the one setting of v1.25.6 that bears on a storm. With 10 nodes
// or fewer it is the default, and the tuned storm is not run. It has no
// setting for its Kubernetes client's rate limit (rest.InClusterConfig,
// client-go's 5 QPS / burst 10, shared by every drain of the process),
// and the pod and node termination grace periods change nothing here (kwok
// removes a deleted pod at once; no drain reaches the 120 s node grace
// period on one node), so the single-node scenes run at the defaults only.
func nthTuned(nodes int) nth {
	return nth{prefix: "nth_tuned_", name: "nth-tuned", env: []string{fmt.Sprintf("WORKERS=%d", nodes)}, wait: *flagNTHWait}
}

// BenchmarkNTHDrain110Pods: nth_drain_110_pods_s, the scene of
// drain_110_pods_s with the event sent to NTH's queue.
func BenchmarkNTHDrain110Pods(b *testing.B) {
	needHarness(b)
	d := nthDefaults()
	defer failedIfFailed(b, d.metric("drain_110_pods_s"))
	ctx, cancel := context.WithTimeout(b.Context(), 40*time.Minute)
	defer cancel()
	for i := range *flagRuns {
		drain, _ := drain110(b, ctx, d, "d110")
		progress("nth_drain_110_pods run %d: %.2f s from the message sent to hook completed", i+1, drain)
		record(d.metric("drain_110_pods_s"), drain)
	}
	b.ReportMetric(0, "ns/op")
	report(b, d.metric("drain_110_pods_s"))
}

// BenchmarkNTHDrainPDBWait: nth_drain_pdb_wait_s.
func BenchmarkNTHDrainPDBWait(b *testing.B) {
	needHarness(b)
	d := nthDefaults()
	defer failedIfFailed(b, d.metric("drain_pdb_wait_s"))
	ctx, cancel := context.WithTimeout(b.Context(), 40*time.Minute)
	defer cancel()
	for i := range *flagRuns {
		drain, _ := drainPDB(b, ctx, d)
		progress("nth_drain_pdb_wait run %d: %.2f s from the message sent to hook completed", i+1, drain)
		record(d.metric("drain_pdb_wait_s"), drain)
	}
	b.ReportMetric(0, "ns/op")
	report(b, d.metric("drain_pdb_wait_s"))
}

// BenchmarkNTHStorm: the storm of BenchmarkStorm (-storm-nodes nodes, PDBs
// of 10 %) with every hook sent to NTH's queue at once, at its defaults
// (nth_storm_<n>_nodes_*) and with WORKERS raised to n
// (nth_tuned_storm_<n>_nodes_*); then the storm whose PDBs span every node
// at NTH's defaults (nth_storm_<n>_nodes_shared_pdb_*); then that layout
// on spot interruption warnings, at the defaults and tuned
// (nth_storm_<n>_nodes_spot_*, nth_tuned_storm_<n>_nodes_spot_*): NTH
// answers nothing, so a node counts as drained when the last of its pods is
// deleted, if that is within the 2-minute notice (spotNotice; ours is done
// when its invoke answers "drained", after its RWO volumes are detached
// too). Its p95 is over every node, one not drained by the notice counting
// as the notice (printed "cap reached" when that is the p95), and NTH is
// stopped at the notice, as the reclaim ends its drains. -storms picks them
// as it does BenchmarkStorm's (tight, shared, spot).
func BenchmarkNTHStorm(b *testing.B) {
	needHarness(b)
	n := *flagStormNodes
	var names []string
	for _, m := range []string{"hooks_completed", "pdb_violations", "p95_s", "api_requests", "api_requests_per_node", "evictions_per_pod", "eviction_requests_per_pod"} {
		for _, d := range []nth{nthDefaults(), nthTuned(n)} {
			names = append(names, d.metric(stormMetric(n, m)))
		}
		names = append(names, nthDefaults().metric(stormMetric(n, "shared_pdb_"+m)))
	}
	for _, m := range []string{stormDone(spotPrefix), "pdb_violations", "p95_s", "api_requests", "api_requests_per_node", "evictions_per_pod", "eviction_requests_per_pod"} {
		for _, d := range []nth{nthDefaults(), nthTuned(n)} {
			names = append(names, d.metric(stormMetric(n, spotPrefix+m)))
		}
	}
	defer failedIfFailed(b, names...)
	ctx, cancel := context.WithTimeout(b.Context(), 2*time.Hour)
	defer cancel()
	for i := range *flagStormRuns {
		if stormPart("tight") {
			storm(b, ctx, nthDefaults(), i+1, n, stormTight, "")
			if n > nthWorkersDefault {
				storm(b, ctx, nthTuned(n), i+1, n, stormTight, "")
			} else {
				progress("nth_tuned_storm: not run, WORKERS=%d is NTH's default (%d nodes)", n, n)
			}
		}
		if stormPart("shared") {
			storm(b, ctx, nthDefaults(), i+1, n, stormShared, "shared_pdb_")
		}
		if stormPart("spot") {
			storm(b, ctx, nthDefaults(), i+1, n, stormShared, spotPrefix)
			if n > nthWorkersDefault {
				storm(b, ctx, nthTuned(n), i+1, n, stormShared, spotPrefix)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	for _, m := range names {
		report(b, m)
	}
}

// BenchmarkNTHRWOFailover: nth_rwo_failover_s, the RWO scene with the
// EC2 state-change "stopped" event sent to NTH's queue, timed from the stop
// (the event is sent right after it), the scenes run concurrently and each
// watched up to -baseline-cap like the baseline's. NTH cordons and evicts
// the pods of the stopped node; the evicted pod of the dead kubelet stays
// Terminating and keeps its volume (the harness's stopped kubelet never
// finishes a deletion), so the scene reaches the cap unless something else
// moves the pod.
func BenchmarkNTHRWOFailover(b *testing.B) {
	needHarness(b)
	d := nthDefaults()
	defer failedIfFailed(b, d.metric("rwo_failover_s"))
	rwoCapped(b, d, "nthrwo", d.metric("rwo_failover_s"))
	b.ReportMetric(0, "ns/op")
	report(b, d.metric("rwo_failover_s"))
}
