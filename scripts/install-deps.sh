#!/usr/bin/env bash
# Installs what plait builds and tests with, only what is missing: Debian packages (apt), then
# the PyPI packages of scripts/requirements.txt into .venv/ (torch 2.15 and the rest of the
# Python side; .venv/bin/python is the project's Python). With arguments, those Debian
# packages instead and nothing else (scripts/fuzz.sh: clang).
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(cmake ninja-build g++ make pkg-config libssl-dev zlib1g-dev libgtest-dev libgmock-dev googletest
      iproute2 procps python3 python3-dev python3-venv dataset-fashion-mnist bible-kjv libucx-dev ucx-utils
      nlohmann-json3-dev)
[ $# -gt 0 ] && pkgs=("$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: missing Debian packages (${missing[*]}) and not root; install them with apt-get" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
[ $# -gt 0 ] && exit 0

# The virtual environment is made with Debian's Python 3.11 (whose headers python3-dev
# installs, for the extension modules) and kept in step with the requirements: a stamp holds
# the hash of the file it was installed from.
venv=.venv
stamp=$venv/.requirements.sha256
want=$(sha256sum scripts/requirements.txt | cut -d' ' -f1)
if [ -x $venv/bin/python ] && [ -f $stamp ] && [ "$(cat $stamp)" = "$want" ]; then
  exit 0
fi
echo "installing the PyPI packages of scripts/requirements.txt into $venv/ (torch 2.15: ~6 GB)"
[ -x $venv/bin/python ] || /usr/bin/python3 -m venv $venv
$venv/bin/python -m pip install -q --disable-pip-version-check --no-input \
  -r scripts/requirements.txt
echo "$want" > $stamp
