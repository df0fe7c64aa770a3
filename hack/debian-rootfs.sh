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

# apt's binary cache, which this machine's apt configuration turns off: with
# it each apt-cache call takes milliseconds instead of seconds.
mkdir -p "${cache}"
apt_opts=(-o Dir::Cache::pkgcache="${cache}/../pkgcache.bin" -o Dir::Cache::srcpkgcache="${cache}/../srcpkgcache.bin")
apt_cache() { apt-cache "${apt_opts[@]}" "$@"; }

native="$(dpkg --print-architecture)"
if [[ "${arch}" != "${native}" ]] && ! dpkg --print-foreign-architectures | grep -x "${arch}" >/dev/null; then
  echo "==> adding Debian architecture ${arch} (apt-get update)"
  dpkg --add-architecture "${arch}"
  apt-get update -qq
elif ! apt_cache show "$1:${arch}" >/dev/null 2>&1; then
  apt-get update -qq
fi

# The closure: every package the requested ones depend on (not recommends),
# as apt names it: pkg:<arch>, or plain pkg for the native architecture and
# for Architecture: all packages (netbase). <virtual> names are left out.
mapfile -t specs < <(apt_cache depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances "${@/%/:${arch}}" | grep -E '^[a-z0-9]' | sort -u)
[[ ${#specs[@]} -gt 0 ]] || { echo "no packages resolved for $* on ${arch}" >&2; exit 1; }

# One query for the versions and architectures of all of them.
declare -A version pkg_arch
while IFS=' ' read -r pkg ver parch; do
  version[${pkg}]="${ver}"; pkg_arch[${pkg}]="${parch}"
done < <(apt_cache show --no-all-versions "${specs[@]}" |
  awk '/^Package: /{p=$2} /^Version: /{v=$2} /^Architecture: /{a=$2} /^$/{if (p) print p, v, a; p=""} END{if (p) print p, v, a}')

(cd "${cache}" && apt-get download -qq "${apt_opts[@]}" -o APT::Sandbox::User=root "${specs[@]}")

rm -rf "${dir}"
mkdir -p "${dir}/var/lib/dpkg/status.d"
pkgs=()
for spec in "${specs[@]}"; do
  pkg="${spec%:*}"
  pkgs+=("${pkg}")
  case "${pkg_arch[${pkg}]:-}" in "${arch}" | all) ;; *)
    echo "${spec}: apt offers architecture '${pkg_arch[${pkg}]:-none}', not ${arch}" >&2; exit 1 ;;
  esac
  deb="${cache}/${pkg}_${version[${pkg}]//:/%3a}_${pkg_arch[${pkg}]}.deb"
  [[ -f "${deb}" ]] || { echo "no ${deb} downloaded for ${spec}" >&2; exit 1; }
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
