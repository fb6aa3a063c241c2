#!/usr/bin/env bash
# `make test` (and so CI, .ci/run): every check and suite, arranged so that a
# 2-core machine is not idle while it waits.
#
#   bash hack/test.sh
#
# - The tools (control plane and kwok, golangci-lint, tflint, actionlint,
#   terraform-docs, the terraform providers, aws-node-termination-handler for
#   the faults' nth-beside-node-drainer) build in the background from the
#   start, beside the stages that need none of them (gofmt, vet, size, unit,
#   the simulation). Each hack/tools script holds a lock per tool and returns
#   the cached binary at once, so a stage that needs a tool still being built
#   waits for that build and never starts a second one. With the tools cache
#   warm they all return within a second.
# - The function binary the harness suites run is built once (the Makefile's
#   HARNESS_BOOTSTRAP) and shared by integration, conformance, faults and
#   deploy-test.
# - The real deploys (deploy-test: terraform and SAM against the emulator; its
#   ten minutes are mostly terraform waiting on the emulator and on the aws
#   provider's own waits, two of them over two minutes each for a queue's
#   deletion) start as soon as the function binary is built, in the background
#   beside unit, the simulation, the linters and integration: started after
#   them they were the run's longest path (measured 1,319 s warm). The unit
#   tier under the race detector (make race: cgo on, a build of its own)
#   runs right after unit, in the foreground: the handler's tests keep
#   real-time budgets that the detector's slowdown on a machine busy with
#   other stages can break (a sweep's 5 s ran out once so). Conformance
#   runs beside integration; faults run alone after them (its scenes time
#   heartbeats and held watches: a loaded machine is not what they are
#   about). A background stage's output is printed whole when it ends, so the
#   log stays readable.
#
# Each stage prints "== make test: STAGE" when it starts and a line with its
# result and wall time when it ends; the run ends with a table of them (the
# numbers docs/testing.md's table is made of). A failed stage ends the run,
# and the background stages with it (their output so far is printed).
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
logs=$(mktemp -d "${TMPDIR:-/tmp}/make-test.XXXXXX")
start=$(date +%s)
trap 'echo "make test: interrupted"; finish 130' INT TERM
results=()
bg_pids=() bg_names=()

now() { date +%s; }
record() { # NAME RC SECONDS
  local r=ok
  [ "$2" = 0 ] || r=FAILED
  results+=("$(printf '%-16s %-7s %5d s' "$1" "$r" "$3")")
  echo "== make test: $1 $r in $3 s"
}

# run NAME TARGET [ARGS...]: a stage in the foreground
run() {
  local name=$1 s
  shift
  echo "== make test: $name"
  s=$(now)
  $MAKE --no-print-directory "$@"
  local rc=$?
  record "$name" $rc $(($(now) - s))
  [ $rc = 0 ] || finish 1
}

# spawn NAME TARGET [ARGS...]: a stage in the background, its output in a log,
# in a process group of its own (ended whole if the run fails)
spawn() {
  local name=$1
  shift
  echo "== make test: $name (in the background)"
  setsid bash -c 's=$(date +%s); "$@"; rc=$?; echo "$rc $(($(date +%s) - s))" > "$0.rc"' \
    "$logs/$name" $MAKE --no-print-directory "$@" > "$logs/$name.log" 2>&1 &
  bg_pids+=($!)
  bg_names+=("$name")
}

# reap NAME: wait for a background stage, print its output and result
reap() {
  local i
  for i in "${!bg_names[@]}"; do
    [ "${bg_names[$i]}" = "$1" ] || continue
    wait "${bg_pids[$i]}"
    echo "== make test: $1's output"
    cat "$logs/$1.log"
    local rc secs
    read -r rc secs < "$logs/$1.rc" || { rc=1 secs=0; }
    unset "bg_names[$i]" "bg_pids[$i]"
    record "$1" "$rc" "$secs"
    [ "$rc" = 0 ] || finish 1
    return
  done
}

# finish RC: end the background stages still running (their process groups),
# print the table, exit RC
finish() {
  local i name
  for i in "${!bg_names[@]}"; do
    name=${bg_names[$i]}
    [ -e "$logs/$name.rc" ] || kill -- "-${bg_pids[$i]}" 2>/dev/null
    wait "${bg_pids[$i]}" 2>/dev/null
    [ "$name" = tools ] && continue
    echo "== make test: ${name} ended unfinished; its output:"
    cat "$logs/$name.log"
  done
  echo
  echo "make test: stages (wall time; background stages overlap the others)"
  printf '  %s\n' "${results[@]}"
  echo "make test: $([ "$1" = 0 ] && echo ok || echo FAILED) in $(($(now) - start)) s"
  rm -rf "$logs"
  exit "$1"
}

spawn tools tools-all
run fmt-check fmt-check
run vet vet
run bootstrap harness-bootstrap
spawn deploy-test deploy-test
run size size
run unit unit
run bubbles bubbles
run race race
run sim sim SEEDS=5000
run golangci golangci
run deploy-check deploy-check
spawn conformance conformance
run integration integration
reap conformance
reap deploy-test
run faults faults
reap tools
finish 0
