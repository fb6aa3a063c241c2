#!/usr/bin/env bash
# Builds actionlint (the linter of GitHub Actions workflows) once per version
# into the tools cache, from its published Go module with its own go.sum, and
# prints the path of the binary. A second run returns the cached binary at once.
# The cache is $NODE_DRAINER_TOOLS_CACHE, default ~/.cache/node-drainer/tools
# (the same as build.sh).
set -euo pipefail
# its own module, never the repository's go.work (the product and test modules)
export GOWORK=off
version=${ACTIONLINT_VERSION:-v1.7.12}
cache=${NODE_DRAINER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-drainer/tools}
out=$cache/actionlint-$version
bin=$out/actionlint
mkdir -p "$cache"
exec 9>"$cache/.lock-actionlint"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

tmp=$(mktemp -d "$cache/build-actionlint.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building actionlint $version (first time only, ~1 min)..." >&2
(cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp/bin" GOFLAGS=-mod=readonly nice -n 10 \
  go install -trimpath -ldflags "-s -w" "github.com/rhysd/actionlint/cmd/actionlint@$version")
"$tmp/bin/actionlint" -version >&2
rm -rf "$out"
mv "$tmp/bin" "$out"
echo "$bin"
