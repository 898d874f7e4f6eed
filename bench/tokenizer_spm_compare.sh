#!/usr/bin/env bash
# SentencePiece encode throughput, one thread, same text, one run: qk's
# SentencePieceTokenizer (libsentencepiece behind Megatron's special-token
# handling) vs the library's own spm_encode. Both run as whole processes
# (load the model, encode every line, print the ids), best of 3, and the ids
# are checked identical first.
#
#   bash bench/tokenizer_spm_compare.sh [BYTES] [QK_BINARY]
# Needs spm_train/spm_encode (Debian's sentencepiece; scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BYTES=${1:-2000000}
QK=${2:-build/release/src/cli/qk}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$QK" data synth-text --bytes 1000000 --seed 3 > "$TMP/train.txt"
spm_train --input="$TMP/train.txt" --model_prefix="$TMP/m" --vocab_size=8000 --character_coverage=0.98 --num_threads=2 \
  --minloglevel=2 > "$TMP/train.log" 2>&1
"$QK" data synth-text --bytes "$BYTES" --seed 1 > "$TMP/text.txt"
TOK=(--tokenizer-type SentencePieceTokenizer --tokenizer-model "$TMP/m.model")
"$QK" tokenizer encode "${TOK[@]}" --per-line --input "$TMP/text.txt" > "$TMP/qk.ids"
spm_encode --model="$TMP/m.model" --output_format=id < "$TMP/text.txt" > "$TMP/spm.ids"
cmp -s "$TMP/qk.ids" "$TMP/spm.ids" || { echo "ids differ:"; diff "$TMP/qk.ids" "$TMP/spm.ids" | head -5; exit 1; }
echo "ids identical: $(wc -w < "$TMP/qk.ids") ids on $(wc -l < "$TMP/text.txt") lines"
echo "text: $(stat -c %s "$TMP/text.txt") bytes (qk data synth-text --seed 1), unigram model of 8000 pieces"
best() {  # CMD...: best wall time of 3 runs, seconds
  local b=999999 t
  for _ in 1 2 3; do
    t=$( { TIMEFORMAT=%R; time "$@" > /dev/null; } 2>&1 )
    b=$(awk -v a="$b" -v c="$t" 'BEGIN { print (c < a) ? c : a }')
  done
  echo "$b"
}
tq=$(best "$QK" tokenizer encode "${TOK[@]}" --per-line --input "$TMP/text.txt")
ts=$(best sh -c "spm_encode --model='$TMP/m.model' --output_format=id < '$TMP/text.txt'")
awk -v n="$(stat -c %s "$TMP/text.txt")" -v q="$tq" -v s="$ts" 'BEGIN {
  printf "encoder MB/s seconds\nqk %.2f %.3f\nspm_encode %.2f %.3f\nqk / spm_encode %.2fx\n", n/1e6/q, q, n/1e6/s, s, s/q }'
