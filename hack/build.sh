#!/usr/bin/env bash
# Builds every control-plane binary Gantry runs into _output/bin: static
# (CGO_ENABLED=0), -trimpath, from the module-pinned sources, and stamped with
# the upstream version plus a Gantry marker and commit (hack/version.sh).
#
# Go's build cache makes a rebuild with nothing changed take seconds.
#
#   GANTRY_BIN_DIR    where the binaries go (default _output/bin)
#   GANTRY_BUILD_TAGS build tags added to every Gantry binary's (comma-separated;
#                     e.g. gantry_plant_quota for hack/soak-plants.sh; releases set
#                     none)
#   GANTRY_BUILD_SET  "all" (default): everything the local cluster and the
#                     tests run; "images": what Gantry's images hold
#                     (hack/images.sh sets it, with GOARCH, per platform);
#                     "node": what the kind node runs besides them (kubelet,
#                     kubeadm, kubectl, containerd, CNI plugins; hack/node-image.sh);
#                     "kueue": Kueue's manager (`kueue`), built from the module
#                     hack/tools/kueue pins (not part of "all": it is a client
#                     Gantry is tested against, not a part of Gantry; "images"
#                     builds it too, for its test image)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
GANTRY_ROOT="${root}"
source "${root}/hack/lib.sh"
cd "${root}"
out="${GANTRY_BIN_DIR:-${root}/_output/bin}"
build_set="${GANTRY_BUILD_SET:-all}"
case "${build_set}" in all | images | node | kueue) ;; *) echo "GANTRY_BUILD_SET=${build_set}: want all, images, node or kueue" >&2; exit 2 ;; esac
mkdir -p "${out}"

export CGO_ENABLED=0
# -buildvcs=false: the version stamp (hack/version.sh), read once, is the only record of
# the commit and tree state; go's own VCS stamp is taken per build and would
# differ between binaries if the tree changed during a long build.
export GOFLAGS="${GOFLAGS:-} -trimpath -buildvcs=false"
extra_tags="${GANTRY_BUILD_TAGS:-}"
[[ "${extra_tags}" =~ ^[a-z0-9_,]*$ ]] || { echo "GANTRY_BUILD_TAGS=${extra_tags}: want comma-separated tags" >&2; exit 2; }
if [[ -n "${extra_tags}" ]]; then
  # kube-apiserver's build names its own tags (gantry_patched), which would
  # replace GOFLAGS' -tags: it adds these itself.
  export GOFLAGS="${GOFLAGS} -tags=${extra_tags}"
fi

declare -A stamp
while read -r key value; do stamp[${key}]="${value}"; done < <(hack/version.sh)
k8s_version="${stamp[STABLE_KUBE_VERSION]}"
git_version="${stamp[STABLE_GIT_VERSION]}"

k8s_ldflags=(-s -w)
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=(
    -X "'${pkg}.gitMajor=${stamp[STABLE_GIT_MAJOR]}'" -X "'${pkg}.gitMinor=${stamp[STABLE_GIT_MINOR]}'"
    -X "'${pkg}.gitVersion=${git_version}'" -X "'${pkg}.gitCommit=${stamp[STABLE_GIT_COMMIT]}'"
    -X "'${pkg}.gitTreeState=${stamp[STABLE_GIT_TREE_STATE]}'" -X "'${pkg}.buildDate=${stamp[STABLE_BUILD_DATE]}'"
  )
done

step() { printf '==> %s\n' "$*"; }

# build_kueue builds Kueue's manager as `kueue`: for `make kueue`, and for
# its test image (the same flags, so that one build's cache serves both).
build_kueue() {
  local kueue_version
  kueue_version="$(cd hack/tools/kueue && go list -m -f '{{.Version}}' sigs.k8s.io/kueue)"
  step "kueue (${kueue_version})"
  (
    cd hack/tools/kueue
    go build -ldflags "-s -w -X 'sigs.k8s.io/kueue/pkg/version.GitVersion=${kueue_version}' -X 'sigs.k8s.io/kueue/pkg/version.BuildDate=${stamp[STABLE_BUILD_DATE]}'" \
      -o "${out}/kueue" sigs.k8s.io/kueue/cmd/kueue
  )
}

if [[ "${build_set}" == kueue ]]; then
  build_kueue
  step "done: $(cd "${out}" && ls | tr '\n' ' ')"
  exit 0
fi

