#!/usr/bin/env bash
# Makes the root filesystem of Gantry's kind node image from Debian's
# packages (debootstrap, bookworm), shaped the way kind's entrypoint expects
# a node: systemd as init with the units kind does not want removed, journald
# not reading the kernel log, /etc/kubernetes/manifests present.
#
#   hack/node-rootfs.sh <arch> <out.tar>
#
# The tarball is kept until the package list or this script changes
# (debootstrap takes minutes); DEBIAN_MIRROR overrides the mirror.
set -euo pipefail

arch="$1"; out="$2"
root="$(cd "$(dirname "$0")/.." && pwd)"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite=bookworm
# The keys that sign bookworm's Release files, by fingerprint: Debian's
# automatic archive signing key and stable release key for Debian 12.
# debootstrap checks the Release file's signature against these alone, and
# the packages against the Release file's hashes; any mismatch fails the
# build. They are read from debian-archive-keyring (hack/install-deps.sh).
keys=(B8B80B5B623EAB6AD8775C45B7C5D7D6350947F8 4D64FEC119C2029067D6E791F8D2585B8783D481)
# kind's base image packages, less fuse-overlayfs, nfs-common and open-iscsi
# (no storage drivers here); runc from Debian (containerd is built from source).
packages=(systemd systemd-sysv dbus conntrack iptables nftables iproute2 ethtool util-linux mount kmod
  libseccomp2 pigz bash ca-certificates curl jq procps e2fsprogs runc)

key="$(printf '%s\n' "${suite}" "${arch}" "${mirror}" "${packages[@]}" | cat - "$0" | sha256sum | cut -c1-16)"
if [[ -f "${out}" && "$(cat "${out}.key" 2>/dev/null)" == "${key}" ]]; then
  echo "==> ${out} is current"
  exit 0
fi
"${root}/hack/install-deps.sh" # debootstrap

work="$(mktemp -d "${root}/_output/node-rootfs.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
dir="${work}/rootfs"
keyring="${work}/keyring.gpg"
mkdir -m 700 "${work}/gnupg"
gpg --homedir "${work}/gnupg" --batch --quiet --no-default-keyring --keyring /usr/share/keyrings/debian-archive-keyring.gpg \
  --export "${keys[@]}" >"${keyring}"
have="$(gpg --homedir "${work}/gnupg" --batch --quiet --show-keys --with-colons "${keyring}" | awk -F: '$1 == "fpr" {print $10}')"
for k in "${keys[@]}"; do
  grep -qx "${k}" <<<"${have}" || { echo "key ${k} is not in /usr/share/keyrings/debian-archive-keyring.gpg" >&2; exit 1; }
done
echo "==> debootstrap ${suite} ${arch} from ${mirror}, signatures checked against ${#keys[@]} pinned keys"
IFS=,; include="${packages[*]}"; unset IFS
debootstrap --arch="${arch}" --variant=minbase --keyring="${keyring}" --force-check-gpg --include="${include}" \
  "${suite}" "${dir}" "${mirror}" >"${work}/debootstrap.log" 2>&1 || {
  tail -30 "${work}/debootstrap.log" >&2
  exit 1
}

# What kind's base image does to systemd: no units but the ones it enables.
rm -f "${dir}"/lib/systemd/system/multi-user.target.wants/* "${dir}"/etc/systemd/system/*.wants/* \
  "${dir}"/lib/systemd/system/local-fs.target.wants/* "${dir}"/lib/systemd/system/sockets.target.wants/*udev* \
  "${dir}"/lib/systemd/system/sockets.target.wants/*initctl* "${dir}"/lib/systemd/system/basic.target.wants/* \
  "${dir}"/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service
echo "ReadKMsg=no" >>"${dir}/etc/systemd/journald.conf"
ln -sfn /dev/null "${dir}/etc/systemd/system/systemd-binfmt.service"
mkdir -p "${dir}/etc/kubernetes/manifests"
# Leave no trace of the build machine: apt lists, caches, logs, machine id.
rm -rf "${dir}"/var/lib/apt/lists/* "${dir}"/var/cache/apt/*.bin "${dir}"/var/cache/apt/archives/*.deb \
  "${dir}"/var/log/* "${dir}"/tmp/* "${dir}"/usr/share/doc/*/changelog* "${dir}"/usr/share/man/*
: >"${dir}/etc/machine-id"
echo "${suite} ${arch} $(chroot "${dir}" dpkg-query -W -f '${Package}=${Version} ' 2>/dev/null | wc -w) packages" >"${work}/summary"

tar -C "${dir}" --numeric-owner --sort=name --mtime=@0 -cf "${out}.tmp" .
mv "${out}.tmp" "${out}"
echo "${key}" >"${out}.key"
echo "==> ${out}: $(cat "${work}/summary"), $(du -h "${out}" | cut -f1)"
