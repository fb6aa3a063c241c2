#!/usr/bin/env bash
# Builds golangci-lint (the Go linters runner, v2) once per version into the
# tools cache (goinstall.sh: from its published Go module with its own go.sum)
# and prints the path of the binary. A second run returns the cached binary at
# once. The linters and their settings: .golangci.yml.
set -euo pipefail
version=${GOLANGCI_LINT_VERSION:-v2.15.0}
CGO_ENABLED=0 GOFLAGS=-mod=readonly exec bash "$(dirname "$0")/goinstall.sh" golangci-lint "$version" \
  github.com/golangci/golangci-lint/v2/cmd/golangci-lint version -- -trimpath -ldflags "-s -w -X main.version=${version#v}"
