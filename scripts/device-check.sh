#!/usr/bin/env bash
# The GPU checks (docs/cuda.md) in one run on the GPU machine,
# which has CUDA 13 and PyTorch but none of our Debian packages: the
# programs are built here and travel with the libraries they need.
#
#   scripts/device-check.sh --pack   # here: build, then pack build/device-pack/qianka.tar.xz
#   scripts/device-check.sh OUTDIR   # there: unpack, run every check, write OUTDIR/*
#
# With the device tool: run(command="scripts/device-check.sh $OUT [speed|checks]",
# carry=["build/device-pack"], timeout_s=540). OUTDIR gets summary.txt (each
# step, its exit status and seconds), gpu.txt and one log per kind of step
# (8 files, as many as the tool brings back: check (with the CUDA-graph runs), cuda_tests, op_harness,
# nccl_tests, speed, cnn). Each step is bounded and none starts
# after 450 s, so the run stays under 8 minutes; a step that fails does not
# stop the others. Without a GPU (or here) it runs too, and the logs say
# why nothing ran on one.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${QK_BUILD_DIR:-build/release}
PACK=build/device-pack
PROGRAMS=(src/cli/qk tests/harness/qk_op_harness tests/tensor/qk_tensor_cuda_tests
          tests/optim/qk_optim_cuda_tests tests/qccl/qk_qccl_backend_nccl_tests tests/dist/qk_dist_cuda_tests
          tests/hpc/md/qk_md_tests bench/cuda_gemm bench/cuda_attention bench/simple_cnn_step)

if [ "${1:-}" = "--pack" ]; then
  set -e
  ninja -C "$BUILD" qk qk_op_harness qk_tensor_cuda_tests qk_optim_cuda_tests qk_qccl_backend_nccl_tests qk_dist_cuda_tests qk_md_tests cuda_gemm cuda_attention simple_cnn_step
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/bin" "$stage/lib"
  for p in "${PROGRAMS[@]}"; do strip -o "$stage/bin/$(basename "$p")" "$BUILD/$p"; done
  # Every shared library but the C and C++ runtimes (the machine's are newer)
  # and CUDA's own (the machine's match its driver; NCCL alone is 200 MB).
  for p in "${PROGRAMS[@]}"; do ldd "$BUILD/$p"; done | awk '$3 ~ /^\// {print $1, $3}' | sort -u |
    grep -Ev '^(libc|libm|libdl|libpthread|librt|libresolv|libgcc_s|libstdc\+\+)\.|^(libcu|libnccl|libnv)' |
    while read -r name path; do cp -L "$path" "$stage/lib/$name"; done
  mkdir -p "$PACK"
  # xz -9's 64 MiB window finds the programs' shared static code in each other (44 MB against -6's 69: the
  # device tool carries 64 MiB at most); -T2 keeps the blocks large enough for it.
  tar -C "$stage" -cf - bin lib | xz -9e -T2 > "$PACK/qianka.tar.xz"
  echo "packed $(du -h "$PACK/qianka.tar.xz" | cut -f1) into $PACK/qianka.tar.xz ($(ls "$stage/lib" | wc -l) libraries)"
  exit 0
fi

OUT=${1:?usage: scripts/device-check.sh --pack | OUTDIR [all|speed|checks]}
# Which steps: all (the default), speed (the benchmarks against PyTorch,
# speed.log and cnn.log) or checks (correctness: the CUDA-graph runs against
# eager, the test programs, the op harness, NCCL). Each part fits the budget
# on its own; two device calls can run one each.
PART=${2:-all}
case "$PART" in all | speed | checks) ;; *) echo "device-check: part must be all, speed or checks, got '$PART'" >&2; exit 2 ;; esac
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
START=$(date +%s)

# step NAME LOG SECONDS CMD...: runs CMD bounded by SECONDS into OUT/LOG;
# once BUDGET seconds have passed since the start, later steps are skipped
# (and say so), so the whole run ends within the device tool's limit.
BUDGET=${QK_DEVICE_CHECK_BUDGET:-450}
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  if (($(date +%s) - START > BUDGET)); then
    note "$(printf '%-22s skipped: past the %s s budget' "$name" "$BUDGET")"
    return
  fi
  local t0 rc
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >> "$OUT/$log" 2>&1
  rc=$?
  note "$(printf '%-22s exit %3d  %6.1f s  (%s)' "$name" "$rc" "$(awk "BEGIN {print $(date +%s.%N) - $t0}")" "$log")"
}

