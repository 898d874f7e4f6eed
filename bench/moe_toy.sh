#!/usr/bin/env bash
# The MoE benchmark: a DeepSeek-like toy trained by `qk pretrain-gpt`
# (8 layers, hidden 512, 8 heads, multi-latent attention with --qk-layernorm,
# the first layer dense and the other 7 MoE: 16 experts of width 352, top-2,
# one shared expert, the alltoall dispatcher, grouped GEMM, bf16; sequence
# 256, mock data), the same global batch of 8 sequences at every layout:
#   1 rank EP=1; 2 ranks DP=2 (EP=1) and EP=2; 4 ranks EP=2 x expert-DP=2 and EP=4.
# Prints tokens/s, rank 0's peak RSS and its bytes per iteration on each
# process group (the ep row carries the token all-to-alls) from the last
# logged interval of metrics.jsonl, and the average load-balancing loss.
# Usage: bench/moe_toy.sh [build-dir] [iterations]   (the last half of the iterations is timed)
#   bench/moe_toy.sh build/release 6
set -euo pipefail
BUILD=${1:-build/release}
ITERS=${2:-6}
QK=$(realpath "$BUILD/src/cli/qk")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SEQ=${SEQ:-256}
MODEL=(--num-layers 8 --hidden-size 512 --num-attention-heads 8 --seq-length "$SEQ" --max-position-embeddings "$SEQ"
  --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear
  --untie-embeddings-and-output-weights --attention-dropout 0 --hidden-dropout 0
  --multi-latent-attention --q-lora-rank 192 --kv-lora-rank 128 --qk-head-dim 64 --qk-pos-emb-head-dim 32
  --v-head-dim 64 --qk-layernorm
  --num-experts 16 --moe-router-topk 2 --moe-ffn-hidden-size 352 --moe-shared-expert-intermediate-size 352
  --moe-layer-freq "([0]*1+[1]*7)" --moe-token-dispatcher-type alltoall --moe-grouped-gemm --moe-permute-fusion
  --moe-aux-loss-coeff 1e-2 --bf16
  --mock-data --tokenizer-type NullTokenizer --vocab-size 4095)
TRAIN=(--micro-batch-size 2 --global-batch-size 8 --train-iters "$ITERS" --lr 3e-4
  --log-interval $((ITERS / 2)) --eval-iters 0)
echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs;" \
  "load: $(uptime | sed 's/.*load average: //')"
echo "| layout | ranks | tokens/s | peak RSS rank 0 (GiB) | ep MB/it | dp MB/it | expert_dp MB/it | load_balancing_loss |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
run() {  # name ranks ep -> one table row
  local name=$1 n=$2 ep=$3 out="$TMP/${1// /_}"
  "$QK" run --nproc-per-node "$n" -- "$QK" pretrain-gpt "${MODEL[@]}" "${TRAIN[@]}" \
    --expert-model-parallel-size "$ep" --save "$out" --save-interval 100000 > "$out.log" 2>&1 ||
    { tail -20 "$out.log" >&2; exit 1; }
  /usr/bin/python3 - "$out/metrics.jsonl" "$name" "$n" <<'PY'
import json, sys
path, name, n = sys.argv[1:]
rec = [j for j in map(json.loads, open(path)) if j["kind"] == "train"][-1]
mb = lambda grp: f'{rec[f"comm/{grp}/bytes"] / 1e6:.2f}' if f"comm/{grp}/bytes" in rec else "-"
lb = next((v for k, v in rec.items() if k.endswith("load_balancing_loss")), float("nan"))
print(f"| {name} | {n} | {rec['tokens_per_second']:.0f} | {rec['peak_memory_bytes'] / 2**30:.2f} | "
      f"{mb('ep')} | {mb('dp')} | {mb('expert_dp')} | {lb:.4f} |")
PY
}
run "EP=1" 1 1
run "DP=2, EP=1" 2 1
run "EP=2" 2 2
run "EP=2 x expert-DP=2" 4 2
run "EP=4" 4 4
echo "# end load: $(uptime | sed 's/.*load average: //')"
