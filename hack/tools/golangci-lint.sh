#!/usr/bin/env bash
# Builds golangci-lint (the Go linters runner, v2) once per version into the
# tools cache, from its published Go module with its own go.sum, and prints
# the path of the binary. A second run returns the cached binary at once.
# The cache is $NODE_DRAINER_TOOLS_CACHE, default ~/.cache/node-drainer/tools
# (the same as build.sh). The linters and their settings: .golangci.yml.
set -euo pipefail
# its own module, never the repository's go.work (the product and test modules)
export GOWORK=off
version=${GOLANGCI_LINT_VERSION:-v2.15.0}
cache=${NODE_DRAINER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-drainer/tools}
out=$cache/golangci-lint-$version
bin=$out/golangci-lint
mkdir -p "$cache"
exec 9>"$cache/.lock-golangci-lint"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

tmp=$(mktemp -d "$cache/build-golangci-lint.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building golangci-lint $version (first time only, ~4 min)..." >&2
(cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp/bin" GOFLAGS=-mod=readonly nice -n 10 \
  go install -trimpath -ldflags "-s -w -X main.version=${version#v}" \
  "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version")
"$tmp/bin/golangci-lint" version >&2
rm -rf "$out"
mv "$tmp/bin" "$out"
echo "$bin"
