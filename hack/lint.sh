#!/usr/bin/env bash
# Runs golangci-lint, pinned in hack/tools/lint/go.mod, with .golangci.yml.
#   hack/lint.sh [golangci-lint run flags] [packages]   (default ./...)
set -euo pipefail
cd "$(dirname "$0")/.."
args=("$@")
((${#args[@]})) || args=(./...)
exec go tool -modfile=hack/tools/lint/go.mod golangci-lint run "${args[@]}"
