#!/usr/bin/env bash
# Shared by the hack/ scripts.

# gantry::tool runs a pinned tool of hack/tools/go.mod.
gantry::tool() { go tool -modfile="${GANTRY_ROOT}/hack/tools/go.mod" "$@"; }

# gantry::k8s_version prints the pinned Kubernetes release, e.g. 1.36.3.
gantry::k8s_version() { go list -m -f '{{.Version}}' k8s.io/kubernetes | sed 's/^v//'; }

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

# gantry::copy_checkout copies the checkout, without _output and .git, to dir:
# verify regenerates there and diffs, never touching the checkout.
gantry::copy_checkout() {
  tar -C "${GANTRY_ROOT}" --exclude=./_output --exclude=./.git -cf - . | tar -C "$1" -xf -
}
