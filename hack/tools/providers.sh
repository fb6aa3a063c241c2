#!/usr/bin/env bash
# Builds the terraform providers the module needs, once per machine, into the
# tools cache, laid out as a terraform filesystem_mirror, and writes a CLI
# config that points `terraform init` at it (no network needed):
#
#   $cache/terraform-providers/registry.terraform.io/hashicorp/<name>/<version>/linux_<arch>/terraform-provider-<name>_v<version>
#   $cache/terraform-providers/terraform.rc      (use as TF_CLI_CONFIG_FILE)
#
# The providers are Go modules; the module proxy serves them at pinned
# pseudo-versions (the published tags are not valid Go module versions):
#   hashicorp/aws        6.47.1 = github.com/hashicorp/terraform-provider-aws@v1.60.1-0.20260602190131-5f2286d6d836
#   hashicorp/kubernetes 3.2.1  = github.com/hashicorp/terraform-provider-kubernetes@v1.13.4-0.20260821094251-3a33fb6cc605
#
# The aws provider is built with only the service packages the module and the
# test root use registered (see aws_services below): the full provider
# registers ~270 services and takes 11-18 min to build on 2 cores. The trim
# edits a copy of the module's source in a temp dir (the module cache is
# read-only): the generated service-package list
# (internal/provider/sdkv2/service_packages_gen.go) and the generated client
# accessors (internal/conns/awsclient_gen.go), nothing else. A resource of a service left out fails
# at `terraform plan` with "The provider hashicorp/aws does not support
# resource type ...": add the service here when the module starts using one.
#
# Measured 2026-11-23 on the 2-core go machine, warm module cache, a build
# cache of its own, while two other jobs built (load average 10-22):
#   aws, trimmed as below: 27 min wall (1618 s; its deps partly compiled by an
#     interrupted earlier attempt). Registering fewer services alone does not
#     help much: internal/conns imports every SDK client; see trim_aws.
#   kubernetes: 19.6 min wall, 5.6 min user CPU.
# On an idle machine expect a fraction of that; a second run returns at once.
#
# Prints the CLI config's path. Same cache root as build.sh, its own lock file.
set -euo pipefail
# its own modules, never the repository's go.work (the product and test modules)
export GOWORK=off

aws_module=github.com/hashicorp/terraform-provider-aws
aws_pseudo=v1.60.1-0.20260602190131-5f2286d6d836
aws_version=6.47.1
k8s_module=github.com/hashicorp/terraform-provider-kubernetes
k8s_pseudo=v1.13.4-0.20260821094251-3a33fb6cc605
k8s_version=3.2.1

# What terraform/*.tf and test/install's root use: data aws_partition,
# aws_region (meta), aws_caller_identity (sts), aws_iam_policy_document and the
# role (iam), log group (logs), queue (sqs), function (lambda), rules (events),
# alarms (cloudwatch), lifecycle hooks (autoscaling), access entry and
# aws_eks_cluster (eks).
aws_services=(autoscaling cloudwatch eks events iam lambda logs meta sqs sts)

cache=${NODE_DRAINER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-drainer/tools}
mirror=$cache/terraform-providers
arch=$(go env GOARCH)
os=$(go env GOOS)
mkdir -p "$cache"
# its own lock: a provider build takes minutes and must not hold up build.sh (the harness)
exec 9>"$cache/.providers.lock"
flock 9

aws_bin=$mirror/registry.terraform.io/hashicorp/aws/$aws_version/${os}_$arch/terraform-provider-aws_v$aws_version
k8s_bin=$mirror/registry.terraform.io/hashicorp/kubernetes/$k8s_version/${os}_$arch/terraform-provider-kubernetes_v$k8s_version
rc=$mirror/terraform.rc
srcs=()
trap 'rm -rf "${srcs[@]}"' EXIT
trap 'exit 1' INT TERM

