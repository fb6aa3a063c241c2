#!/usr/bin/env bash
# Offline checks of the deployment descriptions: the SAM template
# (template.yaml) and the terraform module (terraform/).
#
#   bash test/deploy/check.sh
#
# Runs every check, prints what each one covered, lists what cannot be
# validated on a machine without internet access, and exits non-zero when any
# check failed or could not run. tflint, actionlint and terraform-docs are
# built once (hack/tools/*.sh) into
# ${NODE_DRAINER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-drainer/tools} (~3 min).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TFLINT_VERSION=v0.64.0 # built by hack/tools/tflint.sh into the tools cache
export TF_CLI_CONFIG_FILE=/dev/null # no ~/.terraformrc: silence terraform's warning

cd "$ROOT" || exit 2
failed=()

step() { printf '\n== %s\n   checks: %s\n' "$1" "$2"; }
pass() { printf '   PASS\n'; }
fail() { printf '   FAIL: %s\n' "$1"; failed+=("$1"); }

step "cfn-lint template.yaml" \
  "CloudFormation schema of every resource and property after the SAM transform, intrinsic functions, references, conditions"
if ! command -v cfn-lint >/dev/null; then
  fail "cfn-lint not installed (pip install cfn-lint)"
elif cfn-lint template.yaml; then
  pass
else
  fail "cfn-lint template.yaml"
fi

step "terraform fmt -check -recursive terraform" \
  "canonical formatting and HCL syntax of the module and terraform/examples/"
if ! command -v terraform >/dev/null; then
  fail "terraform not installed"
elif terraform fmt -check -recursive -diff terraform; then
  pass
else
  fail "terraform fmt (run: terraform fmt -recursive terraform)"
fi

step "tflint $TFLINT_VERSION (bundled terraform ruleset, preset all)" \
  "declared-but-unused and undeclared references, typed and documented variables/outputs, snake_case names, required_version/required_providers, module structure; module, modules/rbac and examples (terraform/.tflint.hcl)"
if ! TFLINT=$(TFLINT_VERSION=$TFLINT_VERSION bash hack/tools/tflint.sh); then
  fail "tflint could not be built (bash hack/tools/tflint.sh)"
elif (cd terraform && "$TFLINT" --config="$ROOT/terraform/.tflint.hcl" --recursive --format=compact); then
  pass
else
  fail "tflint"
fi

step "actionlint .github/workflows/*.yml" \
  "the release workflow: GitHub Actions syntax, expressions and their types, job needs, runner labels, action inputs, permissions; run: scripts through shellcheck when it is installed"
if ! ACTIONLINT=$(bash hack/tools/actionlint.sh); then
  fail "actionlint could not be built (bash hack/tools/actionlint.sh)"
elif "$ACTIONLINT" .github/workflows/*.yml; then
  pass
else
  fail "actionlint"
fi

step "terraform-docs (hack/tools/terraform-docs.sh, terraform/.terraform-docs.yml)" \
  "the inputs and outputs tables of terraform/README.md and terraform/modules/rbac/README.md are what terraform-docs generates from the variables and outputs (regenerate: see terraform/.terraform-docs.yml)"
if ! TFDOCS=$(bash hack/tools/terraform-docs.sh); then
  fail "terraform-docs could not be built"
else
  stale=()
  for dir in terraform terraform/modules/rbac; do
    if ! "$TFDOCS" -c terraform/.terraform-docs.yml --output-check "$dir"; then
      stale+=("$dir/README.md")
    fi
  done
  if ((${#stale[@]})); then
    fail "terraform-docs: stale tables in ${stale[*]}"
  else
    pass
  fi
fi

step "dashboard: template.yaml's body is terraform/dashboard.json.tftpl's (hack/dashboard)" \
  "the dashboard has one definition, terraform/dashboard.json.tftpl, which the module reads with templatefile; template.yaml (one file, for SAR and make dist) holds the copy hack/dashboard writes from it: stale when they differ (regenerate: make dashboard); the generator's own tests (a stale copy fails, placeholders only both descriptions know)"
if (GOWORK=off go test -count=1 ./hack/dashboard/ && GOWORK=off go run ./hack/dashboard -check); then
  pass
else
  fail "dashboard: template.yaml's DashboardBody is stale or the generator failed (run: make dashboard)"
fi

step "go test ./test/deploy/" \
  "template.yaml and terraform/ agree on event patterns, the sweep's schedule rule, IAM actions and statements, managed policies, environment variables and defaults, function runtime/architecture/handler/timeout/memory, hooks, access entry, alarms, parameters and outputs; the same dashboard in both, naming only metrics of internal/metrics' catalog (name, dimension set, values) or Lambda's own; both match the configuration contract; every IAM action the code's AWS calls need is granted, and every IAM action granted is used; for each setting (default and another lease namespace, node deletion on and off) the RBAC of terraform/kubernetes/ grants every Kubernetes request of the code in its namespace and nothing more; no wildcard IAM action, Resource \"*\" only for actions without resource types; no wildcard in terraform/kubernetes/*.yaml; the template's parameters described, grouped and labelled, duration patterns accepted by the configuration; each check is shown to fail when one side alone changes; make dist: both zips (bootstrap 0755 of the right ELF machine), SHA256SUMS, reproducible (the amd64 bootstrap linked and zipped again, the template packaged again: byte-identical), the packaged template.yaml linted and equal to template.yaml's stack; the product's go.mod tidy and requiring only modules the function links (none of the tests'); the release workflow publishes only after make test, the files make dist built, checked against SHA256SUMS"
# -timeout: TestMakeDist builds bootstrap for arm64 and amd64 (a cold build cache takes minutes)
if go test -count=1 -timeout 30m ./test/deploy/; then
  pass
else
  fail "go test ./test/deploy/"
fi

cat <<'NOTE'

== NOT validated here (no internet: no provider or plugin download, no AWS account)
   - terraform init / validate / plan: the hashicorp/aws and hashicorp/kubernetes providers
     cannot be downloaded, so argument names and types of aws_* and kubernetes_* resources
     are NOT checked against the provider schemas (tflint's aws ruleset needs `tflint --init`
     too). Run `terraform -chdir=terraform/examples/eks init && terraform validate` online.
   - sam validate / sam build: SAM CLI is not installed; cfn-lint applies the SAM transform
     (the template has no other: no Fn::ForEach). Publishing to the Serverless Application
     Repository is not tried: test/deploy holds the template to its documented rules.
   - Behaviour in AWS: IAM policy evaluation, EventBridge matching of real events
     (`aws events test-event-pattern`), lifecycle hooks, the EKS access entry, VPC reachability.
NOTE

echo
if ((${#failed[@]})); then
  printf 'deploy checks: %d failed:\n' "${#failed[@]}"
  printf '   - %s\n' "${failed[@]}"
  exit 1
fi
echo "deploy checks: all passed (within the limits above)"
