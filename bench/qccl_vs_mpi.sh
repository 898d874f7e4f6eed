#!/usr/bin/env bash
# qccl all_reduce against Open MPI's MPI_Allreduce and single-thread memcpy,
# in one run on this machine (issue 4's benchmark). Prints a Markdown table.
#
#   bench/qccl_vs_mpi.sh [BUILD_DIR] [MAX_BYTES] [ITERS]
#   bench/qccl_vs_mpi.sh build/release 268435456 20
#
# Both sides check their results before timing (qk perf -c 1; the MPI program
# checks one call per size). Sizes go from 8 B by factors of 4.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
MAX=${2:-268435456}
ITERS=${3:-20}
WARMUP=3
QK=$BUILD/src/cli/qk
[ -x "$QK" ] || { echo "error: $QK not found; build the qk target first" >&2; exit 1; }
command -v mpicc >/dev/null || { echo "error: mpicc not found; install libopenmpi-dev openmpi-bin" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
mpicc -O2 bench/qccl_mpi_allreduce.c -o "$OUT/mpi_allreduce"
MPIRUN=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
"$QK" perf memcpy -b 32768 -e "$MAX" -f 4 -n "$ITERS" -w "$WARMUP" > "$OUT/memcpy.txt"
for NP in 2 4; do
  "$QK" perf all_reduce --np "$NP" -b 8 -e "$MAX" -f 4 -n "$ITERS" -w "$WARMUP" -c 1 -d float -o sum \
    > "$OUT/qccl_$NP.txt"
  "${MPIRUN[@]}" -np "$NP" "$OUT/mpi_allreduce" 8 "$MAX" 4 "$ITERS" "$WARMUP" > "$OUT/mpi_$NP.txt"
  grep -q "Out of bounds values : 0 OK" "$OUT/qccl_$NP.txt" || { cat "$OUT/qccl_$NP.txt"; echo "qccl check failed" >&2; exit 2; }
done

python3 - "$OUT" <<'PY'
import sys, os
d = sys.argv[1]
def rows(path, cols):
    out = {}
    for line in open(os.path.join(d, path)):
        if line.startswith('#') or not line.strip():
            continue
        f = line.split()
        out[int(f[0])] = tuple(float(f[c]) for c in cols)
    return out
memcpy = rows('memcpy.txt', (2,))
print('| ranks | size | qccl time (us) | qccl busbw (GB/s) | MPI time (us) | MPI busbw (GB/s) | qccl/MPI busbw | memcpy (GB/s) |')
print('|---:|---:|---:|---:|---:|---:|---:|---:|')
for np_ in (2, 4):
    q = rows(f'qccl_{np_}.txt', (5, 7))   # out-of-place time, busbw
    m = rows(f'mpi_{np_}.txt', (1, 2))
    for size in sorted(q):
        if size not in m:
            continue
        qt, qb = q[size]
        mt, mb = m[size]
        ratio = f'{qb / mb:.2f}x' if mb > 0 else '-'
        mc = f'{memcpy[size][0]:.2f}' if size in memcpy else ''
        print(f'| {np_} | {size} | {qt:.1f} | {qb:.2f} | {mt:.1f} | {mb:.2f} | {ratio} | {mc} |')
PY
