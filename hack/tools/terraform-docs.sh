#!/usr/bin/env bash
# Builds terraform-docs, once per machine, into the tools cache and prints
# the binary's path. terraform-docs writes the inputs/outputs tables of
# terraform/README.md and terraform/modules/rbac/README.md (between the
# BEGIN_TF_DOCS / END_TF_DOCS markers; settings in terraform/.terraform-docs.yml),
# and test/deploy/check.sh fails when they are stale.
#
# Built like hack/tools/providers.sh builds the providers: the module proxy
# serves the pinned version's source (its version list is not served, so
# `go install …@version` fails looking up deprecations), built with the
# module's own go.mod and go.sum.
set -euo pipefail

module=github.com/terraform-docs/terraform-docs
version=v0.20.0
export GOWORK=off # its own module, not the repository's workspace

cache=${NODE_DRAINER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-drainer/tools}
bin=$cache/terraform-docs-$version/terraform-docs
mkdir -p "$(dirname "$bin")"
exec 9>"$cache/.terraform-docs.lock"
flock 9

if [ ! -x "$bin" ]; then
  echo "building terraform-docs $version (first time only, a few minutes)..." >&2
  dir=$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || { echo "cannot download $module@$version" >&2; exit 1; }
  src=$(mktemp -d "$cache/terraform-docs-src.XXXXXX")
  trap 'rm -rf "$src"' EXIT
  cp -r "$dir/." "$src/"
  chmod -R u+w "$src"
  start=$SECONDS
  (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=readonly nice -n 10 go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
  echo "built terraform-docs $version in $((SECONDS - start))s" >&2
fi
echo "$bin"
