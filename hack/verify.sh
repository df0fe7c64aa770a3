#!/usr/bin/env bash
# Fails when anything hack/update.sh would change, when code does not vet or
# lint, when build output is in the tree, when an import goes the wrong way, or
# when README.md's make targets or e2e labels differ from their sources.
# Every generated file is regenerated into a temporary copy and diffed, so the
# checkout is never modified.
set -uo pipefail
GANTRY_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "${GANTRY_ROOT}/hack/lib.sh"
cd "${GANTRY_ROOT}"

failed=()
check() {
  local name="$1"; shift
  printf '==> verify %s\n' "${name}"
  if ! "$@"; then
    failed+=("${name}")
    printf 'FAILED: %s\n' "${name}"
  fi
}

gofmt_clean() {
  local bad
  bad="$(gofmt -s -l $(git ls-files -co --exclude-standard '*.go'))"
  [[ -z "${bad}" ]] || { printf 'not gofmt -s clean (run make update):\n%s\n' "${bad}"; return 1; }
}

vet() { go vet ./... && (cd hack/tools/perf && go vet ./...); }

tidy() {
  local m
  for m in . hack/tools hack/tools/lint hack/tools/images hack/tools/node hack/tools/crictl hack/tools/perf hack/tools/kueue; do
    (cd "${m}" && go mod tidy -diff) || return 1
  done
}

# The replace block must be exactly what the pin script derives from the pinned release.
pinned() {
  local tmp; tmp="$(mktemp -d)"
  mkdir -p "${tmp}/hack"
  cp go.mod go.sum "${tmp}/"
  cp hack/pin-kubernetes.sh hack/lib.sh "${tmp}/hack/"
  (cd "${tmp}" && hack/pin-kubernetes.sh "$(cd "${GANTRY_ROOT}" && gantry::k8s_version)" >/dev/null) || { rm -rf "${tmp}"; return 1; }
  local rc=0
  diff -u go.mod "${tmp}/go.mod" || { echo "go.mod replace block is stale: run make update"; rc=1; }
  rm -rf "${tmp}"
  return "${rc}"
}

crds() {
  local tmp rc=0
  tmp="$(mktemp -d)"
  gantry::copy_checkout "${tmp}"
  if ! (GANTRY_ROOT="${tmp}" && gantry::generate_crds && gantry::generate_clients && gantry::generate_scheduler_config); then
    rc=1
  # crds/ holds the deepcopy code, the CRD YAML (crds/manifests) and the typed
  # clients (crds/client); scheduler/apis the scheduler plugin args' code.
  elif ! diff -ruN crds "${tmp}/crds" || ! diff -ruN scheduler/apis "${tmp}/scheduler/apis"; then
    echo "generated API code, CRD YAML, typed clients or plugin args code are stale: run make update"
    rc=1
  fi
  rm -rf "${tmp}"
  return "${rc}"
}

# README.md's make-target table and e2e label list, regenerated from the
# Makefile and e2e/framework/suite.go into a temporary copy and diffed.
docs() {
  local tmp rc=0
  tmp="$(mktemp -d)"
  mkdir -p "${tmp}/e2e/framework"
  cp README.md Makefile "${tmp}/"
  cp e2e/framework/suite.go "${tmp}/e2e/framework/"
  if ! hack/update-docs.sh "${tmp}"; then
    rc=1
  elif ! diff -u README.md "${tmp}/README.md"; then
    echo "README.md's make targets or e2e labels are stale: run make update (hack/update-docs.sh)"
    rc=1
  fi
  rm -rf "${tmp}"
  return "${rc}"
}

# Component READMEs say what a component is, its contracts and how to run and
# test it; rationale goes to docs/design/ and figures to generated pages, so
# none needs more than 150 lines. The top-level README is the front page.
readme_length() {
  local f n rc=0
  while read -r f; do
    n="$(wc -l <"${f}")"
    if ((n > 150)); then
      echo "${f} has ${n} lines (at most 150: move rationale to docs/design/, figures to a generated page)"
      rc=1
    fi
  done < <(git ls-files -co --exclude-standard '*/README.md')
  return "${rc}"
}

check gofmt gofmt_clean
check vet vet
check "go.mod tidy" tidy
check "kubernetes pin" pinned
check "generated API code, CRDs, clients and plugin args" crds
check "README make targets and e2e labels" docs
check "component READMEs at most 150 lines" readme_length
check "bazel metadata (gazelle, buildifier)" hack/update-bazel.sh --verify
check "no build output or oversized files in the tree" hack/verify-tree.sh
check "import direction (e2e/, test/, kind/ and what binaries link)" hack/verify-imports.sh
check "golangci-lint (depguard, importas, errorlint, contextual logging)" hack/lint.sh

if ((${#failed[@]})); then
  printf '\nverify failed: %s\n' "${failed[*]}"
  exit 1
fi
echo "verify passed"
