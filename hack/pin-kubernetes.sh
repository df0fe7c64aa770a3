#!/usr/bin/env bash
# Pins one Kubernetes release for all of Gantry:
#
#   hack/pin-kubernetes.sh 1.37.2
#
# - k8s.io/kubernetes, and every k8s.io staging module it uses replaced with
#   the matching v0.X.Y tag. The replace block is derived from upstream's own
#   go.mod (its "./staging/..." replaces), so upstream's layout decides it.
# - etcd (go.mod) and CoreDNS (hack/tools/images/go.mod) at the versions
#   kubeadm of that release asks for (DefaultEtcdVersion, CoreDNSVersion in
#   cmd/kubeadm/app/constants): hack/images.sh refuses any other.
# - the release-image tags of the kustomize overlays (config/overlays/*).
#
# Re-running it with the pinned version changes nothing, which is what
# `make verify` checks. After a bump: hack/patch-kubernetes.sh (each patch of
# apiserver-patches must still apply), the code's changes for the release's
# API, then `make update verify` (which tidies the modules), and the checks
# of docs/upgrade.md.
set -euo pipefail

version="${1:?usage: $0 <kubernetes version, e.g. 1.37.2>}"
version="${version#v}"
staging="v0.${version#1.}"

GANTRY_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "${GANTRY_ROOT}/hack/lib.sh"
cd "${GANTRY_ROOT}"

upstream_mod=$(go list -m -f '{{.GoMod}}' "k8s.io/kubernetes@v${version}")
mapfile -t modules < <(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "${upstream_mod}" | sort -u)
if [[ ${#modules[@]} -eq 0 ]]; then
  echo "error: found no staging replaces in ${upstream_mod}; upstream's go.mod layout changed" >&2
  exit 1
fi

# Drop replaces of k8s.io modules upstream no longer stages; the others are
# updated in place.
for old in $(go mod edit -json | sed -n 's#.*"Path": "\(k8s\.io/[^"]*\)".*#\1#p' | sort -u); do
  if [[ " ${modules[*]} " != *" ${old} "* ]] && go mod edit -json | grep -q "\"Path\": \"${old}\"," ; then
    go mod edit -dropreplace "${old}" 2>/dev/null || true
  fi
done

args=(-require "k8s.io/kubernetes@v${version}")
for m in "${modules[@]}"; do
  args+=(-replace "${m}=${m}@${staging}")
done
go mod edit "${args[@]}"
echo "pinned k8s.io/kubernetes v${version}; ${#modules[@]} staging modules replaced to ${staging}"

# The constants kubeadm of the new release asks its images by.
constants="$(gantry::module_dir "k8s.io/kubernetes@v${version}")/cmd/kubeadm/app/constants/constants.go"
etcd="$(gantry::kubeadm_constant DefaultEtcdVersion "${constants}")"
coredns="$(gantry::kubeadm_constant CoreDNSVersion "${constants}")"
if [[ -z "${etcd}" || -z "${coredns}" ]]; then
  echo "error: ${constants} names no DefaultEtcdVersion or CoreDNSVersion; kubeadm's constants moved" >&2
  exit 1
fi
etcd="v${etcd%-*}" # 3.7.0-0: the image's revision is not the module's

# move <module dir> <module> <version>: requires that version in that module
# when it requires another. It does not tidy: the code may need the changes of
# the bump first (`make update` tidies every module).
move() {
  local have log
  have="$(cd "$1" && go list -m -f '{{.Version}}' "$2")"
  if [[ "${have}" != "$3" ]]; then
    log="$(cd "$1" && go get "$2@$3" 2>&1)" || { echo "${log}" >&2; return 1; }
    echo "moved $2 from ${have} to $3 (kubeadm's, in ${1}/go.mod)"
  fi
}
move . go.etcd.io/etcd/server/v3 "${etcd}"
# hack/verify.sh runs this script on a copy of go.mod and go.sum alone.
if [[ -f hack/tools/images/go.mod ]]; then
  move hack/tools/images github.com/coredns/coredns "${coredns}"
fi
# The overlays name Gantry's release images by the Kubernetes release.
for k in config/overlays/*/kustomization.yaml; do
  [[ -f "${k}" ]] || continue
  sed -i -E "s/(newName: gantry\.local\/[a-z-]+, newTag: )v[0-9]+\.[0-9]+\.[0-9]+\}/\1v${version}}/" "${k}"
done
