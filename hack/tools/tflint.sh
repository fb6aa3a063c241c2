#!/usr/bin/env bash
# Builds tflint (the terraform linter, with its bundled terraform ruleset) once
# per version into the tools cache (goinstall.sh) and prints the path of the
# binary. Its settings: terraform/.tflint.hcl; run by test/deploy/check.sh
# (make deploy-check).
set -euo pipefail
GOFLAGS=-mod=mod exec bash "$(dirname "$0")/goinstall.sh" tflint "${TFLINT_VERSION:-v0.64.0}" \
  github.com/terraform-linters/tflint --
