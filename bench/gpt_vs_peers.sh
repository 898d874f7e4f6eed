#!/usr/bin/env bash
# The GPT pre-training benchmarks, every peer in the same run (ratios, not
# timed tests):
#  1. GPT-2 124M in f32 (12 layers, hidden 768, 12 heads, vocabulary 50257,
#     sequence 64, micro batch 4, AdamW) at 1 and 2 threads: qk's library step
#     (bench/gpt_step: forward, fused loss, backward, AdamW), llm.c's CPU
#     trainer (../shared/peers/llmc/run.sh) and PyTorch (bench/gpt_torch_peer.py,
#     OpenMP OpenBLAS first on its library path); the median step of each;
#     qk's achieved GFLOP/s (Megatron's num_floating_point_operations) against
#     the f32 GEMM peak `qk check` measures at the same thread count.
#  2. The seed's practice model in the Llama layout (6 layers, hidden 512,
#     8 heads, SwiGLU, RoPE, RMSNorm, untied, sequence 1024, micro batch 1,
#     vocabulary 50257) in bf16 on 2 threads: `qk pretrain-gpt --bf16
#     --use-flash-attn --mock-data` (fp32 main weights, Megatron's path)
#     against PyTorch's bf16 autocast: tokens/s and peak RSS.
#  3. Peak tensor memory of that model's training step (bench/gpt_step, f32)
#     at sequence 512, 1024, 2048 with and without flash attention.
# Usage: bench/gpt_vs_peers.sh [build-dir] [steps]   (PARTS=23 runs parts 2 and 3 only)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
STEPS=${2:-6}
PARTS=${PARTS:-123}
QK=$(realpath "$BUILD/src/cli/qk")
STEP=$(realpath "$BUILD/bench/gpt_step")
LLMC=${LLMC:-$(realpath ../shared/peers/llmc/run.sh)}
TORCH_LIB=/usr/lib/x86_64-linux-gnu/openblas-openmp
PY=(env LD_LIBRARY_PATH=$TORCH_LIB /usr/bin/python3 bench/gpt_torch_peer.py)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# llm.c built and given its inputs as its run.sh does (one work folder kept
# across runs); run here so that it stops after STEPS + 2 steps (run.sh's awk,
# mawk, reads its pipe in blocks and lets it run all 40 steps and samples).
LLMC_DIR=$(dirname "$LLMC")
LLMC_WORK=${LLMC_WORK:-/tmp/llmc-peer}
mkdir -p "$LLMC_WORK"
[ -x "$LLMC_WORK/train_gpt2" ] || gcc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result -I"$LLMC_DIR" \
  "$LLMC_DIR/train_gpt2.c" -lm -o "$LLMC_WORK/train_gpt2"
[ -f "$LLMC_WORK/gpt2_124M.bin" ] || /usr/bin/python3 "$LLMC_DIR/make_inputs.py" "$LLMC_WORK" > /dev/null
llmc_tokens_per_s() {  # threads -> tokens/s of llm.c's median step after 2 warm-up steps
  (cd "$LLMC_WORK" && OMP_NUM_THREADS=$1 stdbuf -oL ./train_gpt2 2> /dev/null || true) | {
    n=0
    while read -r line; do
      case $line in step*) echo "$line"; n=$((n + 1)); [ $n -ge $((STEPS + 2)) ] && break ;; esac
    done
  } | sed -n 's/.*took \([0-9.]*\) ms.*/\1/p' | tail -n +3 | sort -n |
    awk '{a[NR] = $1} END {printf "%.1f\n", 4 * 64 * 1000 / a[int((NR + 1) / 2)]}'
}
json() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.readlines()[-1])['$1'])"; }
echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(uptime | sed 's/.*load average: //')"

