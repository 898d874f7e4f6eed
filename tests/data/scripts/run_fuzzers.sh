#!/usr/bin/env bash
# Builds the data fuzz targets with clang + libFuzzer + ASan/UBSan in
# build/fuzz and runs each for a bounded time.
#   bash tests/data/scripts/run_fuzzers.sh [SECONDS_EACH]
set -euo pipefail
cd "$(dirname "$0")/../../.."
SECONDS_EACH=${1:-30}
SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DQK_FUZZ=ON -DQK_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$SAN" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build/fuzz --target idx_fuzz tokenizer_json_fuzz
for t in idx_fuzz tokenizer_json_fuzz; do
  mkdir -p "build/fuzz/corpus/$t"
  "build/fuzz/tests/data/$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -max_len=65536 \
    "build/fuzz/corpus/$t"
done
