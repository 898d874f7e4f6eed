#!/usr/bin/env bash
# DDP scaling and the PyTorch DDP (gloo) peer, in one run:
#   1 rank x 1 thread against 2 ranks x 1 thread (`qk run`), images/s of the
#   second epoch (the first carries start-up), and PyTorch DDP with gloo at
#   the same ranks, threads, model and per-rank batch.
# Usage: bench/ddp_scaling.sh [build-dir] [models] [train-images]
#   bench/ddp_scaling.sh build/release "simple_cnn simple_resnet" 4000
set -euo pipefail
BUILD=${1:-build/release}
MODELS=${2:-simple_cnn}
N=${3:-4000}
QK=$(realpath "$BUILD/src/cli/qk")
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$QK" data synth-cifar --out "$TMP/data" --num-train "$N" --num-test 200 > /dev/null
echo "# $(date -u +%FT%TZ) load: $(uptime | sed 's/.*load average: //')"
train() {  # model, compress, launcher prefix -> epoch-2 img/s
  $3 "$QK" train cifar10 --model "$1" --data-dir "$TMP/data" --epochs 2 --batch-size 64 --threads 1 \
    --num-workers 1 --no-progress --grad-compress "$2" --out "$TMP/run_$RANDOM" 2>&1 |
    grep "Epoch 2/2" | sed -E 's/.* ([0-9]+) img\/s.*/\1/'
}
torch_ips() {
  (cd "$HERE" && LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 ddp_torch_peer.py \
    --nproc "$1" --threads 1 --model "$2" --steps "${TORCH_STEPS:-30}") | sed -E 's/.*: ([0-9.]+) img\/s/\1/'
}
echo "| model | qk 1 rank | qk 2 ranks | scaling | qk 2 ranks bf16 grads | torch 1 rank | torch DDP 2 ranks (gloo) | qk/torch 2 ranks |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for m in $MODELS; do
  one=$(train "$m" none "")
  two=$(train "$m" none "$QK run --nproc-per-node 2 --")
  twob=$(train "$m" bf16 "$QK run --nproc-per-node 2 --")
  t1=$(torch_ips 1 "$m")
  t2=$(torch_ips 2 "$m")
  awk -v m="$m" -v a="$one" -v b="$two" -v c="$twob" -v d="$t1" -v e="$t2" \
    'BEGIN { printf "| %s | %.0f | %.0f | %.0f%% | %.0f | %.0f | %.0f | %.2fx |\n", m, a, b, 100*b/(2*a), c, d, e, b/e }'
done
echo "# end load: $(uptime | sed 's/.*load average: //')"
