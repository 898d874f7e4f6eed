#!/usr/bin/env bash
# What a checkpoint costs the training loop: `qk pretrain-gpt` with a save
# every SAVE_INTERVAL iterations, written synchronously and with
# --async-save, against the same run without checkpoints (the goal: async
# within 5% of none). Two times per run: the wall time of the whole run, and
# the step time with saves (the window from iteration 1's log line to the
# last one, over the iterations in it: the saves inside it, not start-up or
# the final save, which every kind waits for at the end). The checkpoint is
# ~386 MB (28M parameters: bf16 weights, fp32 main weights and Adam moments).
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
      --train-iters "$ITERS" --lr 1e-4 --log-interval 1 --eval-interval 100000 --eval-iters 0)
stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done; }
run() {  # name, extra flags... -> "wall_s step_ms"
  local name=$1
  shift
  local t0 t1
  t0=$(date +%s.%N)
  QK_NUM_THREADS=$THREADS "$QK" pretrain-gpt "${ARGS[@]}" "$@" 2>&1 | stamp > "$TMP/$name.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "async_save: the $name run failed:" >&2; tail -20 "$TMP/$name.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v wall="$(echo "$t1 - $t0" | bc)" -v n="$ITERS" '
    / iteration +1\// { first = $1 }
    $0 ~ (" iteration +" n "/") { last = $1 }
    END { printf "%.2f %.1f\n", wall, 1000 * (last - first) / (n - 1) }' "$TMP/$name.log"
}
read -r none_wall none_step < <(run none)
read -r sync_wall sync_step < <(run sync --save "$TMP/sync" --save-interval "$EVERY")
read -r async_wall async_step < <(run async --save "$TMP/async" --save-interval "$EVERY" --async-save)
size=$(du -sh "$TMP/sync/iter_$(printf %010d "$EVERY")" | cut -f1)
echo "| run ($ITERS iterations, a ${size} checkpoint every $EVERY) | wall s | vs none | step ms with saves | vs none |"
echo "|---|---:|---:|---:|---:|"
for r in none sync async; do
  w=${r}_wall st=${r}_step
  awk -v n="$r" -v w="${!w}" -v s="${!st}" -v bw="$none_wall" -v bs="$none_step" \
    'BEGIN { printf "| %s | %.1f | %.3fx | %.0f | %.3fx |\n", n, w, w / bw, s, s / bs }'
done
