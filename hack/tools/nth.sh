#!/usr/bin/env bash
# Builds aws-node-termination-handler (the peer the bench measures node-drainer
# against) once per version into the tools cache, from its published Go module,
# as its own Makefile does (cmd/node-termination-handler.go, -s -w) plus
# -trimpath and CGO_ENABLED=0. A second run finds the binary and returns at once.
# The cache is $NODE_DRAINER_TOOLS_CACHE, default ~/.cache/node-drainer/tools
# (the same as build.sh). Prints the path of the binary.
set -euo pipefail
# its own modules, never the repository's go.work (the product and test modules)
export GOWORK=off
version=${NTH_VERSION:-v1.25.6}
module=github.com/aws/aws-node-termination-handler
cache=${NODE_DRAINER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-drainer/tools}
out=$cache/nth-$version
bin=$out/node-termination-handler
mkdir -p "$cache"
exec 9>"$cache/.lock-nth"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

tmp=$(mktemp -d "$cache/build-nth.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building $module@$version (first time only, ~2 min)..." >&2
start=$(date +%s)
dir=$(GOFLAGS=-mod=mod go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] || { echo "nth.sh: go mod download $module@$version gave no directory" >&2; exit 1; }
# The module's own go.mod and go.sum pin its dependencies; build it in place
# (the module cache is read-only, the build writes only to -o and GOCACHE).
(cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=readonly nice -n 10 go build -trimpath -ldflags "-s -w" \
  -o "$tmp/node-termination-handler" ./cmd/node-termination-handler.go)
echo "built $module@$version in $(($(date +%s) - start)) s" >&2
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "$bin"
