#!/usr/bin/env bash
# qccl's qcclAllToAllv (`qk perf alltoallv`) against Open MPI's MPI_Alltoallv
# (bench/qccl_mpi_alltoallv.c), same blocks and sizes, in one run on this
# machine (issue 18). Prints a Markdown table.
#
#   bench/qccl_alltoallv_vs_mpi.sh [BUILD_DIR] [MAX_BYTES] [ITERS] [SMALL_ITERS] [MID_ITERS] [NPS]
#   bench/qccl_alltoallv_vs_mpi.sh build/release 67108864 10 1000 100 "2 4"
#
# Blocks: each rank sends `size` bytes of float in all, rank r giving rank j
# the share (2k+1)/n^2, k = (j - r) mod n (`qk perf --help`). Sizes go from
# 256 B by factors of 4; up to 64 KiB they run SMALL_ITERS iterations,
# 256 KiB-4 MiB MID_ITERS, larger ones ITERS. For each tier qccl and MPI run
# back to back, so both see the same load. Both check their results before
# timing (qk perf -c 1; the MPI program checks one call per size).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
MAX=${2:-67108864}
ITERS=${3:-10}
SMALL_ITERS=${4:-1000}
MID_ITERS=${5:-100}
NPS=${6:-2 4}
MIN=256
SMALL_MAX=65536
MID_MAX=4194304
QK=$BUILD/src/cli/qk
[ -x "$QK" ] || { echo "error: $QK not found; build the qk target first" >&2; exit 1; }
command -v mpicc >/dev/null || { echo "error: mpicc not found; install libopenmpi-dev openmpi-bin" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
mpicc -O2 bench/qccl_mpi_alltoallv.c -o "$OUT/mpi_alltoallv"
MPIRUN=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "# $("${MPIRUN[@]}" --version | head -1)"
# tier: lo hi iters warmup
tiers=("$MIN $SMALL_MAX $SMALL_ITERS 20" "$((SMALL_MAX * 4)) $MID_MAX $MID_ITERS 5" "$((MID_MAX * 4)) $MAX $ITERS 2")
for NP in $NPS; do
  : > "$OUT/qccl_$NP.txt"
  : > "$OUT/mpi_$NP.txt"
  for t in "${tiers[@]}"; do
    read -r LO HI N W <<< "$t"
    [ "$LO" -le "$MAX" ] || continue
    [ "$HI" -le "$MAX" ] || HI=$MAX
    "$QK" perf alltoallv --np "$NP" -b "$LO" -e "$HI" -f 4 -n "$N" -w "$W" -c 1 -d float >> "$OUT/qccl_$NP.txt"
    "${MPIRUN[@]}" -np "$NP" "$OUT/mpi_alltoallv" "$LO" "$HI" 4 "$N" "$W" >> "$OUT/mpi_$NP.txt"
  done
  grep -q 'Out of bounds values : [1-9]' "$OUT/qccl_$NP.txt" && { cat "$OUT/qccl_$NP.txt"; echo "qccl check failed" >&2; exit 2; }
  grep -q 'wrong values: [1-9]' "$OUT/mpi_$NP.txt" && { cat "$OUT/mpi_$NP.txt"; echo "MPI check failed" >&2; exit 2; }
done
echo "# end: $(date -u '+%H:%M UTC'), load average: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT" $NPS <<'PY'
import math, os, sys
d, nps = sys.argv[1], [int(x) for x in sys.argv[2:]]
def rows(path, cols):
    out = {}
    for line in open(os.path.join(d, path)):
        if line.startswith('#') or not line.strip():
            continue
        f = line.split()
        out[int(f[0])] = tuple(float(f[c]) for c in cols)
    return out
def human(n):
    for unit, k in (('MiB', 1 << 20), ('KiB', 1 << 10)):
        if n >= k:
            return f'{n // k} {unit}'
    return f'{n} B'
print('| ranks | size per rank | MPI_Alltoallv (us) | qcclAllToAllv (us) | MPI busbw (GB/s) | qccl busbw (GB/s) | qccl/MPI busbw |')
print('|---:|---:|---:|---:|---:|---:|---:|')
for np_ in nps:
    q = rows(f'qccl_{np_}.txt', (5, 7))  # out-of-place time, busbw
    m = rows(f'mpi_{np_}.txt', (1, 2))
    logs = []
    for size in sorted(q):
        if size not in m:
            continue
        (qt, qb), (mt, mb) = q[size], m[size]
        logs.append(math.log(mt / qt))
        print(f'| {np_} | {human(size)} | {mt:.2f} | {qt:.2f} | {mb:.2f} | {qb:.2f} | {mt / qt:.2f}x |')
    if logs:
        print(f'| {np_} | geometric mean |  |  |  |  | {math.exp(sum(logs) / len(logs)):.2f}x |')
PY
