#!/usr/bin/env bash
# What a checkpoint costs the training loop: `qk pretrain-gpt` with a save
# every SAVE_INTERVAL iterations, written synchronously and with
# --async-save, against the same run without checkpoints (the goal: async
# within 5% of none). Wall time of the whole run, iterations after the
# first; the checkpoint is ~200 MB (28M parameters: bf16 weights, fp32 main
# weights and Adam moments).
#
#   bench/async_save.sh [ITERS=24] [SAVE_INTERVAL=4] [THREADS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-24}
EVERY=${2:-4}
THREADS=${3:-2}
QK=./build/release/src/cli/qk
[ -x "$QK" ] || { echo "async_save: build qk first (scripts/build.sh --qk)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/qk-async-save.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
ARGS=(--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 256 --max-position-embeddings 256
      --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear --bf16
      --mock-data --tokenizer-type NullTokenizer --vocab-size 32000 --micro-batch-size 2 --global-batch-size 2
      --train-iters "$ITERS" --lr 1e-4 --log-interval 1000 --eval-interval 100000 --eval-iters 0)
run() {  # name, extra flags...
  local name=$1
  shift
  local t0 t1
  t0=$(date +%s.%N)
  QK_NUM_THREADS=$THREADS "$QK" pretrain-gpt "${ARGS[@]}" "$@" > "$TMP/$name.log" 2>&1 ||
    { echo "async_save: the $name run failed:" >&2; tail -20 "$TMP/$name.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}
none=$(run none)
sync=$(run sync --save "$TMP/sync" --save-interval "$EVERY")
async=$(run async --save "$TMP/async" --save-interval "$EVERY" --async-save)
size=$(du -sh "$TMP/sync/iter_$(printf %010d "$EVERY")" | cut -f1)
echo "| run ($ITERS iterations, a ${size} checkpoint every $EVERY) | wall s | vs none |"
echo "|---|---:|---:|"
for r in none sync async; do
  awk -v n="$r" -v t="${!r}" -v base="$none" 'BEGIN { printf "| %s | %.1f | %.3fx |\n", n, t, t / base }'
done
