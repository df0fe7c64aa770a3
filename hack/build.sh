#!/usr/bin/env bash
# Builds every control-plane binary Gantry runs into _output/bin: static
# (CGO_ENABLED=0), -trimpath, from the module-pinned sources, and stamped with
# the upstream version plus a Gantry marker and commit.
#
# Go's build cache makes a rebuild with nothing changed take seconds: the stamp
# depends only on the commit and tree state, never on the wall clock.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "${root}"
out="${root}/_output/bin"
mkdir -p "${out}"

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -trimpath"

k8s_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"   # e.g. v1.36.3
major_minor="${k8s_version#v}"; major="${major_minor%%.*}"; minor="${major_minor#*.}"; minor="${minor%%.*}"

commit="$(git rev-parse --verify -q HEAD 2>/dev/null || echo 0000000000000000000000000000000000000000)"
tree_state=clean
if ! git diff --quiet HEAD -- 2>/dev/null || [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  tree_state=dirty
fi
# Build metadata (the part after "+") keeps the version a valid semver that
# sorts as the upstream release, so clients and kwokctl treat it as v1.36.3.
gantry_marker="gantry.${commit:0:12}"
[[ "${tree_state}" == dirty ]] && gantry_marker+=".dirty"
git_version="${k8s_version}+${gantry_marker}"
build_date="$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null || echo 1970-01-01T00:00:00Z)"

k8s_ldflags=(-s -w)
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=(
    -X "'${pkg}.gitMajor=${major}'" -X "'${pkg}.gitMinor=${minor}'"
    -X "'${pkg}.gitVersion=${git_version}'" -X "'${pkg}.gitCommit=${commit}'"
    -X "'${pkg}.gitTreeState=${tree_state}'" -X "'${pkg}.buildDate=${build_date}'"
  )
done

step() { printf '==> %s\n' "$*"; }

step "kube-apiserver, kube-scheduler (Gantry), kube-controller-manager, kubectl (${git_version})"
go build -ldflags "${k8s_ldflags[*]}" -o "${out}/" \
  ./apiserver-patches/cmd/kube-apiserver \
  ./scheduler/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kubectl

step "etcd ($(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3))"
go build -ldflags "-s -w" -o "${out}/etcd" go.etcd.io/etcd/server/v3

step "gantry-cluster (kind/)"
go build -ldflags "-s -w" -o "${out}/gantry-cluster" ./kind

kwok_version="$(cd hack/tools && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)"
step "kwok, kwokctl (${kwok_version})"
(
  cd hack/tools
  go build -ldflags "-s -w -X 'sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v}' -X 'sigs.k8s.io/kwok/pkg/consts.KubeVersion=${k8s_version#v}'" \
    -o "${out}/" sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
)
step "done: $(cd "${out}" && ls | tr '\n' ' ')"
