#!/usr/bin/env bash
# The upgrade in place (e2e/upgrade): builds the release of revision FROM in
# a worktree of its own (_output/upgrade/<commit>: its binaries and node
# image), this checkout's images, then runs the suite, which has FROM's
# gantry-cluster make a kind cluster, seeds it, and upgrades it with this
# checkout's `gantry-cluster upgrade` step by step. Run by `make
# upgrade-test`; on demand only (it builds FROM's node image).
#
#   FROM           revision of the release upgraded from (required)
#   CONTROL_PLANE  gantry (default) or stock: whose kube-apiserver and
#                  kube-scheduler the cluster runs, in both releases
#   ARTIFACTS      where the report and failure artifacts go
#                  (default _output/e2e-artifacts-upgrade[-stock])
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "${root}"
[[ -n "${FROM:-}" ]] || { echo "FROM= names no revision to upgrade from, e.g. FROM=v0.5.0 or a commit" >&2; exit 2; }
plane="${CONTROL_PLANE:-gantry}"
commit="$(git rev-parse --verify "${FROM}^{commit}")"
from="${root}/_output/upgrade/${commit:0:12}"
platform="linux/$(go env GOARCH)"
suffix=""
[[ "${plane}" == stock ]] && suffix=-stock
artifacts="${ARTIFACTS:-${root}/_output/e2e-artifacts-upgrade${suffix}}"

if [[ ! -d "${from}" ]]; then
  echo "==> a worktree of ${commit} at ${from}"
  git worktree add --detach "${from}" "${commit}"
fi
if [[ "$(git -C "${from}" rev-parse HEAD)" != "${commit}" ]]; then
  echo "${from} is not at ${commit}: remove it (git worktree remove --force ${from})" >&2
  exit 1
fi
echo "==> building the release of ${commit:0:12}: binaries and node image (${platform})"
make -C "${from}" build node-image PLATFORMS="${platform}"
echo "==> building this checkout's images (${platform}), which the upgrade loads into the nodes"
make images PLATFORMS="${platform}"

rm -rf "${artifacts}" && mkdir -p "${artifacts}"
go tool ginkgo -v --tags upgrade --timeout=60m --output-dir="${artifacts}" ./e2e/upgrade -- \
  --artifacts="${artifacts}" --runtime=kind --control-plane="${plane}" --upgrade-from="${from}"
