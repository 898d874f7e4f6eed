#!/usr/bin/env bash
# Installs the Debian 12 packages that qianka's build, tests and benchmarks need.
# Idempotent: does nothing when every package is already installed.
# Works as root or through sudo.
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build pkg-config git
  # base layer
  libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev libxxhash-dev
  # tensor kernels
  libopenblas-dev liblapacke-dev libdnnl-dev
  # collectives, topology, HPC
  libopenmpi-dev openmpi-bin libhwloc-dev iproute2
  # data, downloads, plots
  libcurl4-openssl-dev libarchive-dev libcairo2-dev
  # tests and benchmarks (PyTorch is the reference and the peer)
  libgtest-dev libgmock-dev libbenchmark-dev python3-torch python3-numpy
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
