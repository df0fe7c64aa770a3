#!/usr/bin/env bash
# Installs the Debian packages Gantry's build needs beyond Go and Docker:
# debootstrap, gpg and Debian's archive keyring, for the node image's root
# filesystem (hack/node-rootfs.sh checks the packages' signatures).
# Run as root (CI machines are); a no-op when everything is present.
set -euo pipefail

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v gpg >/dev/null || need+=(gpg)
command -v gpgv >/dev/null || need+=(gpgv)
[[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] || need+=(debian-archive-keyring)
if ((${#need[@]} == 0)); then
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "missing packages: ${need[*]}; install them (apt-get install ${need[*]}) or run this script as root" >&2
  exit 1
fi
echo "==> apt-get install ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
