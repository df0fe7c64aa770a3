#!/usr/bin/env bash
# Unpacks Debian packages and everything they depend on into a directory, for
# an image that needs a little userland (kube-proxy's nft and iptables):
#
#   hack/debian-rootfs.sh <arch> <dir> <package>...
#
# The packages come from the machine's Debian mirror (apt-get download, for a
# foreign architecture after `dpkg --add-architecture`), at the versions the
# mirror has: the image records them in /var/lib/dpkg/status.d/, one control
# file per package, where image scanners look. Documentation and glibc's
# iconv modules are dropped; each package's copyright file is kept.
# Maintainer scripts are not run, so Debian's alternatives are set here:
# iptables is iptables-nft.
set -euo pipefail

arch="$1"; dir="$2"; shift 2
[[ $# -gt 0 ]] || { echo "usage: $0 <arch> <dir> <package>..." >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${root}/_output/debs/${arch}"

native="$(dpkg --print-architecture)"
if [[ "${arch}" != "${native}" ]] && ! dpkg --print-foreign-architectures | grep -qx "${arch}"; then
  echo "==> adding Debian architecture ${arch} (apt-get update)"
  dpkg --add-architecture "${arch}"
  apt-get update -qq
elif ! apt-cache show "$1:${arch}" >/dev/null 2>&1; then
  apt-get update -qq
fi

# The closure: every package the requested ones depend on (not recommends).
mapfile -t pkgs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances "${@/%/:${arch}}" |
  sed -nE "s/^([a-z0-9][a-z0-9.+-]*)(:${arch})?$/\1/p" | sort -u)
[[ ${#pkgs[@]} -gt 0 ]] || { echo "no packages resolved for $* on ${arch}" >&2; exit 1; }

mkdir -p "${cache}"
(cd "${cache}" && apt-get download -qq -o APT::Sandbox::User=root "${pkgs[@]/%/:${arch}}")

rm -rf "${dir}"
mkdir -p "${dir}/var/lib/dpkg/status.d"
for pkg in "${pkgs[@]}"; do
  version="$(apt-cache show --no-all-versions "${pkg}:${arch}" | sed -n 's/^Version: //p' | head -1)"
  deb=""
  for candidate in "${cache}/${pkg}_${version//:/%3a}_${arch}.deb" "${cache}/${pkg}_${version//:/%3a}_all.deb"; do
    [[ -f "${candidate}" ]] && deb="${candidate}"
  done
  [[ -n "${deb}" ]] || { echo "no .deb downloaded for ${pkg}:${arch} ${version}" >&2; exit 1; }
  dpkg-deb -x "${deb}" "${dir}"
  dpkg-deb -f "${deb}" >"${dir}/var/lib/dpkg/status.d/${pkg}"
done

# Documentation out, licenses in.
find "${dir}/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete 2>/dev/null || true
rm -rf "${dir}/usr/share/man" "${dir}/usr/share/info" "${dir}/usr/share/lintian" "${dir}/usr/share/locale"
# glibc's iconv modules: none of these programs converts character sets.
rm -rf "${dir}"/usr/lib/*-linux-gnu/gconv
find "${dir}" -depth -type d -empty -delete

# What update-alternatives would have done.
for tool in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
  [[ -e "${dir}/usr/sbin/${tool}-nft" ]] && ln -sfn "${tool}-nft" "${dir}/usr/sbin/${tool}"
done
echo "==> ${dir}: ${#pkgs[@]} packages (${pkgs[*]})"
