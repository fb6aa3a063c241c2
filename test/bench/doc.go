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
//	go test -count=1 -timeout 120m -run '^$' -bench . -benchtime 1x ./test/bench/ -args -table
//
// (about 12-15 minutes on 2 cores, 7 of them the baseline's cap). Package
// flags, after -args: -table prints the summary table after the benchmarks;
// -runs N sets the scenes per benchmark (default 5); -baseline-cap D caps the
// baseline scenes (default 7m); -other-pods N sets the background pod count
// (default 5000). One harness serves the package (started in TestMain, only
// when benchmarks are selected); every run builds a fresh scene (its own
// ASG, nodes, namespace) and a fresh function runtime (a cold start, as a
// real first invocation has), and removes the scene afterwards.
//
// What the numbers mean (each is the median of the runs; the table also has
// min, max, runs, the target and pass/fail):
//
//   - drain_110_pods_s: a node holding 110 pods of 5 Deployments, no PDB
//     (kwok finishes a pod's deletion as soon as it has a deletionTimestamp),
//     ASG terminate lifecycle action active; from sending the EventBridge
//     event to the function to the time moto records the successful
//     CompleteLifecycleAction. drain_110_pods_invoke_s is the same run's
//     invoke round trip. Target ≤ 1.0 s (aws-node-termination-handler: 43.9 s
//     at its default client rate limit, 1.75 s tuned).
//   - drain_110_pods_other_5000_pods_s: the same, with 5,000 more Running
//     pods elsewhere in the cluster (10 other kwok nodes × 500 pods, created
//     once for that benchmark, bound directly with the admin client, removed
//     afterwards). Target: within 10% of drain_110_pods_s.
//   - drain_pdb_wait_s: a node holding 2 pods of a 4-replica Deployment whose
//     PDB allows 1 unavailable (the other 2 replicas on the other node), so
//     the second eviction waits for the first pod's replacement to be Ready;
//     event to hook completed. Target ≤ 3 s (peer: 7.1 s).
//   - api_requests_110_pods, api_requests_110_pods_other_5000_pods, api_requests_pdb_wait: the
//     function's own apiserver requests during that scene's invocation: the
//     delta of apiserver_flowcontrol_dispatched_requests_total for the
//     FlowSchema node-drainer (rbac.yaml; only the function's group matches
//     it), read from the apiserver's /metrics before and after. The progress
//     line also gives the delta of apiserver_request_total by verb and
//     resource, which counts every client (controllers and kwok answering
//     the drain too). Target ≤ 1 eviction per pod + 30.
//   - storm_hooks_completed, storm_p95_s, storm_api_requests_per_node,
//     storm_evictions_per_pod (BenchmarkStorm; -storm-nodes, default 10, and
//     -storm-runs, default 1): that many nodes of 20 pods (a Deployment per
//     node under a PDB allowing 2 unavailable, 10 %), all terminate hooks
//     sent at once, one fresh function process per hook; hooks completed
//     with CONTINUE, the p95 of event → completion, the function's own
//     requests per node (its FlowSchema), and the apiserver's evictions per
//     pod (1.0: none retried into a 429).
//   - peak_rss_mb: VmHWM of the bootstrap process (MiB) read from
//     /proc/<pid>/status after the 110-pod drain, one fresh process per run.
//     The process is the host-architecture build. Target ≤ 100.
//   - bootstrap_zip_mb: size (MiB) of the arm64 deployment zip, built as
//     `make package` builds it (GOOS=linux GOARCH=arm64 CGO_ENABLED=0,
//     -tags lambda.norpc -trimpath -ldflags='-s -w', python3 zipfile
//     deflate), in a temporary directory. Target ≤ 25.
//   - rwo_failover_s: a StatefulSet pod with an RWO CSI volume attached on a
//     node; the instance is stopped in moto and its kubelet stopped, then the
//     EC2 state-change "stopped" event is sent; until the replacement pod runs
//     on another node with its volume attached there (VolumeAttachment
//     attached and SuccessfulAttachVolume recorded). Target ≤ 5 s.
//   - rwo_failover_baseline_s: the same scene with no node-drainer (the
//     controller-manager alone), timed from the stop, capped at
//     -baseline-cap (printed "420 (cap reached)" when the median hits it:
//     the pod is evicted after the 300 s toleration but stays Terminating on
//     the dead node, so its volume is never released). The baseline scenes
//     run concurrently, each in its own namespace and ASG.
//   - rwo_failover_ratio: rwo_failover_baseline_s / rwo_failover_s (a lower
//     bound when the baseline reached its cap).
//
// The peer in the same run (peer_test.go): aws-node-termination-handler
// (NTH) v1.25.6, built once into the tools cache by hack/tools/nth.sh (its
// Go module, -trimpath, CGO_ENABLED=0) and run by harness.StartNTH in
// queue mode out of cluster: its SQS queue in moto, AWS_ENDPOINT at moto,
// its in-cluster Kubernetes client at the harness apiserver as the group
// aws-node-termination-handler with its Helm chart's ClusterRole (and a
// FlowSchema of its own at workload-high, where its kube-system service
// account would land, so its requests are counted). The scenes are the
// same code as ours (a drainer: ours invokes a fresh function, NTH's gets
// the same EventBridge event as an SQS message body); their instances carry
// NTH's managed tag, so CHECK_TAG_BEFORE_DRAINING stays at its default.
// Each time is from the message sent to moto's record of the
// CompleteLifecycleAction, as ours:
//
//   - nth_drain_110_pods_s, nth_drain_pdb_wait_s: the scenes of
//     drain_110_pods_s and drain_pdb_wait_s, NTH at its shipped defaults
//     (nth_api_requests_*: its FlowSchema's dispatched requests).
//   - nth_storm_<n>_nodes_*: the storm of BenchmarkStorm (PDBs of 10 %),
//     every hook sent to NTH's queue at once; nth_tuned_storm_<n>_nodes_*:
//     the same with WORKERS (its parallel event processors, default 10)
//     raised to n (not run when n ≤ 10: that is the default). NTH v1.25.6
//     has no setting for its client's rate limit (client-go's 5 QPS, burst
//     10), and its grace periods change nothing here, so the single-node
//     scenes run at the defaults only.
//   - nth_rwo_failover_s: the RWO scene with the "stopped" state-change
//     event sent to NTH's queue, from the stop, capped at -baseline-cap
//     like the baseline. NTH cordons and evicts. On a real cluster the
//     evicted pod of a dead kubelet stays Terminating with its volume
//     attached (the cap); on this harness the stopped kubelet is a Lease
//     taken from kwok, and kwok still finishes deleting a pod with a
//     deletionTimestamp, so the eviction alone moves the pod in about 2 s:
//     the number shows that shortcut of the harness, not a failover NTH
//     achieves, and ratio_rwo_failover is not a result.
//   - ratio_<case> (after the table and as summary lines): NTH's median ÷
//     ours, same run: ratio_drain_110_pods, ratio_drain_pdb_wait,
//     ratio_storm_<n>_nodes_p95 (goal ≥ 10 at NTH's defaults),
//     ratio_tuned_storm_<n>_nodes_p95, ratio_rwo_failover (a lower bound
//     when NTH reached the cap).
//
// -nth-wait (default 20m) bounds the wait for NTH's completions.
//
// The benchmarks assert no timing: they fail only when node-drainer does not
// do its job (hook not completed, pod never moved). Numbers on a loaded
// 2-core machine are noisy; compare medians, not single runs.
package bench
