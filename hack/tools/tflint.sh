#!/usr/bin/env bash
# Builds tflint (the terraform linter, with its bundled terraform ruleset) once
# per version into the tools cache and prints the path of the binary. A second
# run returns the cached binary at once. The cache is $NODE_DRAINER_TOOLS_CACHE,
# default ~/.cache/node-drainer/tools (the same as build.sh). Its settings:
# terraform/.tflint.hcl; run by test/deploy/check.sh (make deploy-check).
set -euo pipefail
# its own module, never the repository's go.work (the product and test modules)
export GOWORK=off
version=${TFLINT_VERSION:-v0.64.0}
cache=${NODE_DRAINER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-drainer/tools}
out=$cache/tflint-$version
bin=$out/tflint
mkdir -p "$cache"
exec 9>"$cache/.lock-tflint"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

tmp=$(mktemp -d "$cache/build-tflint.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building tflint $version (first time only, ~3 min)..." >&2
(cd "$tmp" && GOBIN="$tmp/bin" GOFLAGS=-mod=mod nice -n 10 \
  go install "github.com/terraform-linters/tflint@$version")
rm -rf "$out"
mv "$tmp/bin" "$out"
echo "$bin"
