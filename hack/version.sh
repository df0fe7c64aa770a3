#!/usr/bin/env bash
# Prints the version stamp of Gantry's Kubernetes binaries as Bazel
# workspace-status lines ("KEY value"); hack/build.sh reads the same lines.
#
# The stamp is the upstream release plus build metadata naming Gantry and the
# commit, e.g. v1.36.3+gantry.0123456789ab (".dirty" for uncommitted changes):
# still a valid semver that sorts as the upstream release, so clients and
# kwokctl treat it as v1.36.3. It depends on the commit and tree state only,
# never on the clock, so a rebuild with nothing changed relinks nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

k8s_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
major_minor="${k8s_version#v}"
major="${major_minor%%.*}"
minor="${major_minor#*.}"; minor="${minor%%.*}"

commit="$(git rev-parse --verify -q HEAD 2>/dev/null || echo 0000000000000000000000000000000000000000)"
tree_state=clean
if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  tree_state=dirty
fi
marker="gantry.${commit:0:12}"
[[ "${tree_state}" == dirty ]] && marker+=".dirty"
build_date="$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null || echo 1970-01-01T00:00:00Z)"

echo "STABLE_KUBE_VERSION ${k8s_version}"
echo "STABLE_GIT_MAJOR ${major}"
echo "STABLE_GIT_MINOR ${minor}"
echo "STABLE_GIT_VERSION ${k8s_version}+${marker}"
echo "STABLE_GIT_COMMIT ${commit}"
echo "STABLE_GIT_TREE_STATE ${tree_state}"
echo "STABLE_BUILD_DATE ${build_date}"
