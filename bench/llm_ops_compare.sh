#!/bin/bash
# Runs bench/llm_ops_bench (qianka) and bench/llm_ops_peer.py (PyTorch 1.13
# with the OpenMP OpenBLAS) one after the other at 1 and 2 threads, so both
# see the same machine state, and prints them side by side with ratios. Both
# run with OMP_WAIT_POLICY=PASSIVE (what `qk` sets for itself): on a shared
# machine, OpenMP threads spinning in the peer would only measure the load.
#   bench/llm_ops_compare.sh [build-dir] [benchmark-filter]
set -euo pipefail
BUILD=${1:-build/release}
FILTER=${2:-.}
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for t in 1 2; do
  echo "== $t thread(s), load $(cut -d' ' -f1 /proc/loadavg)"
  QK_NUM_THREADS=$t "$BUILD/bench/llm_ops_bench" --benchmark_filter="$FILTER" \
    --benchmark_min_time=0.5 --benchmark_out="$out" --benchmark_out_format=json 2>/dev/null |
    grep '^GEMM peak'
  OMP_WAIT_POLICY=PASSIVE LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp \
    /usr/bin/python3 bench/llm_ops_peer.py "$t" --qk-json "$out" --filter "$FILTER"
done
