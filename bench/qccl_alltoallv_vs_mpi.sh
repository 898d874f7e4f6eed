#!/usr/bin/env bash
# qccl's qcclAllToAllv (`qk perf alltoallv`) against Open MPI's MPI_Alltoallv
# (bench/qccl_mpi_alltoallv.c), same blocks and sizes, in one run on this
# machine. Prints a Markdown table.
#
#   bench/qccl_alltoallv_vs_mpi.sh [BUILD_DIR] [MAX_BYTES] [ITERS] [SMALL_ITERS] [MID_ITERS] [NPS] [ROUNDS]
#   bench/qccl_alltoallv_vs_mpi.sh build/release 67108864 10 1000 100 "2 4" 5
#
# Blocks: each rank sends `size` bytes of float in all, rank r giving rank j
# the share (2k+1)/n^2, k = (j - r) mod n (`qk perf --help`). Sizes go from
# 256 B by factors of 4; up to 64 KiB they run SMALL_ITERS iterations,
# 256 KiB-4 MiB MID_ITERS, larger ones ITERS. For each tier qccl and MPI run
# back to back, so both see the same load, and the whole sweep repeats ROUNDS
# times; the table shows each side's median time per size (a shared 2-core
# machine's load moves single runs by 2x and more). Both check their results
# before timing (qk perf -c 1; the MPI program checks one call per size).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
MAX=${2:-67108864}
ITERS=${3:-10}
SMALL_ITERS=${4:-1000}
MID_ITERS=${5:-100}
NPS=${6:-2 4}
ROUNDS=${7:-5}
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
for R in $(seq "$ROUNDS"); do
  for NP in $NPS; do
    Q=$OUT/qccl_${NP}_$R.txt M=$OUT/mpi_${NP}_$R.txt
    : > "$Q"
    : > "$M"
    for t in "${tiers[@]}"; do
      read -r LO HI N W <<< "$t"
      [ "$LO" -le "$MAX" ] || continue
      [ "$HI" -le "$MAX" ] || HI=$MAX
      "$QK" perf alltoallv --np "$NP" -b "$LO" -e "$HI" -f 4 -n "$N" -w "$W" -c 1 -d float >> "$Q"
      "${MPIRUN[@]}" -np "$NP" "$OUT/mpi_alltoallv" "$LO" "$HI" 4 "$N" "$W" >> "$M"
    done
    if grep -q 'Out of bounds values : [1-9]' "$Q"; then cat "$Q"; echo "qccl check failed" >&2; exit 2; fi
    if grep -q 'wrong values: [1-9]' "$M"; then cat "$M"; echo "MPI check failed" >&2; exit 2; fi
  done
done
echo "# end: $(date -u '+%H:%M UTC'), load average: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT" "$ROUNDS" $NPS <<'PY'
import math, os, statistics, sys
d, rounds, nps = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3:]]
def times(prefix, col):
    # size -> median over the rounds of the time in column `col`
    per = {}
    for r in range(1, rounds + 1):
        for line in open(os.path.join(d, f'{prefix}_{r}.txt')):
            if line.startswith('#') or not line.strip():
                continue
            f = line.split()
            per.setdefault(int(f[0]), []).append(float(f[col]))
    return {k: statistics.median(v) for k, v in per.items()}
def human(n):
    for unit, k in (('MiB', 1 << 20), ('KiB', 1 << 10)):
        if n >= k:
            return f'{n // k} {unit}'
    return f'{n} B'
print(f'Median of {rounds} rounds.')
print()
print('| ranks | size per rank | MPI_Alltoallv (us) | qcclAllToAllv (us) | MPI busbw (GB/s) | qccl busbw (GB/s) | qccl/MPI busbw |')
print('|---:|---:|---:|---:|---:|---:|---:|')
for np_ in nps:
    q = times(f'qccl_{np_}', 5)  # out-of-place time
    m = times(f'mpi_{np_}', 1)
    logs = []
    for size in sorted(q):
        if size not in m:
            continue
        qt, mt = q[size], m[size]
        bus = lambda t: size / t / 1e3 * (np_ - 1) / np_
        logs.append(math.log(mt / qt))
        print(f'| {np_} | {human(size)} | {mt:.2f} | {qt:.2f} | {bus(mt):.2f} | {bus(qt):.2f} | {mt / qt:.2f}x |')
    if logs:
        print(f'| {np_} | geometric mean |  |  |  |  | {math.exp(sum(logs) / len(logs)):.2f}x |')
PY
