#!/usr/bin/env bash
# Each fix of the recovery paths, reverted alone: the simulation must find a
# seed that breaks an invariant. Prints one line per fix: the first failing
# seed, the invariant, and how long the search took. Run from the repository
# root on a clean tree (each revert is undone before the next).
# Usage: hack/sim/teeth.sh [SEEDS] [name...]
#        hack/sim/teeth.sh --check   (every revert still applies to the tree;
#                                     make size runs it: a refactor that moves
#                                     a fix must move its revert here too)
set -u
check=
if [ "${1:-}" = --check ]; then check=1; shift; fi
SEEDS=${1:-10000}; shift || true
cases=(
  "admission-refusal|internal/drain/evict.go|/^\tcase refused(err):$/{N;s/^\tcase refused(err):\n\t\treturn e.refused/\tcase false \&\& refused(err):\n\t\treturn e.refused/}"
  "not-drained-retried|internal/handler/terminate.go|s/^\t\terr = errNotDrained$/\t\treturn found, false, nil/"
  "admission-refusal+not-drained-retried|internal/drain/evict.go|/^\tcase refused(err):$/{N;s/^\tcase refused(err):\n\t\treturn e.refused/\tcase false \&\& refused(err):\n\t\treturn e.refused/}"
  "timeout-retriable|internal/cluster/retry.go|s/if errors.As(err, \&urlErr) \&\& urlErr.Timeout() {/if false \&\& errors.As(err, \&urlErr) \&\& urlErr.Timeout() {/"
  "other-tools-hooks|internal/config/config.go|s/return name != \"\" \&\& (name == c.TerminateHookName/return name != \"\" || (name == c.TerminateHookName/"
  "late-bound-pods|internal/drain/drain.go|s/if !r.Done() || d.opts.DryRun || ctx.Err() != nil {/if true || !r.Done() || d.opts.DryRun || ctx.Err() != nil {/"
  "unknown-age-heartbeat|internal/handler/hook.go|s/k.attempt > 1 || k.fromSweep || k.ev.Time.IsZero()/k.attempt > 1 || k.ev.Time.IsZero()/"
  "dead-kubelet-lease|internal/handler/drainnode.go|s/^\trenewed, err := node.KubeletRenewed(ctx, r.h.c.Kube, name)/\treturn true\n\trenewed, err := node.KubeletRenewed(ctx, r.h.c.Kube, name)/"
  "not-forced-is-not-drained|internal/handler/terminate.go|s/^\t\t\terr = errNotForced$/\t\t\terr = nil/"
  "hibernated-not-down|internal/instance/instance.go|s/if i.ID == \"\" || i.SeenAt.IsZero() || i.Hibernated {/if i.ID == \"\" || i.SeenAt.IsZero() {/"
  "heartbeat-retry|internal/lifecycle/lifecycle.go|s/next = retryAfter(interval)/next = interval/"
  "continuation-without-ec2|internal/handler/ownership.go|s/known := cfg.ListsASG(f.act.ASG) || tagged || f.attempt > 1 || f.fromSweep/known := cfg.ListsASG(f.act.ASG) || tagged/"
  "dead-node-read-again|internal/handler/drainnode.go|s/ \&\& r.stillDead(ctx, n.Name) {/ {/"
  "consistent-pod-list|internal/drain/run.go|s/^\t\t\to.ResourceVersion = \"\"$//"
  "completion-retried|internal/handler/hook.go|s/for b := cluster.Backoff(); err != nil \&\& awsRetryable(err); {/for b := cluster.Backoff(); false \&\& err != nil \&\& awsRetryable(err); {/"
  "hook-gone-ends-drain|internal/handler/siblings.go|s/if gone != nil \&\& lifecycle.IsNotActive(err) {/if false \&\& gone != nil \&\& lifecycle.IsNotActive(err) {/"
  "guard-reads-ec2-last|internal/handler/guard.go|s/\tif err == nil \&\& r.h.now().Sub(described) >= volume.GuardFresh {/\tif false \&\& err == nil \&\& r.h.now().Sub(described) >= volume.GuardFresh {/"
  "guard-verdict-fresh|internal/volume/verdict.go|s/\tif v.no == nil \&\& !v.at.IsZero() \&\& cluster.Clock(ctx).Since(v.at) < GuardFresh {/\tif v.no == nil \&\& !v.at.IsZero() {/"
  "pods-listed-after-volumes|internal/handler/drainnode.go|s/^const listFresh = 500 \* time.Millisecond/const listFresh = 500 * time.Hour/"
  "pod-gone-ends-pdb-wait|internal/drain/budget.go|s/\t\tif r.gone(p) {/\t\tif false \&\& r.gone(p) {/"
  "handover-names-every-holder|internal/handler/terminate.go|s/\t\tholders = append(slices.Clone(t.predecessors), holders...)/\t\tholders = append(slices.Clone(t.predecessors), holders...)[:max(len(t.predecessors), 1)]/"
  "hooks-take-back-only-put|internal/hooks/removal.go|s/^\tif rerr != nil {$/\tif false \&\& rerr != nil {/;s/^\tif !again.removing() {$/\tif rerr == nil \&\& !again.removing() {/;s#k.takeBack(ctx, res.Put, hooks)#k.takeBack(ctx, func() (p []string) { for _, g := range res.Tagged { for _, hk := range hooks { p = append(p, aws.ToString(g.AutoScalingGroupName)+\"/\"+hk.Name) } }; return p }(), hooks)#;s/if w := waiting\[g\]; len(w) > 0 {/if w := waiting[g]; false \&\& len(w) > 0 {/"
  "siblings-heartbeated|internal/handler/hook.go|s/^\t\tacts := append(\[\]lifecycle.Action{k.act}, k.siblings...)$/\t\tacts := []lifecycle.Action{k.act}/;s/^\tlifecycle.Beat(ctx, k.h.c.ASG, k.siblingActions(ctx), /\tlifecycle.Beat(ctx, k.h.c.ASG, nil, /"
  "stack-put-this-cluster|internal/hooks/stackhooks.go|s/tagged, err := s.taggedGroups(ctx, s.putTag(props))/tagged, err := s.taggedGroups(ctx, discovery.Tag{Key: props.AsgTagKey, Value: props.AsgTagValue})/"
  "one-owner-per-hook|internal/discovery/marks.go|s/^\tcase anothers:$/\tcase anothers:\n\t\treturn step{in: again(*cur, group, m.with(append(slices.Clone(m.owners), want.Owner)))}/"
  "least-heartbeat|test/sim/world.go|s/HeartbeatSecs: \[\]int32{360, 600}\[r.IntN(2)\]/HeartbeatSecs: []int32{180, 300}[r.IntN(2)]/"
  "warm-pool-waited|internal/discovery/discovery.go|s/^\t\tif g.WarmPoolConfiguration != nil {$/\t\tif false \&\& g.WarmPoolConfiguration != nil {/"
  "untagged-since-removed|internal/hooks/stackhooks.go|s/^\tgroups = append(groups, s.untaggedSince(ctx, props, groups)...)$//"
  "watch-hears-deletions|internal/cluster/watch.go|s/\t\t\t\tDeleteFunc: changed,/\t\t\t\tDeleteFunc: nil,/"
  "pod-policy-voluntary-keeps|internal/handler/podpolicy.go|s/^\t\treturn drain.PolicyKeep$/\t\treturn drain.PolicyIgnore/"
  "pod-policy-forced-last|internal/drain/policy.go|s/^\treturn max(end.Sub(o.Clock.Now())-o.graceOf(p)-lastLead, 0), true$/\treturn 0, true/"
  "lb-drain-wait|internal/handler/lbwait.go|s/^\tif w <= 0 {$/\tif true || w <= 0 {/"
  "continuation-keeps-group-timeout|internal/handler/grouppolicy.go|s/if p := r.out.GroupPolicy; p != nil \&\& p.Unread != \"\" \&\& r.drainTimeout > 0 {/if p := r.out.GroupPolicy; false \&\& p != nil \&\& p.Unread != \"\" \&\& r.drainTimeout > 0 {/"
)
# the policies' rows (issue 55) revert a product rule each: a voluntary
# drain evicts a pod that asks not to be disrupted (P1), a forced drain
# evicts it at once, not last (P2), the evictions do not wait LB_DRAIN_WAIT
# (P4); and the fix its I1 found: a continuation whose group is unread
# keeps its drain's timeout
# the four hooks rows (issue 54) revert C1 (a sweep's take-back: on a failed
# read of the removal mark too, on every tagged group, under a waiting
# instance), C2 (the drain heartbeats its HOOK_NAMES siblings), C3 (a stack
# update puts hooks on this cluster's tagged groups only) and C5 (one owner
# per hook: a hook another deployment marked is joined, its list of owners
# read, modified and written, as before)
# watch-hears-deletions is no fix of a bug found: it makes the pods' informer deaf
# to deletions, the kind of watch bug only the liveness invariant (I11) sees
# a case that reverts a second fix with its first: name -> file|expression
declare -A also=(
  ["admission-refusal+not-drained-retried"]="internal/handler/terminate.go|s/^\t\terr = errNotDrained$/\t\treturn found, false, nil/"
  ["least-heartbeat"]="internal/config/config.go|s/hb < 300 || hb > 7200/hb < 180 || hb > 7200/"
)
# and a third revert (the least heartbeat is held in three places: the
# world's draws, the function's configuration, the stack's sweep check)
declare -A also3=(
  ["least-heartbeat"]="internal/hooks/stackhooks.go|s/checkSweepOutlasted(hb, p.SweepSchedule)/checkSweepOutlasted(hb, \"\")/"
)
if [ -n "$check" ]; then
  bad=0
  for c in "${cases[@]}"; do
    IFS='|' read -r name file expr <<<"$c"
    if [ ! -f "$file" ] || sed "$expr" "$file" | cmp -s - "$file"; then
      echo "teeth $name: the revert does not apply to $file (the fix moved?)"; bad=1
    fi
  done
  for name in "${!also[@]}" "${!also3[@]}"; do
    for x in "${also[$name]:-}" "${also3[$name]:-}"; do
      [ -n "$x" ] || continue
      IFS='|' read -r file expr <<<"$x"
      if [ ! -f "$file" ] || sed "$expr" "$file" | cmp -s - "$file"; then
        echo "teeth $name: a further revert does not apply to $file"; bad=1
      fi
    done
  done
  [ $bad = 0 ] && echo "teeth: all ${#cases[@]} reverts apply"
  exit $bad
