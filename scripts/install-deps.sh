#!/usr/bin/env bash
# Installs the Debian packages plait builds and tests with, only those that are missing;
# with arguments, those packages instead (scripts/fuzz.sh: clang).
set -euo pipefail
pkgs=(cmake ninja-build g++ make pkg-config libssl-dev zlib1g-dev libgtest-dev libgmock-dev googletest
      iproute2 procps python3 python3-dev python3-numpy python3-pytest pybind11-dev
      python3-torch libtorch-dev python3-matplotlib dataset-fashion-mnist libucx-dev ucx-utils)
[ $# -gt 0 ] && pkgs=("$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "error: missing Debian packages (${missing[*]}) and not root; install them with apt-get" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
