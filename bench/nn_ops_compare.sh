#!/bin/bash
# Runs bench/nn_ops_bench (qianka) and bench/nn_ops_peer.py (PyTorch) one after
# the other, with 1 and 2 threads, so both see the same machine state.
#   bench/nn_ops_compare.sh [build-dir]
set -euo pipefail
BUILD=${1:-build/release}
cd "$(dirname "$0")/.."
for t in 1 2; do
  echo "== $t thread(s), load $(cut -d' ' -f1 /proc/loadavg)"
  QK_NUM_THREADS=$t "$BUILD/bench/nn_ops_bench" --benchmark_min_time=0.2 2>/dev/null |
    awk '/^BM_/ {printf "%-32s qk    %10s us (cpu %s)\n", $1, $2, $4}'
  /usr/bin/python3 bench/nn_ops_peer.py "$t" | tail -n +2
done
