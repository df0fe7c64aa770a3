#!/usr/bin/env bash
# Pins k8s.io/kubernetes and replaces every k8s.io staging module it uses with the
# matching v0.X.Y tag, so the whole control plane comes from one Kubernetes release.
#
#   hack/pin-kubernetes.sh 1.36.3
#
# The replace block is derived from upstream's own go.mod (its "./staging/..." replaces),
# so a version bump is this one command followed by `make verify`.
set -euo pipefail

version="${1:?usage: $0 <kubernetes version, e.g. 1.36.3>}"
version="${version#v}"
staging="v0.${version#1.}"

cd "$(dirname "$0")/.."

upstream_mod=$(go list -m -f '{{.GoMod}}' "k8s.io/kubernetes@v${version}")
mapfile -t modules < <(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "${upstream_mod}" | sort -u)
if [[ ${#modules[@]} -eq 0 ]]; then
  echo "error: found no staging replaces in ${upstream_mod}; upstream's go.mod layout changed" >&2
  exit 1
fi

# Drop replaces of k8s.io modules upstream no longer stages; the others are
# updated in place, so re-running with the same version changes nothing.
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
