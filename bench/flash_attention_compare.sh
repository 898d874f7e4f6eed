#!/bin/bash
# flash_attention vs the unfused composition (qk ops) vs PyTorch 1.13's unfused
# attention, one after the other with 1 and 2 threads, then peak memory at
# T = 512, 1024, 2048 (B=1, H=8, D=64, f32, forward+backward).
#   bench/flash_attention_compare.sh [build-dir] [min-time-seconds] [repetitions]
# Times are milliseconds per call, the best of the repetitions (PyTorch: of 5
# rounds): wall, and process CPU in brackets (the fairer figure on a shared
# machine; both peers report the same kind). "x unf" and "x torch" are
# flash's speed-ups on wall time (CPU time in brackets).
set -euo pipefail
BUILD=${1:-build/release}
MIN_TIME=${2:-0.2}
REPS=${3:-5}
cd "$(dirname "$0")/.."
echo "$(date -u +%Y-%m-%dT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for t in 1 2; do
  echo "== $t thread(s)"
  qk=$(QK_NUM_THREADS=$t "$BUILD/bench/flash_attention_bench" --benchmark_filter='BM_Forward' \
    --benchmark_min_time="$MIN_TIME" --benchmark_repetitions="$REPS" --benchmark_format=csv \
    2>/dev/null | grep '^"BM_' | grep -v '_mean"\|_median"\|_stddev"\|_cv"')
  torch=$(/usr/bin/python3 bench/flash_attention_peer.py "$t" | tail -n +2)
  python3 - "$qk" "$torch" <<'EOF'
import re, sys
qk, torch = sys.argv[1], sys.argv[2]
rows = {}  # (pass, shape, dtype) -> {impl: (wall, cpu)}
for line in qk.splitlines():
    f = line.split(",")
    name = f[0].strip('"')  # BM_Forward/4/64/12/64/0/0/process_time/real_time
    parts = name.split("/")
    key = (parts[0], "/".join(parts[1:5]), "bf16" if parts[5] == "1" else "f32")
    # BM_ForwardBackwardDropout has no impl argument: flash only.
    impl = "flash" if parts[0].endswith("Dropout") or parts[6] == "0" else "unfused"
    wall, cpu = float(f[2]), float(f[3])
    old = rows.setdefault(key, {}).get(impl, (wall, cpu))
    rows[key][impl] = (min(wall, old[0]), min(cpu, old[1]))
for line in torch.splitlines():
    m = re.match(r"(\w+)/(\S+) torch (\w+): ([\d.]+) ms \(cpu ([\d.]+) ms\)", line)
    if m:
        rows.setdefault((m[1], m[2], m[3]), {})["torch"] = (float(m[4]), float(m[5]))
print(f"{'pass':<27}{'B/T/H/D':<14}{'dtype':<6}{'flash':>16}{'unfused':>18}{'torch':>18}"
      f"{'x unf':>14}{'x torch':>14}")
for key in sorted(rows, key=lambda k: (k[0], k[2], k[1])):
    r = rows[key]
    cell = lambda i: f"{r[i][0]:8.2f} ({r[i][1]:7.2f})" if i in r else f"{'-':>16}"
    ratio = lambda i: (f"{r[i][0] / r['flash'][0]:6.1f} ({r[i][1] / r['flash'][1]:5.1f})"
                       if i in r and "flash" in r else f"{'-':>13}")
    print(f"{key[0]:<27}{key[1]:<14}{key[2]:<6}{cell('flash'):>16}  {cell('unfused'):>16}  "
          f"{cell('torch'):>16}{ratio('unfused'):>14}{ratio('torch'):>14}")
EOF
done
echo "== peak memory above the inputs, one forward+backward (MB)"
QK_NUM_THREADS=2 "$BUILD/bench/flash_attention_bench" --benchmark_filter='BM_PeakMemory' 2>/dev/null |
  awk '/^BM_PeakMemory/ {split($1, a, "/"); for (i = 1; i <= NF; ++i) if ($i ~ /^peak_MB=/) {
    sub("peak_MB=", "", $i); printf "T=%-5s qk %-8s %8.1f MB (tensor high-water mark)\n", a[2], $NF, $i}}'
for T in 512 1024 2048; do
  /usr/bin/python3 bench/flash_attention_peer.py --peak-memory "$T" |
    awk -v T="$T" '{sub("peak_MB=", "", $3); printf "T=%-5s torch unfused %8.1f MB (peak RSS growth)\n", T, $3}'
done
