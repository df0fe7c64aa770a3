#!/usr/bin/env bash
# Regenerates the Bazel metadata: BUILD.bazel files (gazelle) and the go_deps
# use_repo list of MODULE.bazel, then formats all Starlark (buildifier).
#
# Bazel itself cannot be installed on the machines Gantry is developed on (see
# the Bazel section of README.md), so gazelle runs standalone. It is told every
# module of go.mod up front (-repo_config) so it resolves imports without
# network lookups and names repos as go_deps does.
#
#   hack/update-bazel.sh            rewrite files
#   hack/update-bazel.sh --verify   fail, showing the diff, when files are stale
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "${root}"
mode=fix
[[ "${1:-}" == "--verify" ]] && mode=diff

tool() { go tool -modfile=hack/tools/go.mod "$@"; }

# The repo name gazelle and go_deps derive from a module path:
# k8s.io/client-go -> io_k8s_client_go, github.com/onsi/ginkgo/v2 -> com_github_onsi_ginkgo_v2.
repo_name() {
  local path="${1,,}" host rest
  host="${path%%/*}"; rest=""
  [[ "${path}" == */* ]] && rest="/${path#*/}"
  local IFS=. parts; read -ra parts <<<"${host}"
  local rev="" i
  for ((i=${#parts[@]}-1; i>=0; i--)); do rev+="${parts[i]}."; done
  rev="${rev%.}${rest//\//.}"
  rev="${rev//-/_}"; echo "${rev//./_}"
}

tmp="$(mktemp -d)"; trap 'rm -rf "${tmp}"' EXIT
repo_config="${tmp}/repos.bzl"
while read -r mod; do
  [[ "${mod}" == "github.com/gantry-dev/gantry" ]] && continue
  printf 'go_repository(name = "%s", importpath = "%s")\n' "$(repo_name "${mod}")" "${mod}"
done < <(go list -m -f '{{.Path}}' all) >"${repo_config}"

status=0
tool gazelle -repo_root . -repo_config "${repo_config}" -mode "${mode}" -bzlmod || status=$?

# use_repo lists exactly the external repos the BUILD files reference.
repos="$(grep -rhoE '"@[A-Za-z0-9_]+//' --include=BUILD.bazel --exclude-dir=_output --exclude-dir=hack . |
  sed -E 's/"@([A-Za-z0-9_]+)\/\//\1/' | grep -vE '^(rules_go|gazelle)$' | sort -u)"
block="use_repo(\n    go_deps,\n$(printf '    "%s",\\n' ${repos}))"
awk -v block="${block}" '
  /^# BEGIN use_repo/ { print; printf "%s\n", block; skip=1; next }
  /^# END use_repo/ { skip=0 }
  !skip { print }
' MODULE.bazel >"${tmp}/MODULE.bazel"
if [[ "${mode}" == fix ]]; then
  cp "${tmp}/MODULE.bazel" MODULE.bazel
  tool buildifier -r -mode=fix -lint=fix .
else
  if ! diff -u MODULE.bazel "${tmp}/MODULE.bazel"; then
    echo "MODULE.bazel use_repo is stale: run hack/update-bazel.sh" >&2
    status=1
  fi
  if ! tool buildifier -r -mode=check -lint=warn .; then
    echo "Starlark is not buildifier-clean: run hack/update-bazel.sh" >&2
    status=1
  fi
fi
if [[ "${mode}" == diff && ${status} -ne 0 ]]; then
  echo "Bazel metadata is out of date: run hack/update-bazel.sh" >&2
fi
exit "${status}"