note "# device-check $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(nproc) CPUs"
[ -f "$PACK/qianka.tar.xz" ] || { note "error: $PACK/qianka.tar.xz not found: run scripts/device-check.sh --pack here first and carry $PACK"; exit 1; }
ROOT=$(mktemp -d)
xz -dc "$PACK/qianka.tar.xz" | tar -C "$ROOT" -xf - || { note "error: could not unpack $PACK/qianka.tar.xz"; exit 1; }

# CUDA's libraries (runtime, cuBLASLt, cuDNN, NCCL): the toolkit's, then those of
# PyTorch's wheels (nvidia/*/lib), wherever a needed one is found first.
LIBS="$ROOT/lib"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && LIBS="$LIBS:$d"; done
SITE=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
for lib in libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  for s in $SITE; do
    f=$(find "$s/nvidia" -name "$lib" 2>/dev/null | head -1)
    [ -n "$f" ] && { LIBS="$LIBS:$(dirname "$f")"; break; }
  done
done
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
BIN="$ROOT/bin"
note "libraries: $LD_LIBRARY_PATH"
missing=$(for p in "$BIN"/*; do ldd "$p" | grep "not found"; done | sort -u)
[ -z "$missing" ] || note "unresolved libraries: $missing"

{ nvidia-smi || echo "nvidia-smi: not available"; } > "$OUT/gpu.txt" 2>&1
step "qk check" check.log 60 "$BIN/qk" check
if want checks; then
# The seed's practice model (6 layers, hidden 512, Llama layout) on the GPU:
# 20 bf16 iterations of Megatron's mock data; its log joins check.log.
GPT_ARGS=(--num-layers 6 --hidden-size 512 --num-attention-heads 8 --seq-length 1024
          --max-position-embeddings 1024 --position-embedding-type rope --normalization RMSNorm --swiglu
          --disable-bias-linear --micro-batch-size 4 --global-batch-size 16 --train-iters 20 --lr 3e-4
          --mock-data --tokenizer-type NullTokenizer --vocab-size 32000 --bf16 --log-interval 5
          --eval-iters 0 --log-throughput)
step "pretrain-gpt cuda" check.log 90 "$BIN/qk" pretrain-gpt --device cuda "${GPT_ARGS[@]}"
# The seed's CIFAR-10 trainer end to end on the GPU (synthetic data, bf16 autocast).
step "train cifar10 cuda" check.log 60 "$BIN/qk" train cifar10 --device cuda --amp bf16 --epochs 1 \
  --data-dir "$ROOT/cifar" --out "$ROOT/cifar-run" --synth-train 4096 --synth-test 1024 --no-progress
# CUDA graphs: a small GPT (Megatron's default dropout, flash attention's
# included) and the ResNet trained eagerly and with the step recorded as a
# graph end with the same weights, byte for byte.
SAME='import filecmp, sys; sys.exit(0 if filecmp.cmp(sys.argv[1], sys.argv[2], shallow=False) else 1)'
GRAPH_GPT=(--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 256 --max-position-embeddings 256
           --position-embedding-type rope --normalization RMSNorm --swiglu --micro-batch-size 4
           --global-batch-size 8 --train-iters 8 --lr 3e-4 --mock-data --tokenizer-type NullTokenizer
           --vocab-size 4096 --bf16 --use-flash-attn --eval-iters 0 --save-interval 8 --log-interval 4)
step "gpt eager (for graphs)" check.log 60 "$BIN/qk" pretrain-gpt --device cuda "${GRAPH_GPT[@]}" --save "$ROOT/g-eager"
step "gpt --enable-cuda-graph" check.log 60 "$BIN/qk" pretrain-gpt --device cuda "${GRAPH_GPT[@]}" \
  --save "$ROOT/g-graph" --enable-cuda-graph
step "gpt graph equals eager" check.log 10 python3 -c "$SAME" "$ROOT/g-eager/iter_0000000008/model.safetensors" \
  "$ROOT/g-graph/iter_0000000008/model.safetensors"
for g in "" --cuda-graph; do
  step "resnet cifar10 $g" check.log 60 "$BIN/qk" train cifar10 --device cuda --model simple_resnet --amp bf16 \
    --epochs 1 --data-dir "$ROOT/cifar-r" --out "$ROOT/resnet$g" --synth-train 1024 --synth-test 256 --no-progress $g
done
step "resnet graph equals eager" check.log 10 python3 -c "$SAME" "$ROOT/resnet/checkpoints/latest.safetensors" \
  "$ROOT/resnet--cuda-graph/checkpoints/latest.safetensors"
step "cuda backend tests" cuda_tests.log 120 "$BIN/qk_tensor_cuda_tests"
step "cuda optimizer tests" cuda_tests.log 60 "$BIN/qk_optim_cuda_tests"
step "op harness (cuda)" op_harness.log 240 "$BIN/qk_op_harness" --device cuda --no-gradcheck
# The 16-bit attention cases above ran on cuDNN's fused attention where it
# took them; these run them on qk's own tensor-core kernels.
step "op harness (cuda), attention on qk's kernels" op_harness.log 60 env QK_CUDA_ATTENTION=tiled \
  "$BIN/qk_op_harness" --device cuda --no-gradcheck --filter attention
# qk md's pair forces and PME on the GPU against its CPU kernels (skipped where there is no GPU).
step "md non-bonded and pme on cuda" cuda_tests.log 60 env QK_SOURCE_DIR="$PWD" "$BIN/qk_md_tests" \
  --gtest_filter='NonbondedGpu.*:PmeGpu.*'
step "nccl backend tests" nccl_tests.log 60 "$BIN/qk_qccl_backend_nccl_tests"
step "dist on cuda (nccl)" nccl_tests.log 60 "$BIN/qk_dist_cuda_tests"
fi
if want speed; then
# Speed against PyTorch in the same run (docs/benchmarks.md), all in speed.log:
# GEMM, flash attention against SDPA, and GPT-2 124M and the practice model
# (B16 T1024 bf16, flash attention) against PyTorch eager
# (bench/gpt_cuda_peer.py: bf16 autocast, SDPA, fused AdamW).
TORCH_GEMM='import sys, torch
n, dt = int(sys.argv[1]), getattr(torch, {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[sys.argv[2]])
a = torch.randn(n, n, device="cuda").to(dt); b = torch.randn(n, n, device="cuda").to(dt)
for _ in range(3): a @ b
ms = []
for _ in range(10):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); a @ b; e.record(); e.synchronize(); ms.append(s.elapsed_time(e))
m = sorted(ms)[len(ms) // 2]
print(f"pytorch {torch.__version__} {n} {sys.argv[2]}: {m:.3f} ms, {2 * n ** 3 / (m * 1e-3) / 1e12:.1f} TFLOP/s")'
for size in 4096 8192; do
  step "gemm bf16 $size" speed.log 60 "$BIN/cuda_gemm" "$size" bf16 10
  step "torch gemm bf16 $size" speed.log 60 python3 -c "$TORCH_GEMM" "$size" bf16
done
# Flash attention three ways: the default (cuDNN's fused attention where it
# takes the call; at debug level the log names each shape cuDNN refused),
# cuDNN required (an error names what it refused), qk's own tensor-core kernels.
step "attention cuda" speed.log 60 env QK_LOG_LEVEL=debug "$BIN/cuda_attention"
step "attention cuda (cudnn)" speed.log 60 env QK_CUDA_ATTENTION=cudnn "$BIN/cuda_attention"
step "attention cuda (qk's kernels)" speed.log 60 env QK_CUDA_ATTENTION=tiled "$BIN/cuda_attention"
step "torch sdpa" speed.log 60 python3 bench/sdpa_cuda_peer.py
# No dropout, as the peer has none (Megatron's default is 0.1 for both; the
# first run's figures had it, and attention dropout keeps cuDNN out).
LLM_COMMON=(--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 16 --global-batch-size 16
            --train-iters 20 --mock-data --tokenizer-type NullTokenizer --bf16 --use-flash-attn --log-interval 5
            --eval-iters 0 --log-throughput --attention-dropout 0 --hidden-dropout 0)
GPT2=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --vocab-size 50257 --lr 6e-4)
PRACTICE=(--num-layers 6 --hidden-size 512 --num-attention-heads 8 --position-embedding-type rope
          --normalization RMSNorm --swiglu --disable-bias-linear --untie-embeddings-and-output-weights
          --vocab-size 32000 --lr 3e-4)
step "gpt2-124m cuda" speed.log 120 "$BIN/qk" pretrain-gpt --device cuda "${GPT2[@]}" "${LLM_COMMON[@]}"
step "torch gpt2-124m" speed.log 90 python3 bench/gpt_cuda_peer.py --vocab 50304 --batch 16
step "practice cuda" speed.log 90 "$BIN/qk" pretrain-gpt --device cuda "${PRACTICE[@]}" "${LLM_COMMON[@]}"
step "torch practice" speed.log 90 python3 bench/gpt_cuda_peer.py --llama --layers 6 --d 512 --heads 8 \
  --vocab 32000 --batch 16
step "practice cuda graph" speed.log 90 "$BIN/qk" pretrain-gpt --device cuda "${PRACTICE[@]}" "${LLM_COMMON[@]}" \
  --enable-cuda-graph
# qk md with its pair forces and PME on the GPU, its pair forces only (-nb gpu: PME and the rest on the
# CPU), and all on the CPU, the PME water fixture: the Performance lines (ns/day) in speed.log.
sed 's/^nstenergy .*/nstenergy = 1000/; s/^nstcalcenergy .*/nstcalcenergy = 100/' \
  tests/fixtures/md/water_pme/run.mdp > "$ROOT/md.mdp"
MD_IN=(-f "$ROOT/md.mdp" -c tests/fixtures/md/water_pme/conf.gro -p tests/fixtures/md/water_pme/topol.top
       -nsteps 2000 -nt 8)
step "md -nb gpu -pme gpu" speed.log 60 "$BIN/qk" md "${MD_IN[@]}" -deffnm "$ROOT/md-gpu2" -nb gpu -pme gpu
step "md -nb gpu" speed.log 60 "$BIN/qk" md "${MD_IN[@]}" -deffnm "$ROOT/md-gpu" -nb gpu
step "md -nb cpu" speed.log 60 "$BIN/qk" md "${MD_IN[@]}" -deffnm "$ROOT/md-cpu" -nb cpu
# SimpleCNN and ResNet steps (SGD, f32) and inference against PyTorch's
# eager mode on the same GPU, both with cuDNN's benchmark mode (algorithms
# timed once per shape): images/s, ms per step, peak memory (JSON lines).
for model in simple_cnn simple_resnet; do
  for b in 64 256; do
    step "$model train b$b" cnn.log 60 "$BIN/simple_cnn_step" --model "$model" --batch "$b" --steps 30 --warmup 5 --device cuda --cudnn-benchmark 1
    step "torch $model train b$b" cnn.log 60 python3 bench/simple_cnn_torch.py --model "$model" --batch "$b" --steps 30 --warmup 5 --device cuda --cudnn-benchmark
  done
  # bf16 autocast (issue 31 part 6: faster than f32)
  step "$model train b256 bf16" cnn.log 60 "$BIN/simple_cnn_step" --model "$model" --batch 256 --steps 30 --warmup 5 --device cuda --cudnn-benchmark 1 --amp bf16
  step "torch $model train b256 bf16" cnn.log 60 python3 bench/simple_cnn_torch.py --model "$model" --batch 256 --steps 30 --warmup 5 --device cuda --cudnn-benchmark --bf16
  # channels last (NHWC convolutions; part 6), both sides
  step "$model train b256 bf16 channels-last" cnn.log 60 "$BIN/simple_cnn_step" --model "$model" --batch 256 --steps 30 --warmup 5 --device cuda --cudnn-benchmark 1 --amp bf16 --channels-last 1
  step "torch $model train b256 bf16 channels-last" cnn.log 60 python3 bench/simple_cnn_torch.py --model "$model" --batch 256 --steps 30 --warmup 5 --device cuda --cudnn-benchmark --bf16 --channels-last
  for b in 1 256; do
    step "$model infer b$b" cnn.log 60 "$BIN/simple_cnn_step" --model "$model" --mode infer --batch "$b" --steps 50 --warmup 5 --device cuda --cudnn-benchmark 1
    step "torch $model infer b$b" cnn.log 60 python3 bench/simple_cnn_torch.py --model "$model" --mode infer --batch "$b" --steps 50 --warmup 5 --device cuda --cudnn-benchmark
  done
  # batch-1 latency with the forward replayed as one CUDA graph
  step "$model infer b1 graph" cnn.log 60 "$BIN/simple_cnn_step" --model "$model" --mode infer --batch 1 --steps 50 --warmup 5 --device cuda --cudnn-benchmark 1 --cuda-graph 1
done
fi
note "total $(($(date +%s) - START)) s"
