#!/usr/bin/env bash
# Builds Gantry's OCI images: the static binaries of every image for each
# platform (hack/build.sh with GANTRY_BUILD_SET=images and GOARCH), then
# gantry-images assembles them, with no Docker daemon, into
#
#   _output/images/oci/                    one OCI image layout, multi-arch indexes
#   _output/images/<name>.linux-<arch>.tar docker-load archives for the host's platform
#   _output/images/digests.txt             reference, index digest, size per platform
#
#   PLATFORMS  platforms of the indexes (default linux/amd64,linux/arm64)
#
# References are gantry.local/<name>:<tag>, a name no registry answers to;
# `make push REGISTRY=...` copies the layout to a real one.
#
# The versions come from go.mod files and kubeadm's constants, never from
# this script: kubeadm asks for etcd, CoreDNS and pause by tag, so a pin that
# disagrees with the Kubernetes release fails here, not in a cluster.
# `bazel run //release:images` runs this same script.
set -euo pipefail
# Images are what a release ships: never with extra build tags (a planted
# bug of internal/plant, say).
if [[ -n "${GANTRY_BUILD_TAGS:-}" || "${GOFLAGS:-}" == *-tags* ]]; then
  echo "hack/images.sh builds release images: unset GANTRY_BUILD_TAGS and GOFLAGS' -tags (${GANTRY_BUILD_TAGS:-}${GOFLAGS:-})" >&2
  exit 2
fi

root="${BUILD_WORKSPACE_DIRECTORY:-$(cd "$(dirname "$0")/.." && pwd)}"
GANTRY_ROOT="${root}"
source "${root}/hack/lib.sh"
cd "${root}"
platforms="${PLATFORMS:-linux/amd64,linux/arm64}"
host_platform="$(go env GOOS)/$(go env GOARCH)"
tarball_platform="${host_platform}"
[[ ",${platforms}," == *",${host_platform},"* ]] || tarball_platform="${platforms%%,*}"

declare -A stamp
while read -r key value; do stamp[${key}]="${value}"; done < <(hack/version.sh)

kubeadm_constants="$(gantry::module_dir k8s.io/kubernetes)/cmd/kubeadm/app/constants/constants.go"
kubeadm_constant() { gantry::kubeadm_constant "$1" "${kubeadm_constants}"; }
etcd_version="$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
etcd_version="${etcd_version#v}"
coredns_version="$(cd hack/tools/images && go list -m -f '{{.Version}}' github.com/coredns/coredns)"
kwok_version="$(cd hack/tools && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)"
kueue_version="$(cd hack/tools/kueue && go list -m -f '{{.Version}}' sigs.k8s.io/kueue)"
pause_version="$(kubeadm_constant PauseVersion)"
if [[ "$(kubeadm_constant DefaultEtcdVersion)" != "${etcd_version}-0" ]]; then
  echo "etcd ${etcd_version} (go.mod) is not kubeadm's $(kubeadm_constant DefaultEtcdVersion)" >&2
  exit 1
fi
if [[ "$(kubeadm_constant CoreDNSVersion)" != "${coredns_version}" ]]; then
  echo "CoreDNS ${coredns_version} (hack/tools/images/go.mod) is not kubeadm's $(kubeadm_constant CoreDNSVersion)" >&2
  exit 1
fi

# write_kwok_stages <rootfs dir> writes <dir>/etc/kwok/stages.yaml: the kwok
# image runs them (--config=/etc/kwok/stages.yaml), as kwok has none built in.
write_kwok_stages() {
  local dir="$1"
  rm -rf "${dir}"
  install -d -m 0755 "${dir}" "${dir}/etc" "${dir}/etc/kwok"
  gantry::kwok_stages "${dir}/etc/kwok/stages.yaml"
  chmod 0644 "${dir}/etc/kwok/stages.yaml"
}

for platform in ${platforms//,/ }; do
  printf '==> binaries for %s\n' "${platform}"
  GOOS="${platform%/*}" GOARCH="${platform#*/}" GANTRY_BUILD_SET=images \
    GANTRY_BIN_DIR="${root}/_output/bin/${platform/\//_}" hack/build.sh
  printf '==> kube-proxy userland for %s (Debian packages)\n' "${platform}"
  hack/debian-rootfs.sh "${platform#*/}" "${root}/_output/bin/${platform/\//_}/rootfs/kube-proxy" nftables iptables
  printf '==> kwok stages for %s (sigs.k8s.io/kwok@%s)\n' "${platform}" "${kwok_version}"
  write_kwok_stages "${root}/_output/bin/${platform/\//_}/rootfs/kwok"
done

printf '==> images (%s)\n' "${platforms}"
CGO_ENABLED=0 go build -trimpath -o _output/bin/gantry-images ./release/cmd/gantry-images
_output/bin/gantry-images build \
  --bin-dir _output/bin --out _output/images \
  --platforms "${platforms}" --tarball-platforms "${tarball_platform}" \
  --revision "${stamp[STABLE_GIT_COMMIT]}" --created "${stamp[STABLE_BUILD_DATE]}" \
  --kube-version "${stamp[STABLE_KUBE_VERSION]}" --gantry-version "${stamp[STABLE_GIT_VERSION]}" \
  --etcd-version "${etcd_version}" --coredns-version "${coredns_version}" \
  --kwok-version "${kwok_version}" --pause-version "${pause_version}" --kueue-version "${kueue_version}"
