#!/usr/bin/env bash
# Channels last on the CPU: SimpleCNN and ResNet training steps (SGD, batch
# 64), f32 and bf16 autocast, with and without channels last, qianka
# (bench/simple_cnn_step) against PyTorch (bench/simple_cnn_torch.py: model
# and input .to(memory_format=torch.channels_last)), same threads, the
# configurations interleaved ROUNDS times; prints each one's median img/s.
#   bench/channels_last_vs_torch.sh [build-dir] [threads] [rounds]   (build/release 2 3)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
THREADS=${2:-2}
ROUNDS=${3:-3}
BIN="$BUILD/bench/simple_cnn_step"
[ -x "$BIN" ] || { echo "build $BIN first (cmake --build $BUILD --target simple_cnn_step)"; exit 1; }
# PyTorch at its best here: its OpenMP OpenBLAS.
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PY=/usr/bin/python3
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for round in $(seq "$ROUNDS"); do
  for model in simple_cnn simple_resnet; do
    steps=20; [ "$model" = simple_resnet ] && steps=4
    common=(--model "$model" --batch 64 --steps "$steps" --warmup 1 --threads "$THREADS")
    for amp in off bf16; do
      for cl in 0 1; do
        q=(); t=()
        [ "$amp" = bf16 ] && q+=(--amp bf16) && t+=(--bf16)
        [ "$cl" = 1 ] && t+=(--channels-last)
        "$BIN" "${common[@]}" "${q[@]}" --channels-last "$cl" >>"$OUT"
        $PY bench/simple_cnn_torch.py "${common[@]}" "${t[@]}" >>"$OUT"
      done
    done
  done
  echo "round $round done: $(uptime)" >&2
done
$PY - "$OUT" <<'PYEOF'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        runs.setdefault((r["model"], r["impl"]), []).append(r["images_per_s"])
med = {k: statistics.median(v) for k, v in runs.items()}
print("| model | mode | qianka | qianka channels last | PyTorch | PyTorch channels last | qianka cl / PyTorch cl |")
print("|---|---|---:|---:|---:|---:|---:|")
for model, name in (("simple_cnn", "SimpleCNN"), ("simple_resnet", "ResNet")):
    for mode, q, t in (("f32", "qianka", "pytorch"), ("bf16 autocast", "qianka-bf16", "pytorch-bf16")):
        qa, qc, ta, tc = (med.get((model, k)) for k in (q, q + "-cl", t, t + "-cl"))
        if None in (qa, qc, ta, tc):
            continue
        print(f"| {name} | {mode} | {qa:.1f} | {qc:.1f} | {ta:.1f} | {tc:.1f} | {qc / tc:.2f}x |")
PYEOF