if [[ "${build_set}" == node ]]; then
  step "kubelet, kubeadm, kubectl (${git_version})"
  go build -ldflags "${k8s_ldflags[*]}" -o "${out}/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubectl
  containerd_version="$(cd hack/tools/node && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)"
  cni_version="$(cd hack/tools/node && go list -m -f '{{.Version}}' github.com/containernetworking/plugins)"
  step "containerd, ctr, containerd-shim-runc-v2 (${containerd_version}), CNI plugins (${cni_version})"
  (
    cd hack/tools/node
    stamp="-s -w -X 'github.com/containerd/containerd/v2/version.Version=${containerd_version}'"
    go build -tags 'no_btrfs no_zfs no_devmapper urfave_cli_no_docs' -ldflags "${stamp}" -o "${out}/" \
      github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr
    go build -tags 'urfave_cli_no_docs no_grpc' -ldflags "${stamp}" -o "${out}/" \
      github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
    go build -ldflags "-s -w -X 'github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=${cni_version}'" -o "${out}/" \
      github.com/containernetworking/plugins/plugins/ipam/host-local github.com/containernetworking/plugins/plugins/main/loopback \
      github.com/containernetworking/plugins/plugins/main/ptp github.com/containernetworking/plugins/plugins/main/bridge \
      github.com/containernetworking/plugins/plugins/meta/portmap
  )
  crictl_version="$(cd hack/tools/crictl && go list -m -f '{{.Version}}' sigs.k8s.io/cri-tools)"
  step "crictl (${crictl_version})"
  (
    cd hack/tools/crictl
    go build -ldflags "-s -w -X 'sigs.k8s.io/cri-tools/pkg/version.Version=${crictl_version}'" -o "${out}/" \
      sigs.k8s.io/cri-tools/cmd/crictl
  )
  step "done: $(cd "${out}" && ls | tr '\n' ' ')"
  exit 0
fi

step "kube-apiserver (Gantry, patched k8s.io/kubernetes: $(cd apiserver-patches/patches && ls *.patch | tr '\n' ' '))"
hack/patch-kubernetes.sh
apiserver_ldflags="${k8s_ldflags[*]}"
# The version string says the apiserver is patched: v1.36.3+gantry.<commit>.patched
apiserver_ldflags="${apiserver_ldflags//${git_version}/${git_version}.patched}"
go build -modfile="${root}/_output/patched/go.mod" -tags "gantry_patched${extra_tags:+,${extra_tags}}" -ldflags "${apiserver_ldflags}" \
  -o "${out}/kube-apiserver" ./apiserver-patches/cmd/kube-apiserver

if [[ "${build_set}" == images ]]; then
  step "kube-scheduler (Gantry), kube-controller-manager, kube-proxy (${git_version})"
  go build -ldflags "${k8s_ldflags[*]}" -o "${out}/" \
    ./scheduler/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-proxy
  # The stock control plane (`gantry-cluster up --control-plane stock`):
  # upstream's kube-apiserver and kube-scheduler from the same pinned module,
  # unpatched, stamped with the plain release (no commit: it is upstream's
  # source as tagged, not Gantry's).
  step "kube-apiserver, kube-scheduler: upstream's, unpatched (${k8s_version})"
  upstream_ldflags="${k8s_ldflags[*]}"
  upstream_ldflags="${upstream_ldflags//${git_version}/${k8s_version}}"
  upstream_ldflags="${upstream_ldflags//${stamp[STABLE_GIT_COMMIT]}/}"
  for cmd in kube-apiserver kube-scheduler; do
    go build -ldflags "${upstream_ldflags}" -o "${out}/${cmd}-upstream" "k8s.io/kubernetes/cmd/${cmd}"
  done
else
  step "kube-scheduler (Gantry), kube-controller-manager, kubectl (${git_version})"
  go build -ldflags "${k8s_ldflags[*]}" -o "${out}/" \
    ./scheduler/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl
fi

step "etcd ($(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3))"
go build -ldflags "-s -w" -o "${out}/etcd" go.etcd.io/etcd/server/v3

if [[ "${build_set}" == all ]]; then
  step "gantry-cluster (kind/)"
  go build -ldflags "-s -w" -o "${out}/gantry-cluster" ./kind
fi
step "gantry-webhook (admission/), gantry-provisioner (autoscaler/)"
go build -ldflags "${k8s_ldflags[*]}" -o "${out}/" ./admission/cmd/gantry-webhook ./autoscaler/cmd/gantry-provisioner

kwok_version="$(cd hack/tools && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)"
kwok_cmds=(sigs.k8s.io/kwok/cmd/kwok)
[[ "${build_set}" == all ]] && kwok_cmds+=(sigs.k8s.io/kwok/cmd/kwokctl)
step "${kwok_cmds[*]##*/} (${kwok_version})"
(
  cd hack/tools
  go build -ldflags "-s -w -X 'sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v}' -X 'sigs.k8s.io/kwok/pkg/consts.KubeVersion=${k8s_version#v}'" \
    -o "${out}/" "${kwok_cmds[@]}"
)
if [[ "${build_set}" == all ]]; then
  # The stages the local cluster's kwok plays (the kwok image holds the same,
  # hack/images.sh).
  gantry::kwok_stages "${out}/kwok-stages.yaml"
fi

if [[ "${build_set}" == images ]]; then
  coredns_version="$(cd hack/tools/images && go list -m -f '{{.Version}}' github.com/coredns/coredns)"
  step "coredns (${coredns_version}, Kubernetes' plugins), pause (Gantry)"
  (cd hack/tools/images && go build -ldflags "-s -w" -o "${out}/coredns" ./coredns)
  go build -ldflags "-s -w -X 'main.version=${git_version}'" -o "${out}/pause" ./release/cmd/pause
  build_kueue
fi
step "done: $(cd "${out}" && ls | tr '\n' ' ')"
