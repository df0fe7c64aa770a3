#!/usr/bin/env bash
# Builds Gantry's kind node image for this machine's platform, with no
# registry: the Debian root filesystem (hack/node-rootfs.sh), kind's base
# files from the pinned kind module, containerd and the CNI plugins
# (hack/tools/node), kubelet/kubeadm/kubectl from the pinned Kubernetes, and
# the image archives `make images` wrote for this platform, which the node
# imports into containerd before kubelet starts. Then `docker load`s it when a
# Docker daemon answers.
#
#   _output/images/kind-node.linux-<arch>.tar   gantry.local/kind-node:<kube version> and :<gantry tag>
#
# NODE_BASE_IMAGE=<a kind node image by digest, e.g. kindest/node:v1.36.x@sha256:...>
# builds on that image instead (pulled if absent): Gantry's init, the image
# import and the images are added; containerd, kubelet and kubeadm are the
# base's. For machines that can pull; Gantry's own machines cannot, so this
# path is tested only with a stand-in base (release/node tests).
#
# `bazel run //hack:node-image` runs this same script.
set -euo pipefail

root="${BUILD_WORKSPACE_DIRECTORY:-$(cd "$(dirname "$0")/.." && pwd)}"
GANTRY_ROOT="${root}"
source "${root}/hack/lib.sh"
cd "${root}"
os="$(go env GOOS)"; arch="$(go env GOARCH)"
platform="${os}/${arch}"
bin="${root}/_output/bin/${os}_${arch}/node"

declare -A stamp
while read -r key value; do stamp[${key}]="${value}"; done < <(hack/version.sh)

# The component images this node preloads: every image of `make images`.
mapfile -t archives < <(ls _output/images/*."${os}-${arch}".tar 2>/dev/null | grep -v '/kind-node\.' || true)
if [[ ${#archives[@]} -eq 0 ]]; then
  echo "no image archives for ${platform} in _output/images: run \`make images\` (PLATFORMS may be ${platform}) first" >&2
  exit 1
fi
pause_ref="$(sed -n 's|^\(gantry.local/pause:[^ ]*\) .*|\1|p' _output/images/digests.txt)"
[[ -n "${pause_ref}" ]] || { echo "_output/images/digests.txt names no pause image" >&2; exit 1; }

mkdir -p _output/node
args=()
if [[ -n "${NODE_BASE_IMAGE:-}" ]]; then
  # A kind node image made elsewhere (e.g. kindest/node:v1.36.x@sha256:...,
  # on machines that can pull it): Gantry adds its init, the image import
  # and the images, and nothing is built for the node itself.
  # By digest only: a tag can be moved to other content between builds.
  if [[ "${NODE_BASE_IMAGE}" != *@sha256:* ]]; then
    echo "NODE_BASE_IMAGE=${NODE_BASE_IMAGE} names no digest; give it as <image>@sha256:<digest>" >&2
    exit 1
  fi
  printf '==> base %s\n' "${NODE_BASE_IMAGE}"
  docker image inspect "${NODE_BASE_IMAGE}" >/dev/null 2>&1 || docker pull --platform "${platform}" "${NODE_BASE_IMAGE}"
  docker save -o "_output/node/base-${arch}.tar" "${NODE_BASE_IMAGE}"
  args+=(--base-archive "_output/node/base-${arch}.tar")
else
  printf '==> node binaries for %s\n' "${platform}"
  GANTRY_BUILD_SET=node GANTRY_BIN_DIR="${bin}" hack/build.sh

  printf '==> root filesystem\n'
  hack/node-rootfs.sh "${arch}" "_output/node/rootfs-${arch}.tar"
  kind_files="$(cd hack/tools/node && gantry::module_dir sigs.k8s.io/kind)/images/base/files"
  args+=(--rootfs "_output/node/rootfs-${arch}.tar" --kind-files "${kind_files}" --bin-dir "${bin}")
fi

printf '==> node image\n'
CGO_ENABLED=0 go build -trimpath -o _output/bin/gantry-images ./release/cmd/gantry-images
for a in "${archives[@]}"; do args+=(--archive "${a}"); done
_output/bin/gantry-images node \
  --platform "${platform}" "${args[@]}" \
  --kube-version "${stamp[STABLE_KUBE_VERSION]}" --gantry-version "${stamp[STABLE_GIT_VERSION]}" \
  --sandbox-image "${pause_ref}" --revision "${stamp[STABLE_GIT_COMMIT]}" --created "${stamp[STABLE_BUILD_DATE]}"

if docker version >/dev/null 2>&1; then
  printf '==> docker load\n'
  docker load -i "_output/images/kind-node.${os}-${arch}.tar"
fi
