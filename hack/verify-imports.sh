#!/usr/bin/env bash
# Enforces the import direction of the tree:
#   1. no package outside e2e/ imports e2e/ (test files and integration tests included);
#   2. no scheduler plugin imports another plugin or a package under it (they
#      meet through a contract package, scheduler/reservepod, over
#      frameworkext), and neither frameworkext nor a contract package imports
#      a plugin;
#   3. the production binaries link no test package and nothing of the cluster
#      program (kind/): nothing under test/ or e2e/, no Gantry package named
#      *test or *testing, no integration package, no benchmark package
#      (scheduler/bench), and nothing from kind/ except in gantry-cluster
#      itself;
#   4. nothing outside kind/ and e2e/ imports kind/ (test files and
#      integration tests included): tests and product code stand on libraries
#      (crds/install, internal/repo, the features' own packages), never on the
#      cluster program.
# golangci-lint's depguard states rule 1, the file-level part of rule 2 and
# the part of rule 4 that concerns product code (.golangci.yml); this check
# also reads what each binary really links (`go list -deps`), which depguard
# cannot see.
set -euo pipefail
cd "$(dirname "$0")/.."

module=github.com/gantry-dev/gantry
failed=0

# golist runs go list; the check fails when go list does (an import cycle,
# a missing package), rather than reading nothing and passing.
golist() { go list "$@" || { echo "go list $* failed" >&2; exit 1; }; }

# 1. Imports of e2e/ from outside it, in any file of any package.
all="$(golist -tags integration -f '{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./...)" || exit 1
while read -r pkg imports; do
  [[ "${pkg}" == "${module}/e2e" || "${pkg}" == "${module}/e2e/"* ]] && continue
  for imp in ${imports}; do
    if [[ "${imp}" == "${module}/e2e" || "${imp}" == "${module}/e2e/"* ]]; then
      echo "${pkg} imports ${imp}: only e2e/ may import e2e/ (shared test code belongs in test/)"
      failed=1
    fi
  done
done <<<"${all}"

# 2. Scheduler plugins never import one another, in any file (tests
#    included), nor any package under another plugin: what two plugins share
#    is declared in a contract package that neither owns
#    (scheduler/reservepod), over scheduler/frameworkext. A plugin's own
#    subpackages (plugins/<p>/integration) may import it; frameworkext and
#    the contract packages import no plugin at all.
plugins="$(golist -tags integration -f '{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' \
  ./scheduler/plugins/... ./scheduler/frameworkext/... ./scheduler/reservepod/...)" || exit 1
while read -r pkg imports; do
  own="" # frameworkext and the contract packages own no plugin
  if [[ "${pkg}" == "${module}/scheduler/plugins/"* ]]; then
    rel="${pkg#"${module}"/scheduler/plugins/}"
    own="${rel%%/*}"
  fi
  for imp in ${imports}; do
    [[ "${imp}" == "${module}/scheduler/plugins/"* ]] || continue
    other="${imp#"${module}"/scheduler/plugins/}"
    if [[ "${other%%/*}" != "${own}" ]]; then
      echo "${pkg} imports ${imp}: plugins meet through a contract package (scheduler/reservepod) over scheduler/frameworkext, never each other"
      failed=1
    fi
  done
done <<<"${plugins}"

# 3. What each production binary links.
binaries=(
  scheduler/cmd/kube-scheduler
  apiserver-patches/cmd/kube-apiserver
  admission/cmd/gantry-webhook
  autoscaler/cmd/gantry-provisioner
  kind # gantry-cluster, the cluster program: may link kind/, nothing else of the list
)
for bin in "${binaries[@]}"; do
  deps="$(golist -tags gantry_patched -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' "./${bin}")" || exit 1
  while read -r dep; do
    rel="${dep#"${module}"/}"
    [[ "${rel}" == "${dep}" ]] && continue # not Gantry's
    why=""
    case "${rel}" in
      test/* | e2e/*) why="test code" ;;
      */integration | */integration/*) why="an integration test package" ;;
      scheduler/bench | scheduler/bench/*) why="a benchmark package" ;;
      kind/*) [[ "${bin}" == kind ]] || why="the cluster program (kind/)" ;;
    esac
    if [[ -z "${why}" && "${rel##*/}" =~ (test|testing)$ ]]; then why="a test helper package"; fi
    if [[ -n "${why}" ]]; then
      echo "${bin} links ${dep}: ${why} never belongs in a shipped binary"
      failed=1
    fi
  done <<<"${deps}"
done

# 4. Imports of kind/ from outside kind/ and e2e/, in any file of any package.
while read -r pkg imports; do
  rel="${pkg#"${module}"/}"
  [[ "${rel}" == kind || "${rel}" == kind/* || "${rel}" == e2e || "${rel}" == e2e/* ]] && continue
  for imp in ${imports}; do
    if [[ "${imp}" == "${module}/kind" || "${imp}" == "${module}/kind/"* ]]; then
      echo "${pkg} imports ${imp}: only kind/ and e2e/ may import the cluster program (kind/); take what is shared from the package that owns it (crds/install, internal/repo, the feature's own package)"
      failed=1
    fi
  done
done <<<"${all}"

exit "${failed}"
