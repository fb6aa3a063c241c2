#!/usr/bin/env bash
# Builds the harness's real components once per version into a cache:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler (from this
#   module, i.e. Kubernetes' own code) and kwok (the kubelet stand-in) with its
#   stage definitions. A second run finds them and returns at once.
# The cache is $NODE_DRAINER_TOOLS_CACHE, default ~/.cache/node-drainer/tools.
# Prints the directory that holds the binaries.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s_version=$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
kwok_version=v0.8.0
cache=${NODE_DRAINER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-drainer/tools}
out=$cache/kubernetes-$k8s_version-kwok-$kwok_version
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
missing=0
for b in "${bins[@]}"; do [ -x "$out/$b" ] || missing=1; done
[ -d "$out/stages" ] || missing=1
if [ "$missing" = 0 ]; then echo "$out"; exit 0; fi

tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
major=${k8s_version#v}; minor=${major#*.}; major=${major%%.*}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
echo "building Kubernetes $k8s_version control plane (first time only, ~6 min)..." >&2
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/" ./cmd/...)
echo "building kwok $kwok_version (first time only, ~2 min)..." >&2
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-mod=mod go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$kwok_version"
kwok_dir=$(go mod download -json "sigs.k8s.io/kwok@$kwok_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
mkdir -p "$tmp/stages"
for s in node/fast node/heartbeat-with-lease pod/fast; do
  for f in "$kwok_dir/kustomize/stage/$s"/*.yaml; do
    case "$(basename "$f")" in kustomization.yaml) continue ;; esac
    cp "$f" "$tmp/stages/$(echo "$s" | tr / -)-$(basename "$f")"
  done
done
chmod -R u+w "$tmp"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "$out"
