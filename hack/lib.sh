#!/usr/bin/env bash
# Shared by the hack/ scripts.

# gantry::tool runs a pinned tool of hack/tools/go.mod.
gantry::tool() { go tool -modfile="${GANTRY_ROOT}/hack/tools/go.mod" "$@"; }

# gantry::k8s_version prints the pinned Kubernetes release, e.g. 1.36.3.
gantry::k8s_version() { go list -m -f '{{.Version}}' k8s.io/kubernetes | sed 's/^v//'; }

# gantry::module_dir prints the directory of a module of the go.mod in the
# working directory, downloading it first: `go list -m -f {{.Dir}}` prints
# nothing for a module not yet in the cache, as on a fresh machine.
gantry::module_dir() { go mod download -json "$1" | sed -nE 's/^\s*"Dir": "(.*)",?$/\1/p'; }

# gantry::generate_crds regenerates, in the checkout at GANTRY_ROOT, the
# deepcopy code next to the API types under crds/ and the CRD YAML in
# crds/manifests (stale files removed).
gantry::generate_crds() {
  local out="${GANTRY_ROOT}/crds/manifests"
  rm -rf "${out}"
  if ! compgen -G "${GANTRY_ROOT}/crds/*/*/*.go" >/dev/null; then
    return 0 # no API types yet
  fi
  (cd "${GANTRY_ROOT}" && gantry::tool controller-gen \
    object:headerFile="${GANTRY_ROOT}/hack/boilerplate.go.txt" \
    crd:crdVersions=v1 paths=./crds/... output:crd:dir="${out}")
}

# GANTRY_CLIENT_APIS are the API packages under crds/, as <group>/<version>
# directories, that get a typed clientset, listers and shared informers in
# crds/client. The API group is the +groupName of the package's doc.go; one
# line per group version (give groups whose directories share a name a
# +groupGoName in doc.go so their generated packages do not collide).
GANTRY_CLIENT_APIS=(
  scheduling/v1alpha1
  provisioning/v1
  autoscaling/v1alpha1
)

# gantry::generate_clients regenerates, in the checkout at GANTRY_ROOT, the
# typed clientset (crds/client/clientset/versioned, with its fake), listers
# (crds/client/listers) and shared informers
# (crds/client/informers/externalversions) of GANTRY_CLIENT_APIS. Everything
# under crds/client but BUILD.bazel files is generated; stale files are
# removed, and so are the BUILD.bazel files of packages no longer generated.
gantry::generate_clients() {
  local module=github.com/gantry-dev/gantry
  local out="${GANTRY_ROOT}/crds/client" pkg="${module}/crds/client"
  local header="${GANTRY_ROOT}/hack/boilerplate.go.txt"
  if [[ -d "${out}" ]]; then
    find "${out}" -type f ! -name BUILD.bazel -delete
  fi
  if ((${#GANTRY_CLIENT_APIS[@]})); then
    local gv inputs=() pkgs=()
    for gv in "${GANTRY_CLIENT_APIS[@]}"; do
      inputs+=(--input "${gv}")
      pkgs+=("${module}/crds/${gv}")
    done
    (cd "${GANTRY_ROOT}" &&
      gantry::tool client-gen --go-header-file="${header}" \
        --input-base="${module}/crds" "${inputs[@]}" --clientset-name=versioned \
        --output-dir="${out}/clientset" --output-pkg="${pkg}/clientset" &&
      gantry::tool lister-gen --go-header-file="${header}" \
        --output-dir="${out}/listers" --output-pkg="${pkg}/listers" "${pkgs[@]}" &&
      gantry::tool informer-gen --go-header-file="${header}" \
        --versioned-clientset-package="${pkg}/clientset/versioned" --listers-package="${pkg}/listers" \
        --output-dir="${out}/informers" --output-pkg="${pkg}/informers" "${pkgs[@]}") || return 1
  fi
  [[ -d "${out}" ]] || return 0
  local dir
  while read -r dir; do
    compgen -G "${dir}/*.go" >/dev/null || rm -f "${dir}/BUILD.bazel"
  done < <(find "${out}" -type d)
  find "${out}" -depth -type d -empty -delete
}

# GANTRY_SCHEDULER_CONFIG_APIS are the packages of Gantry's kube-scheduler
# plugin args: the internal types and each versioned form.
GANTRY_SCHEDULER_CONFIG_APIS=(
  scheduler/apis/config
  scheduler/apis/config/v1
)

# gantry::generate_scheduler_config regenerates, in the checkout at
# GANTRY_ROOT, the deepcopy, defaulting and conversion code of
# GANTRY_SCHEDULER_CONFIG_APIS (zz_generated.*.go next to the types), as
# upstream generates kube-scheduler's.
gantry::generate_scheduler_config() {
  local module=github.com/gantry-dev/gantry header="${GANTRY_ROOT}/hack/boilerplate.go.txt"
  local dir pkgs=()
  for dir in "${GANTRY_SCHEDULER_CONFIG_APIS[@]}"; do
    rm -f "${GANTRY_ROOT}/${dir}"/zz_generated.*.go
    pkgs+=("${module}/${dir}")
  done
  (cd "${GANTRY_ROOT}" &&
    gantry::tool deepcopy-gen --go-header-file="${header}" --output-file=zz_generated.deepcopy.go "${pkgs[@]}" &&
    gantry::tool defaulter-gen --go-header-file="${header}" --output-file=zz_generated.defaults.go "${pkgs[@]}" &&
    gantry::tool conversion-gen --go-header-file="${header}" --output-file=zz_generated.conversion.go \
      --extra-peer-dirs=k8s.io/apimachinery/pkg/apis/meta/v1,k8s.io/apimachinery/pkg/conversion,k8s.io/apimachinery/pkg/runtime \
      "${pkgs[@]}")
}

# gantry::copy_checkout copies the checkout, without _output and .git, to dir:
# verify regenerates there and diffs, never touching the checkout.
gantry::copy_checkout() {
  tar -C "${GANTRY_ROOT}" --exclude=./_output --exclude=./.git -cf - . | tar -C "$1" -xf -
}