if [[ $PARTS == *1* ]]; then
echo
echo "## GPT-2 124M, f32, sequence 64, micro batch 4, AdamW ($STEPS measured steps after 2 warm-up)"
echo
echo "| threads | qk ms/step | qk tokens/s | llm.c tokens/s | PyTorch tokens/s | qk / llm.c | qk / PyTorch | qk GFLOP/s | GEMM peak GFLOP/s | of peak |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for T in 1 2; do
  peak=$(QK_NUM_THREADS=$T "$QK" check 2>&1 | sed -n 's/.*matmul 1024x1024 f32: .*(\([0-9.]*\) GFLOPS).*/\1/p')
  q=$("$STEP" --layout gpt2 --threads $T --steps "$STEPS" --warmup 2)
  l=$(llmc_tokens_per_s $T)
  p=$("${PY[@]}" --layout gpt2 --threads $T --steps "$STEPS" --warmup 2)
  qt=$(echo "$q" | json tokens_per_s); qms=$(echo "$q" | json ms_per_step); qg=$(echo "$q" | json gflops)
  pt=$(echo "$p" | json tokens_per_s)
  awk -v t=$T -v qms="$qms" -v qt="$qt" -v l="$l" -v pt="$pt" -v qg="$qg" -v peak="$peak" 'BEGIN {
    printf "| %d | %.0f | %.1f | %.1f | %.1f | %.2fx | %.2fx | %.1f | %.1f | %.0f%% |\n",
      t, qms, qt, l, pt, qt / l, qt / pt, qg, peak, 100 * qg / peak }'
done

fi

if [[ $PARTS == *2* ]]; then
echo
echo "## Practice model, Llama layout, bf16, sequence 1024, micro batch 1, 2 threads"
echo
MODEL=(--num-layers 6 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024
       --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights --attention-dropout 0 --hidden-dropout 0)
RUN=(--bf16 --use-flash-attn --mock-data --tokenizer-type NullTokenizer --vocab-size 50256 --micro-batch-size 1
     --global-batch-size 1 --train-iters $((STEPS + 4)) --lr 3e-4 --log-interval 1 --eval-iters 0)
QK_NUM_THREADS=2 "$QK" pretrain-gpt "${MODEL[@]}" "${RUN[@]}" > "$TMP/pretrain.log" 2>&1 ||
  { tail -5 "$TMP/pretrain.log"; exit 1; }
qms=$(awk '/iteration +[0-9]+\/ +[0-9]+ \|/ { it = $0; sub(/\/.*/, "", it); sub(/.* /, "", it);
  ms = $0; sub(/.*elapsed time per iteration \(ms\): /, "", ms); sub(/ .*/, "", ms); if (it + 0 > 2) print ms }' \
  "$TMP/pretrain.log" | tail -n "$STEPS" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
qrss=$(grep -o "peak memory (RSS): [0-9.]* GiB" "$TMP/pretrain.log" | tail -1 | sed 's/.*: \([0-9.]*\) GiB/\1/')
mfu=$(grep -o "MFU: [0-9.]*%" "$TMP/pretrain.log" | tail -1)
p=$("${PY[@]}" --layout llama --layers 6 --hidden 512 --heads 8 --vocab 50257 --seq 1024 --batch 1 --threads 2 \
      --steps "$STEPS" --warmup 2 --bf16)
pms=$(echo "$p" | json median_step_ms); prss=$(echo "$p" | json peak_rss_mb)
echo "| | ms/step | tokens/s | peak RSS MB |"
echo "|---|---:|---:|---:|"
awk -v qms="$qms" -v qrss="$qrss" -v pms="$pms" -v prss="$prss" -v mfu="$mfu" 'BEGIN {
  printf "| qk pretrain-gpt --bf16 --use-flash-attn (%s) | %.0f | %.1f | %.0f |\n", mfu, qms, 1024000 / qms, qrss * 1024
  printf "| PyTorch bf16 autocast | %.0f | %.1f | %.0f |\n", pms, 1024000 / pms, prss
  printf "| qk / PyTorch | | %.2fx | %.2fx the memory |\n", pms / qms, qrss * 1024 / prss }'

fi

if [[ $PARTS == *3* ]]; then
echo
echo "## Peak tensor memory of one training step (practice model, f32, AdamW, bench/gpt_step)"
echo
echo "| sequence | flash attention MB | unfused attention MB | unfused / flash |"
echo "|---:|---:|---:|---:|"
for S in 512 1024 2048; do
  f=$("$STEP" --layout llama --layers 6 --hidden 512 --heads 8 --seq $S --batch 1 --flash 1 --threads 2 \
        --steps 1 --warmup 1 | json peak_tensor_mb)
  u=$("$STEP" --layout llama --layers 6 --hidden 512 --heads 8 --seq $S --batch 1 --flash 0 --threads 2 \
        --steps 1 --warmup 1 | json peak_tensor_mb)
  awk -v s=$S -v f="$f" -v u="$u" 'BEGIN { printf "| %d | %.0f | %.0f | %.2fx |\n", s, f, u, u / f }'
done
fi
