#!/usr/bin/env bash
# The LLM walk-through (docs/walkthrough_llm.md: the seed's Megatron flow,
# step by step), end to end, in a scratch folder: this repository's docs as
# the corpus, a byte-level BPE trained on them, `qk preprocess` into
# DATA_PATH lines, the seed's full TRAINING_ARGS, the practice model (6 layers, hidden 512) trained on
# 2 ranks with the rest of the seed's arrays, then `qk generate`.
#
#   examples/llm_walkthrough.sh [build-dir] [work-dir]      # about 10 minutes on 2 cores
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
QK=$(realpath "${1:-$repo/build/release}/src/cli/qk")
W=${2:-$(mktemp -d /tmp/qk-walk.XXXXXX)}
mkdir -p "$W" && cd "$W"
say() { printf '\n$ %s\n' "$*"; }

# 1. Data: one dataset per document, as the seed lays them out.
rm -rf corpus data ckpt && mkdir corpus
for f in "$repo"/docs/*.md "$repo"/README.md; do cp "$f" "corpus/$(basename "$f" .md).txt"; done
say qk tokenizer train --vocab-size 8192 --input 'corpus/*.txt' --output tok.json
"$QK" tokenizer train --vocab-size 8192 --input corpus/*.txt --output tok.json
say qk preprocess --input corpus --output-prefix data/docs --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model tok.json --append-eod --workers 2
"$QK" preprocess --input corpus --output-prefix data/docs --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model tok.json --append-eod --workers 2 | tee preprocess.log
mapfile -t DATA_PATH < <(grep '_document$' preprocess.log | tr ' ' '\n')

# 2. The launch arrays: the practice sizes, sequence 256 so that it runs in minutes.
MODEL_ARGS=(--num-layers 6 --hidden-size 512 --num-attention-heads 8 --seq-length 256
  --max-position-embeddings 256 --norm-epsilon 1e-6 --attention-dropout 0.0 --hidden-dropout 0.0
  --disable-bias-linear --position-embedding-type rope --no-position-embedding --swiglu
  --normalization RMSNorm --untie-embeddings-and-output-weights)
SEED_TRAINING_ARGS=(--seed 42 --micro-batch-size 4 --global-batch-size 8 --train-iters 60 --init-method-std 0.02
  --use-mcore-models --no-rope-fusion --use-distributed-optimizer --use-flash-attn --sequence-parallel
  --recompute-granularity full --recompute-method block --recompute-num-layers 1 --distributed-backend nccl
  --num-layers-per-virtual-pipeline-stage 2 --multi-latent-attention --qk-layernorm --wait-after-ckpt 0
  --overlap-grad-reduce --moe-shared-expert-overlap)
TRAINING_ARGS=()
for ((i = 0; i < ${#SEED_TRAINING_ARGS[@]}; i++)); do
  case ${SEED_TRAINING_ARGS[i]} in
    --num-layers-per-virtual-pipeline-stage) i=$((i + 1)) ;;
    --multi-latent-attention | --moe-shared-expert-overlap) ;;
    *) TRAINING_ARGS+=("${SEED_TRAINING_ARGS[i]}") ;;
  esac
done
REGULARIZATION_ARGS=(--weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --clip-grad 1.0)
LEARNING_RATE_ARGS=(--lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 6)
MODEL_PARALLEL_ARGS=(--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1)
MIXED_PRECISION_ARGS=(--bf16 --attention-softmax-in-fp32)
DATA_ARGS=(--data-path "${DATA_PATH[@]}" --split 90,10,0 --tokenizer-type HuggingFaceTokenizer
  --tokenizer-model tok.json)

say qk pretrain-gpt ... '"${SEED_TRAINING_ARGS[@]}"'
"$QK" pretrain-gpt "${MODEL_ARGS[@]}" "${SEED_TRAINING_ARGS[@]}" "${DATA_ARGS[@]}" 2>&1 | grep -v "^  [a-z_0-9]* \.\.\." || true

# 3. Train on 2 ranks.
say time qk run --nproc-per-node 2 -- qk pretrain-gpt ...
time "$QK" run --nproc-per-node 2 -- "$QK" pretrain-gpt "${MODEL_ARGS[@]}" "${TRAINING_ARGS[@]}" \
  "${REGULARIZATION_ARGS[@]}" "${LEARNING_RATE_ARGS[@]}" "${MODEL_PARALLEL_ARGS[@]}" \
  "${MIXED_PRECISION_ARGS[@]}" "${DATA_ARGS[@]}" \
  --save ckpt --load ckpt --save-interval 30 --eval-interval 20 --eval-iters 4 --log-interval 10 --log-throughput

# 4. Generate.
say qk generate --load ckpt --prompt '"Checkpoints are written"' --max-new-tokens 64 --temperature 0.8 --top-k 40
"$QK" generate --load ckpt --prompt "Checkpoints are written" --max-new-tokens 64 --temperature 0.8 --top-k 40
echo
echo "work folder: $W"
