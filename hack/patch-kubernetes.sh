#!/usr/bin/env bash
# Materializes the pinned k8s.io/kubernetes module with Gantry's patches
# applied, and writes an alternate modfile that builds against it:
#
#   _output/patched/kubernetes/   the patched module tree
#   _output/patched/go.mod        go.mod + replace k8s.io/kubernetes => that tree
#
# The module comes from the Go module cache, checksum-verified against
# go.sum. Every patch in apiserver-patches/patches must apply cleanly; a
# Kubernetes bump that breaks one fails here, naming the patch. The tree is
# rebuilt only when the version, the patches or this script change.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "${root}"
out="${root}/_output/patched"
tree="${out}/kubernetes"
patches=(apiserver-patches/patches/*.patch)

version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
want_sum="$(awk -v v="${version}" '$1 == "k8s.io/kubernetes" && $2 == v { print $3 }' go.sum)"
if [[ -z "${want_sum}" ]]; then
  echo "error: go.sum has no checksum for k8s.io/kubernetes ${version}" >&2
  exit 1
fi
stamp="$( (echo "${version} ${want_sum}"; cat "${patches[@]}" "$0") | sha256sum | cut -d' ' -f1)"
write_modfile() {
  cp go.mod "${out}/go.mod"
  cp go.sum "${out}/go.sum"
  # Relative to the module root, so that the path recorded in the binary's
  # build information is the same in every checkout (reproducible images).
  go mod edit -modfile="${out}/go.mod" -replace "k8s.io/kubernetes=./${tree#"${root}"/}"
}
if [[ -f "${tree}/.gantry-stamp" && "$(cat "${tree}/.gantry-stamp")" == "${stamp}" ]]; then
  write_modfile # go.mod may have changed; the tree has not
  exit 0
fi

# go mod download verifies the module against go.sum; compare the sum it
# reports as well, so a tampered cache entry cannot slip through.
read -r dir sum < <(go mod download -json "k8s.io/kubernetes@${version}" |
  sed -n -e 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' -e 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p' | paste -sd' ')
if [[ "${sum}" != "${want_sum}" ]]; then
  echo "error: k8s.io/kubernetes ${version} in the module cache has checksum ${sum}, go.sum says ${want_sum}" >&2
  exit 1
fi

if ! command -v patch >/dev/null; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "installing patch (Debian package)"
    apt-get update -qq && apt-get install -y -qq patch >/dev/null
  else
    echo "error: the patch program is needed to apply apiserver-patches: install it (e.g. apt-get install patch)" >&2
    exit 1
  fi
fi

rm -rf "${tree}"
mkdir -p "${out}"
cp -R "${dir}" "${tree}"
chmod -R u+w "${tree}"
for p in "${patches[@]}"; do
  if ! out_text="$(cd "${tree}" && patch -p1 --forward --batch --no-backup-if-mismatch <"${root}/${p}" 2>&1)"; then
    echo "error: patch ${p} does not apply to k8s.io/kubernetes ${version}:" >&2
    echo "${out_text}" | sed 's/^/    /' >&2
    echo "update the patch for the new version (its hunks must stay tiny), then run make build" >&2
    rm -rf "${tree}"
    exit 1
  fi
done

write_modfile
echo "${stamp}" >"${tree}/.gantry-stamp"
echo "patched k8s.io/kubernetes ${version} with ${#patches[@]} patch(es) into ${tree#"${root}"/}"
