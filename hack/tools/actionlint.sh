#!/usr/bin/env bash
# Builds actionlint (the linter of GitHub Actions workflows) once per version
# into the tools cache (goinstall.sh: from its published Go module with its own
# go.sum) and prints the path of the binary. A second run returns the cached
# binary at once.
set -euo pipefail
CGO_ENABLED=0 GOFLAGS=-mod=readonly exec bash "$(dirname "$0")/goinstall.sh" actionlint "${ACTIONLINT_VERSION:-v1.7.12}" \
  github.com/rhysd/actionlint/cmd/actionlint -version -- -trimpath -ldflags "-s -w"