# module_dir prints the download folder of module@version.
module_dir() {
  go mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# build <module> <pseudo-version> <output> <ldflags> [edit-function]: copies
# the module's source to a temp dir (the module cache is read-only), runs the
# edit, builds main with -trimpath and the module's own go.sum.
build() {
  local module=$1 pseudo=$2 out=$3 ldflags=$4 edit=${5:-}
  local dir src
  dir=$(module_dir "$module" "$pseudo")
  [ -n "$dir" ] || { echo "cannot download $module@$pseudo" >&2; return 1; }
  src=$(mktemp -d "$cache/provider-src.XXXXXX")
  srcs+=("$src")
  cp -r "$dir/." "$src/"
  chmod -R u+w "$src"
  if [ -n "$edit" ]; then (cd "$src" && "$edit"); fi
  mkdir -p "$(dirname "$out")"
  local start=$SECONDS
  (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=readonly nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$out.tmp" .)
  mv "$out.tmp" "$out"
  rm -rf "$src"
  echo "built $(basename "$out") in $((SECONDS - start))s" >&2
}

# trim_aws rewrites the generated list of service packages to aws_services.
trim_aws() {
  local f=internal/provider/sdkv2/service_packages_gen.go
  [ -f "$f" ] || { echo "$f not found: the provider's layout changed" >&2; return 1; }
  {
    echo '// Trimmed by node-drainer hack/tools/providers.sh: only the services the module uses.'
    echo 'package sdkv2'
    echo 'import ('
    echo '	"context"'
    echo '	"slices"'
    echo '	"github.com/hashicorp/terraform-provider-aws/internal/conns"'
    for s in "${aws_services[@]}"; do echo "	\"github.com/hashicorp/terraform-provider-aws/internal/service/$s\""; done
    echo ')'
    echo 'func servicePackages(ctx context.Context) []conns.ServicePackage {'
    echo '	v := []conns.ServicePackage{'
    for s in "${aws_services[@]}"; do echo "		$s.ServicePackage(ctx),"; done
    echo '	}'
    echo '	return slices.Clone(v)'
    echo '}'
  } >"$f"
  gofmt -w "$f"
  # The AWS client accessors (internal/conns/awsclient_gen.go) import every
  # one of the ~260 SDK service clients, so even a trimmed provider compiles
  # them all (most of the build time). Keep the accessors that the code still
  # built calls (the kept services and the shared packages), drop the rest.
  python3 - "${aws_services[@]}" <<'PY'
import os, re, sys
keep = set(sys.argv[1:])
used = set()
for root, dirs, files in os.walk("internal"):
    parts = root.split(os.sep)
    if len(parts) >= 3 and parts[1] == "service" and parts[2] not in keep:
        dirs[:] = []
        continue
    for name in files:
        if name.endswith(".go") and not name.endswith("_test.go") and name != "awsclient_gen.go":
            used.update(re.findall(r"\.([A-Z][A-Za-z0-9]*Client)\(", open(os.path.join(root, name)).read()))
path = "internal/conns/awsclient_gen.go"
src = open(path).read()
head, rest = src.split("\nimport (", 1)
imports, body = rest.split("\n)\n", 1)
blocks = re.split(r"\n(?=func )", body)
kept, pkgs = [blocks[0]], set()
for b in blocks[1:]:
    m = re.match(r"func \(c \*AWSClient\) (\w+)\(ctx context\.Context\) \*(\w+)\.Client", b)
    if m is None or m.group(1) in used:
        kept.append(b)
        if m:
            pkgs.add(m.group(2))
lines = [l for l in imports.splitlines() if "aws-sdk-go-v2/service/" not in l or l.strip().strip('"').rsplit("/", 1)[-1] in pkgs]
open(path, "w").write(head + "\nimport (" + "\n".join(lines) + "\n)\n" + "\n".join(kept))
print(f"awsclient_gen.go: kept {len(pkgs)} SDK clients", file=sys.stderr)
PY
  gofmt -w internal/conns/awsclient_gen.go
}

if [ ! -x "$aws_bin" ]; then
  echo "building terraform-provider-aws $aws_version, services: ${aws_services[*]} (first time only, several minutes)..." >&2
  build "$aws_module" "$aws_pseudo" "$aws_bin" \
    "-s -w -X github.com/hashicorp/terraform-provider-aws/version.ProviderVersion=$aws_version" trim_aws
fi
if [ ! -x "$k8s_bin" ]; then
  echo "building terraform-provider-kubernetes $k8s_version (first time only, several minutes)..." >&2
  build "$k8s_module" "$k8s_pseudo" "$k8s_bin" "-s -w"
fi

cat >"$rc.tmp" <<EOF
# Generated by hack/tools/providers.sh: terraform init installs the providers
# from the tools cache and never asks the network.
provider_installation {
  filesystem_mirror {
    path    = "$mirror"
    include = ["registry.terraform.io/hashicorp/aws", "registry.terraform.io/hashicorp/kubernetes"]
  }
}
EOF
mv "$rc.tmp" "$rc"
echo "$rc"
