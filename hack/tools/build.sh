#!/usr/bin/env bash
# Builds the harness's real components once per version into a cache:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler (from this
#   module, i.e. Kubernetes' own code) and kwok (the kubelet stand-in) with its
#   stage definitions. A second run finds them and returns at once.
# The cache is $NODE_DRAINER_TOOLS_CACHE, default ~/.cache/node-drainer/tools.
# Prints the directory that holds the binaries.
set -euo pipefail
# its own modules, never the repository's go.work (the product and test modules)
export GOWORK=off
here=$(cd "$(dirname "$0")" && pwd)
k8s_version=$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
kwok_version=v0.8.0
cache=${NODE_DRAINER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-drainer/tools}
mkdir -p "$cache"

# NODE_DRAINER_K8S_VERSION=vX.Y.Z builds another release's control plane
# (make test-matrix): see build_version below.
want=${NODE_DRAINER_K8S_VERSION:-$k8s_version}
if [ "$want" != "$k8s_version" ]; then
  base=$(NODE_DRAINER_K8S_VERSION= bash "$0") # etcd, kwok and stages are the default build's
  out=$cache/kubernetes-$want-kwok-$kwok_version
  # a lock per release: building one never holds up a harness of another
  exec 9>"$out.lock"
  flock 9
  missing=0
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do [ -x "$out/$b" ] || missing=1; done
  if [ "$missing" = 0 ]; then echo "$out"; exit 0; fi
  tmp=$(mktemp -d "$cache/build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # A tools module of its own for that release, generated as for the default
  # one: require k8s.io/kubernetes, replace each staging module its go.mod
  # points at ./staging with the published v0.Y.Z. A staging module the
  # module proxy does not serve at that version (the sample-* ones, which no
  # control-plane command imports) is replaced by an empty local module so
  # the module graph still loads.
  mkdir -p "$tmp/src/cmd" "$tmp/out"
  for c in kube-apiserver kube-controller-manager kube-scheduler; do cp -r "$here/cmd/$c" "$tmp/src/cmd/"; done
  kmod=$(go mod download -json "k8s.io/kubernetes@$want" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  [ -n "$kmod" ] || { echo "k8s.io/kubernetes@$want is not on the module proxy" >&2; exit 1; }
  staging=v0.${want#v1.}
  cd "$tmp/src"
  {
    echo "module github.com/node-drainer/node-drainer/hack/tools/k8s-$want"
    grep -E '^(go|godebug) ' "$kmod"
    echo "require k8s.io/kubernetes $want"
  } > go.mod
  for m in $(sed -n 's/^[[:space:]]*\(k8s.io\/[a-z0-9-]*\) => \.\/staging.*/\1/p' "$kmod"); do
    if go mod download "$m@$staging" 2>/dev/null; then
      go mod edit -replace "$m=$m@$staging"
    else
      echo "  $m@$staging not served: replaced by an empty module (not imported by the control plane)" >&2
      mkdir -p "empty/$m" && echo "module $m" > "empty/$m/go.mod"
      go mod edit -replace "$m=./empty/$m"
    fi
  done
  GOFLAGS=-mod=mod go mod tidy >&2
  major=${want#v}; minor=${major#*.}; major=${major%%.*}; minor=${minor%%.*}
  pkg=k8s.io/component-base/version
  echo "building Kubernetes $want control plane (first time only, ~8 min)..." >&2
  CGO_ENABLED=0 nice -n 5 go build -trimpath -ldflags "-s -w -X $pkg.gitVersion=$want -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor" -o "$tmp/out/" ./cmd/...
  cp -r "$base/etcd" "$base/kwok" "$base/stages" "$tmp/out/"
  chmod -R u+w "$tmp"
  rm -rf "$out"
  mv "$tmp/out" "$out"
  echo "$out"
  exit 0
fi

out=$cache/kubernetes-$k8s_version-kwok-$kwok_version
exec 9>"$out.lock"
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
