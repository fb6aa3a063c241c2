#!/usr/bin/env bash
# Builds a Go command from its published module, once per version, into the
# tools cache (`go install PACKAGE@VERSION`: the module's own go.mod and
# go.sum pin what it links) and prints the binary's path; a second run
# returns it at once. One lock per tool: a caller that finds its build under
# way waits for it and never starts a second one (make test builds the tools
# in the background while its stages ask for them). The cache is
# $NODE_DRAINER_TOOLS_CACHE, default ~/.cache/node-drainer/tools (the same as
# build.sh). The scripts of golangci-lint, actionlint and tflint call it:
#
#   goinstall.sh NAME VERSION PACKAGE [VERSION-ARG] -- [go install flags...]
#
# NAME is the binary go install writes (PACKAGE's last element); VERSION-ARG,
# when given, makes the new binary print its version once it is built (in the
# build's log: it runs). CGO_ENABLED and GOFLAGS are the caller's.
set -euo pipefail
# its own module, never the repository's go.work (the product and test modules)
export GOWORK=off
[ $# -ge 4 ] || { echo "usage: goinstall.sh NAME VERSION PACKAGE [VERSION-ARG] -- [go install flags...]" >&2; exit 2; }
name=$1 version=$2 pkg=$3
shift 3
check=()
if [ "$1" != -- ]; then
  check=("$1")
  shift
fi
[ "${1:-}" = -- ] && shift
cache=${NODE_DRAINER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-drainer/tools}
out=$cache/$name-$version
bin=$out/$name
mkdir -p "$cache"
exec 9>"$cache/.lock-$name"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

tmp=$(mktemp -d "$cache/build-$name.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building $name $version (first time only, a few minutes)..." >&2
start=$(date +%s)
(cd "$tmp" && GOBIN="$tmp/bin" nice -n 10 go install "$@" "$pkg@$version")
if ((${#check[@]})); then "$tmp/bin/$name" "${check[@]}" >&2; fi
echo "built $name $version in $(($(date +%s) - start)) s" >&2
rm -rf "$out"
mv "$tmp/bin" "$out"
echo "$bin"
