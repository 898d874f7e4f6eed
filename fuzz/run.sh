#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/CMakeLists.txt, clang + ASan + UBSan) and
# runs each for a bounded time from its committed seed corpus fuzz/corpus/<target>/.
# Exits 1 when a target crashes (the input is saved in BUILD/artifacts/), 77
# when clang++ (or $QK_FUZZ_CXX) is missing (ctest reports a skip; under CI=true
# a failure: tests/common/reference_tool.sh).
#   bash fuzz/run.sh [--seconds S_EACH] [--build-dir DIR] [--targets "a b"]
set -euo pipefail
SRC="$(cd "$(dirname "$0")" && pwd)"
SECONDS_EACH=8
BUILD="$SRC/../build/fuzz"
TARGETS="idx_fuzz tokenizer_json_fuzz gpt2_files_fuzz"
CLANGXX=${QK_FUZZ_CXX:-clang++}  # another clang, e.g. clang++-16
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_EACH=$2; shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --targets) TARGETS=$2; shift 2 ;;
    *) echo "fuzz/run.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if ! command -v "$CLANGXX" >/dev/null; then
  # shellcheck source=../tests/common/reference_tool.sh
  . "$SRC/../tests/common/reference_tool.sh"
  missing_reference_tool "fuzz/run.sh: $CLANGXX not found; install clang and libclang-rt-14-dev (scripts/setup.sh does) to run the libFuzzer targets"
fi
mkdir -p "$BUILD"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER="$CLANGXX" > "$BUILD/configure.log" 2>&1 ||
    { echo "fuzz/run.sh: configuring $BUILD failed:"; cat "$BUILD/configure.log"; exit 1; }
fi
# shellcheck disable=SC2086  # TARGETS is a list
if ! cmake --build "$BUILD" --target $TARGETS -- -j"${QK_FUZZ_JOBS:-2}" > "$BUILD/build.log" 2>&1; then
  echo "fuzz/run.sh: building the fuzz targets failed:"; tail -30 "$BUILD/build.log"; exit 1
fi
mkdir -p "$BUILD/artifacts"
failed=0
for t in $TARGETS; do
  # New inputs go to a scratch corpus; the committed seeds stay as they are.
  # Exit codes 1, not libFuzzer's default 77, which ctest would take for a skip.
  work="$BUILD/corpus/$t"
  mkdir -p "$work"
  log="$BUILD/$t.log"
  if "$BUILD/$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -max_len=16384 -timeout=10 \
      -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$BUILD/artifacts/$t-" -print_final_stats=1 "$work" "$SRC/corpus/$t" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "fuzz $t: ${SECONDS_EACH}s, $runs inputs, $cov, no crash"
  else
    failed=1
    echo "fuzz $t: FAILED (log $log, crashing input in $BUILD/artifacts/)"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -20
  fi
done
exit $failed
