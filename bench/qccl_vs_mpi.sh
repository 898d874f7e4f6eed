#!/usr/bin/env bash
# qccl all_reduce against Open MPI's MPI_Allreduce and single-thread memcpy,
# in one run on this machine (issue 4's benchmark). Prints a Markdown table.
#
#   bench/qccl_vs_mpi.sh [BUILD_DIR] [MAX_BYTES] [ITERS] [SMALL_ITERS] [MID_ITERS]
#   bench/qccl_vs_mpi.sh build/release 268435456 20 2000 200
#
# Sizes go from 8 B by factors of 2. Sizes up to 64 KiB run SMALL_ITERS
# iterations, 128 KiB-4 MiB MID_ITERS, larger ones ITERS: a call of a few us
# or a few hundred us timed 20 times measures the scheduler (4 ranks on 2
# cores at 512 KiB: 0.83x Open MPI with 20 iterations, 1.2-1.5x with 50). qccl runs twice: on malloc'd buffers (like the MPI program) and on
# qcclMemAlloc buffers (-R 1, nccl-tests' buffer registration). Both sides
# check their results before timing (qk perf -c 1; the MPI program checks one
# call per size).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
MAX=${2:-268435456}
ITERS=${3:-20}
SMALL_ITERS=${4:-2000}
MID_ITERS=${5:-200}
SMALL_MAX=65536
MID_MAX=4194304
WARMUP=10
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
"$QK" perf memcpy -b 32768 -e "$MAX" -f 2 -n "$ITERS" -w "$WARMUP" > "$OUT/memcpy.txt"
for NP in 2 4; do
  for R in 0 1; do
    : > "$OUT/qccl_${NP}_$R.txt"
    "$QK" perf all_reduce --np "$NP" -b 8 -e "$SMALL_MAX" -f 2 -n "$SMALL_ITERS" -w 20 -c 1 -R "$R" \
      -d float -o sum >> "$OUT/qccl_${NP}_$R.txt"
    "$QK" perf all_reduce --np "$NP" -b $((SMALL_MAX * 2)) -e "$MID_MAX" -f 2 -n "$MID_ITERS" -w "$WARMUP" \
      -c 1 -R "$R" -d float -o sum >> "$OUT/qccl_${NP}_$R.txt"
    "$QK" perf all_reduce --np "$NP" -b $((MID_MAX * 2)) -e "$MAX" -f 2 -n "$ITERS" -w "$WARMUP" -c 1 \
      -R "$R" -d float -o sum >> "$OUT/qccl_${NP}_$R.txt"
    [ "$(grep -c 'Out of bounds values : 0 OK' "$OUT/qccl_${NP}_$R.txt")" = 3 ] ||
      { cat "$OUT/qccl_${NP}_$R.txt"; echo "qccl check failed" >&2; exit 2; }
  done
  "${MPIRUN[@]}" -np "$NP" "$OUT/mpi_allreduce" 8 "$SMALL_MAX" 2 "$SMALL_ITERS" 20 > "$OUT/mpi_$NP.txt"
  "${MPIRUN[@]}" -np "$NP" "$OUT/mpi_allreduce" $((SMALL_MAX * 2)) "$MID_MAX" 2 "$MID_ITERS" "$WARMUP" >> "$OUT/mpi_$NP.txt"
  "${MPIRUN[@]}" -np "$NP" "$OUT/mpi_allreduce" $((MID_MAX * 2)) "$MAX" 2 "$ITERS" "$WARMUP" >> "$OUT/mpi_$NP.txt"
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
print('| ranks | size | MPI time (us) | qccl time (us) | qccl/MPI busbw | qccl -R 1 time (us) | -R 1/MPI busbw | memcpy (GB/s) | qccl busbw / memcpy | -R 1 busbw / memcpy |')
print('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
def human(n):
    for unit, k in (('GiB', 1 << 30), ('MiB', 1 << 20), ('KiB', 1 << 10)):
        if n >= k:
            return f'{n // k} {unit}'
    return f'{n} B'
for np_ in (2, 4):
    q = rows(f'qccl_{np_}_0.txt', (5, 7))   # out-of-place time, busbw
    qr = rows(f'qccl_{np_}_1.txt', (5, 7))
    m = rows(f'mpi_{np_}.txt', (1, 2))
    for size in sorted(q):
        if size not in m or size not in qr:
            continue
        qt, qb = q[size]
        rt, rb = qr[size]
        mt, mb = m[size]
        ratio = lambda a: f'{mt / a:.2f}x' if a > 0 else '-'   # busbw ratio = time ratio
        mc = memcpy.get(size, (0,))[0]
        frac = lambda b: f'{100 * b / mc:.0f}%' if mc > 0 else ''
        print(f'| {np_} | {human(size)} | {mt:.2f} | {qt:.2f} | {ratio(qt)} | {rt:.2f} | {ratio(rt)} | '
              f'{mc:.2f} | {frac(qb)} | {frac(rb)} |' if mc > 0 else
              f'| {np_} | {human(size)} | {mt:.2f} | {qt:.2f} | {ratio(qt)} | {rt:.2f} | {ratio(rt)} |  |  |  |')
PY
