// Package bench holds node-drainer's benchmarks: Go benchmarks (in the
// package's _test files) that run the real bootstrap under the Lambda runtime
// emulator against the real local harness (test/harness: etcd,
// kube-apiserver, controller-manager, scheduler, kwok, moto) and print a
// table of medians against the project's targets.
//
// Run them with
//
//	make bench
//
// which is
//
//	go test -count=1 -timeout 300m -run '^$' -bench . -benchtime 1x ./test/bench/ -args -table -plots docs/img
//
// and make bench-scale runs the growth alone (BenchmarkDrain110Pods,
// BenchmarkRWOFailover, then BenchmarkScale).
//
// Package flags, after -args: -table prints the summary table after the
// benchmarks; -runs N sets the scenes per benchmark (default 5); -baseline-cap
// D caps the baseline and NTH's RWO scenes (default 7m); -other-pods N sets
// the background pod count (default 5000); -storm-nodes N (default 50) and
// -storm-runs N (default 1) size the storm; -stopping D (default 20s) is how
// long before rwo_failover_s's stopped event the kubelet dies;
// -function-logs DIR keeps every function's log; -profile DIR writes CPU
// profiles of kube-apiserver and kube-controller-manager taken over each
// storm's first -profile-for (default 30s). BenchmarkScale (zscale_test.go,
// last) grows the cluster to each of -scale-nodes (default 500,2000,5000)
// with -scale-pods bound pods (default 15000,50000,150000), -scale-parallel
// creations in flight, the scale nodes' Leases of -scale-lease seconds
// (renewed every quarter, inside -node-monitor-grace, the
// controller-manager's grace period, default 20s), their pods Running with
// -scale-running; it measures -scale-runs drains, launches and failovers at
// each size; -plots DIR draws its growth curves as SVG. One harness serves the
// package (started in TestMain, only when benchmarks are selected); every run
// builds a fresh scene (its own ASG, nodes, namespace) and a fresh function
// runtime (a cold start, as a real first invocation has), and removes the
// scene afterwards.
//
// docs/benchmarks.md lists every metric with its target and the last full
// run. In short (each is the median of the runs; the table also has min,
// max, runs, the target and pass/fail):
//
//   - drain_110_pods_s, drain_110_pods_other_5000_pods_s, drain_pdb_wait_s:
//     event sent → moto records CompleteLifecycleAction, for a node of 110
//     pods (and with 5,000 other pods in the cluster), and for 2 pods whose
//     PDB makes the second eviction wait for a replacement. The Deployments'
//     pods have grace 0 (deleted at once: what is timed is the drainer, not
//     a shutdown no drainer can shorten).
//   - api_requests_*: the function's own apiserver requests (its FlowSchema's
//     dispatched count from /metrics; the progress line adds
//     apiserver_request_total's delta by verb and resource, every client).
//   - storm_<n>_nodes_* (BenchmarkStorm): n nodes, each with a Deployment of
//     20 pods under a PDB (10 %, then 50 %: loose_pdb_), every fifth also
//     with a StatefulSet pod on an RWO volume; all terminate hooks sent at
//     once, one fresh function per hook; hooks completed, PDB floors a pod
//     watch saw broken, p95 event → completion, requests. drain_20_pods_s is
//     one such node alone.
//   - peak_rss_mb, bootstrap_zip_mb, init_ms, foreign_event_ms, sweep_*.
//   - rwo_failover_s: a StatefulSet pod on an RWO CSI volume (the API's
//     default grace period); its kubelet dies, -stopping later the instance
//     is stopped and the "stopped" event sent (EC2 sends it once the
//     instance has shut down); event → the replacement runs on another node
//     with its volume attached. rwo_failover_fresh_lease_s: the kubelet dies
//     at the moment the event is sent, so safety rule 11's wait for a stale
//     Lease (NODE_LEASE_STALE_AFTER, 15 s) is in it.
//   - rwo_failover_baseline_s: the same scene with no node-drainer, from the
//     stop, capped at -baseline-cap: the pod is evicted after the 300 s
//     toleration but stays Terminating on the dead node, its volume never
//     released. rwo_failover_ratio: baseline ÷ rwo_failover_fresh_lease_s.
//
// The peer in the same run (peer_test.go): aws-node-termination-handler
// (NTH) v1.25.6, built once into the tools cache by hack/tools/nth.sh and run
// by harness.StartNTH in queue mode out of cluster: its SQS queue in moto,
// AWS_ENDPOINT at moto, its in-cluster Kubernetes client at the harness
// apiserver with its Helm chart's ClusterRole (and a FlowSchema of its own,
// so its requests are counted). The scenes are the same code as ours (a
// drainer: ours invokes a fresh function, NTH's gets the same EventBridge
// event as an SQS message body). Each time is from the message sent to
// moto's record of the CompleteLifecycleAction:
//
//   - nth_drain_110_pods_s, nth_drain_pdb_wait_s: at its shipped defaults.
//   - nth_storm_<n>_nodes_*, nth_tuned_storm_<n>_nodes_*: the storm at its
//     defaults, and with WORKERS raised to n (not run when n ≤ 10, its
//     default). NTH has no setting for its client's rate limit.
//   - nth_storm_<n>_nodes_spot_*, nth_tuned_storm_<n>_nodes_spot_*: the
//     spot storm (no hook): a node counts as drained when the last of its
//     pods is deleted, within the 2-minute notice; NTH answers nothing, so
//     a pod watch times it. The p95 counts a node not drained by the
//     notice as the notice, and NTH is stopped there (the reclaim).
//   - nth_rwo_failover_s: the RWO scene with the "stopped" event sent to its
//     queue at the stop, capped like the baseline. NTH cordons and evicts;
//     the evicted pod of the dead kubelet stays Terminating with its volume.
//   - ratio_<case>: NTH's median ÷ ours, same run (goal ≥ 10 for the storm
//     at NTH's defaults; a lower bound where NTH reached the cap).
//
// -nth-wait (default 20m) bounds the wait for NTH's completions.
//
// The benchmarks assert no timing: they fail only when node-drainer does not
// do its job (hook not completed, pod never moved). Numbers on a loaded
// 2-core machine are noisy; compare medians, not single runs.
package bench
