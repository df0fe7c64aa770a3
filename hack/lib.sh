#!/usr/bin/env bash
# Shared by the hack/ scripts.

# gantry::tool runs a pinned tool of hack/tools/go.mod.
gantry::tool() { go tool -modfile="${GANTRY_ROOT}/hack/tools/go.mod" "$@"; }

# gantry::k8s_version prints the pinned Kubernetes release, e.g. 1.36.3.
gantry::k8s_version() { go list -m -f '{{.Version}}' k8s.io/kubernetes | sed 's/^v//'; }

# gantry::generate_crds writes the CRD YAML and deepcopy code of the API types
# under crds/ into the given output directory (a temp dir when verifying).
gantry::generate_crds() {
  local out="$1"
  if ! compgen -G "${GANTRY_ROOT}/crds/*/*/*.go" >/dev/null; then
    return 0 # no API types yet
  fi
  (cd "${GANTRY_ROOT}" && gantry::tool controller-gen \
    object:headerFile="${GANTRY_ROOT}/hack/boilerplate.go.txt" \
    crd:crdVersions=v1 paths=./crds/... output:crd:dir="${out}")
}