fi
for c in "${cases[@]}"; do
  IFS='|' read -r name file expr <<<"$c"
  file2= expr2= file3= expr3=
  if [ -n "${also[$name]:-}" ]; then IFS='|' read -r file2 expr2 <<<"${also[$name]}"; fi
  if [ -n "${also3[$name]:-}" ]; then IFS='|' read -r file3 expr3 <<<"${also3[$name]}"; fi
  if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
  orig=$(mktemp); orig2=$(mktemp); orig3=$(mktemp)
  cp "$file" "$orig"
  sed -i "$expr" "$file"
  if cmp -s "$file" "$orig"; then echo "teeth $name: the revert did not apply (the fix moved?)"; continue; fi
  if [ -n "${file2:-}" ]; then
    cp "$file2" "$orig2"
    sed -i "$expr2" "$file2"
  fi
  if [ -n "${file3:-}" ]; then
    cp "$file3" "$orig3"
    sed -i "$expr3" "$file3"
  fi
  restore() { cp "$orig" "$file"; [ -n "${file2:-}" ] && cp "$orig2" "$file2"; [ -n "${file3:-}" ] && cp "$orig3" "$file3"; rm -f "$orig" "$orig2" "$orig3"; }
  bin=$(mktemp /tmp/teeth-rev.XXXXXX) # its own: two searches at once do not share a binary
  if ! go test -c -o "$bin" ./test/sim 2>/tmp/teeth-build.txt; then
    echo "teeth $name: does not build reverted"; restore; continue
  fi
  restore
  start=$(date +%s)
  out=$("$bin" -test.run '^TestSim$' -test.timeout 30m -seeds "$SEEDS" -first 2>&1)
  first=$(grep -m1 -o 'sim_first_failing_seed=.*' <<<"$out")
  inv=$(grep -m1 -o 'seed [0-9]*: [IHP][0-9]*[^:]*' <<<"$out")
  if [ -n "$first" ]; then
    echo "teeth $name: $first: $inv"
  else
    echo "teeth $name: NOT FOUND in $SEEDS seeds ($(( $(date +%s) - start )) s)"
  fi
  rm -f "$bin"
done
