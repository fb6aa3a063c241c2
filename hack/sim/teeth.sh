#!/usr/bin/env bash
# Each fix of the recovery paths, reverted alone: the simulation must find a
# seed that breaks an invariant. Prints one line per fix: the first failing
# seed, the invariant, and how long the search took. Run from the repository
# root on a clean tree (each revert is undone before the next).
# Usage: hack/sim/teeth.sh [SEEDS] [name...]
set -u
SEEDS=${1:-10000}; shift || true
cases=(
  "admission-refusal|internal/drain/drain.go|s/\t\tcase refused(err):/\t\tcase false \&\& refused(err):/"
  "not-drained-retried|internal/handler/graceful.go|s/^\t\t\t\terr = errNotDrained$/\t\t\t\treturn found, false, nil/"
  "admission-refusal+not-drained-retried|internal/drain/drain.go|s/\t\tcase refused(err):/\t\tcase false \&\& refused(err):/"
  "timeout-retriable|internal/cluster/retry.go|s/if errors.As(err, \&urlErr) \&\& urlErr.Timeout() {/if false \&\& errors.As(err, \&urlErr) \&\& urlErr.Timeout() {/"
  "other-tools-hooks|internal/config/config.go|s/return name != \"\" \&\& (name == c.TerminateHookName/return name != \"\" || (name == c.TerminateHookName/"
  "late-bound-pods|internal/drain/drain.go|s/if !r.Done() || d.opts.DryRun || ctx.Err() != nil {/if true || !r.Done() || d.opts.DryRun || ctx.Err() != nil {/"
  "unknown-age-heartbeat|internal/handler/graceful.go|s/r.attempt > 1 || r.fromSweep || r.ev.Time.IsZero()/r.attempt > 1 || r.ev.Time.IsZero()/"
  "dead-kubelet-lease|internal/handler/graceful.go|s/^\trenewed, err := node.KubeletRenewed(ctx, r.h.c.Kube, name)/\treturn true\n\trenewed, err := node.KubeletRenewed(ctx, r.h.c.Kube, name)/"
  "not-forced-is-not-drained|internal/handler/graceful.go|s/^\t\t\t\terr = errNotForced$/\t\t\t\terr = nil/"
  "hibernated-not-down|internal/instance/instance.go|s/if i.ID == \"\" || i.SeenAt.IsZero() || i.Hibernated {/if i.ID == \"\" || i.SeenAt.IsZero() {/"
  "heartbeat-retry|internal/lifecycle/lifecycle.go|s/next = retryAfter(interval)/next = interval/"
  "continuation-without-ec2|internal/handler/graceful.go|s/known := r.h.cfg.ListsASG(act.ASG) || r.attempt > 1 || r.fromSweep/known := r.h.cfg.ListsASG(act.ASG)/"
  "dead-node-read-again|internal/handler/graceful.go|s/ \&\& r.stillDead(ctx, n.Name) {/ {/"
  "consistent-pod-list|internal/drain/run.go|s/^\t\t\to.ResourceVersion = \"\"$//"
  "completion-retried|internal/handler/graceful.go|s/for b := cluster.Backoff(); err != nil \&\& awsRetryable(err); {/for b := cluster.Backoff(); false \&\& err != nil \&\& awsRetryable(err); {/"
  "hook-gone-ends-drain|internal/handler/graceful.go|s/if gone != nil \&\& lifecycle.IsNotActive(err) {/if false \&\& gone != nil \&\& lifecycle.IsNotActive(err) {/"
  "guard-reads-ec2-last|internal/handler/guard.go|s/\tif err == nil \&\& r.h.now().Sub(described) >= volume.GuardFresh {/\tif false \&\& err == nil \&\& r.h.now().Sub(described) >= volume.GuardFresh {/"
  "guard-verdict-fresh|internal/volume/verdict.go|s/\tif v.no == nil \&\& !v.at.IsZero() \&\& cluster.Clock(ctx).Since(v.at) < GuardFresh {/\tif v.no == nil \&\& !v.at.IsZero() {/"
  "pods-listed-after-volumes|internal/handler/graceful.go|s/^const listFresh = 500 \* time.Millisecond/const listFresh = 500 * time.Hour/"
  "pod-gone-ends-pdb-wait|internal/drain/run.go|s/\t\tif r.gone(p) {/\t\tif false \&\& r.gone(p) {/"
  "handover-names-every-holder|internal/handler/graceful.go|s/\t\tholders = append(slices.Clone(r.predecessors), holders...)/\t\tholders = append(slices.Clone(r.predecessors), holders...)[:max(len(r.predecessors), 1)]/"
  "watch-hears-deletions|internal/cluster/watch.go|s/\t\t\t\tDeleteFunc: changed,/\t\t\t\tDeleteFunc: nil,/"
)
# watch-hears-deletions is no fix of a bug found: it makes the pods' informer deaf
# to deletions, the kind of watch bug only the liveness invariant (I11) sees
# a case that reverts a second fix with its first: name -> file|expression
declare -A also=(
  ["admission-refusal+not-drained-retried"]="internal/handler/graceful.go|s/^\t\t\t\terr = errNotDrained$/\t\t\t\treturn found, false, nil/"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name file expr <<<"$c"
  file2= expr2=
  if [ -n "${also[$name]:-}" ]; then IFS='|' read -r file2 expr2 <<<"${also[$name]}"; fi
  if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
  orig=$(mktemp); orig2=$(mktemp)
  cp "$file" "$orig"
  sed -i "$expr" "$file"
  if cmp -s "$file" "$orig"; then echo "teeth $name: the revert did not apply (the fix moved?)"; continue; fi
  if [ -n "${file2:-}" ]; then
    cp "$file2" "$orig2"
    sed -i "$expr2" "$file2"
  fi
  if ! go test -c -o /tmp/teeth-rev.test ./test/sim 2>/tmp/teeth-build.txt; then
    echo "teeth $name: does not build reverted"; cp "$orig" "$file"; [ -n "${file2:-}" ] && cp "$orig2" "$file2"; continue
  fi
  cp "$orig" "$file"; [ -n "${file2:-}" ] && cp "$orig2" "$file2"; rm -f "$orig" "$orig2"
  start=$(date +%s)
  out=$(/tmp/teeth-rev.test -test.run '^TestSim$' -test.timeout 30m -seeds "$SEEDS" -first 2>&1)
  first=$(grep -m1 -o 'sim_first_failing_seed=.*' <<<"$out")
  inv=$(grep -m1 -o 'seed [0-9]*: I[0-9]*[^:]*' <<<"$out")
  if [ -n "$first" ]; then
    echo "teeth $name: $first: $inv"
  else
    echo "teeth $name: NOT FOUND in $SEEDS seeds ($(( $(date +%s) - start )) s)"
  fi
done
