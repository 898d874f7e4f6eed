#!/usr/bin/env bash
# SimpleCNN (and ResNet) training step: qianka against PyTorch, same machine,
# same threads, same batch, in one run. Usage:
#   bench/simple_cnn_vs_torch.sh [build-dir] [steps]      (default build/release, 30)
# MODELS="simple_cnn simple_resnet" selects the models.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
STEPS=${2:-30}
BIN="$BUILD/bench/simple_cnn_step"
[ -x "$BIN" ] || { echo "build $BIN first (cmake --build $BUILD --target simple_cnn_step)"; exit 1; }
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PY=/usr/bin/python3
printf '%-13s %-7s %-6s %12s %12s %12s %8s\n' model threads impl images/s ms/step peakRSS_MB ratio
for model in ${MODELS:-simple_cnn}; do
  steps=$STEPS; [ "$model" = simple_resnet ] && steps=$(( STEPS / 3 > 3 ? STEPS / 3 : 3 ))
  for th in 1 2; do
    ours=$("$BIN" --model "$model" --threads "$th" --batch 64 --steps "$steps" --warmup 3)
    torch=$($PY bench/simple_cnn_torch.py --model "$model" --threads "$th" --batch 64 --steps "$steps" --warmup 3)
    torchbf=$($PY bench/simple_cnn_torch.py --model "$model" --threads "$th" --batch 64 --steps "$steps" --warmup 3 --bf16)
    q=$(echo "$ours" | $PY -c 'import json,sys; print(json.load(sys.stdin)["images_per_s"])')
    for line in "$ours" "$torch" "$torchbf"; do
      echo "$line" | $PY -c "
import json,sys
d=json.load(sys.stdin); q=float('$q')
print('%-13s %-7d %-13s %5.1f %12.2f %12.1f %8s' % (d['model'], d['threads'], d['impl'], d['images_per_s'], d['ms_per_step'], d['peak_rss_mb'],
      '' if d['impl']=='qianka' else '%.2fx' % (q/d['images_per_s'])))"
    done
  done
done
echo "ratio = qianka images/s / peer images/s (higher is better for qianka)"
