#!/usr/bin/env bash
# Tensor, sequence and data parallelism of `qk pretrain-gpt` on the seed's
# practice model (6 layers, hidden 512, 8 heads, Llama layout: SwiGLU, RoPE,
# RMSNorm, untied output; sequence 256, f32, mock data, vocabulary 4096
# rows at every tensor size) at 2 ranks (DP=2, TP=2, TP=2+SP, DP=2 with the
# distributed optimizer) and 4 ranks (TP=2 x DP=2, TP=4, TP=2 x DP=2 with SP
# and the distributed optimizer), the same global batch of 8 sequences everywhere:
#   tokens/s and rank 0's peak RSS of the last log interval, and the bytes
#   each process group moved per iteration (LogStats::comm, from
#   ProcessGroup::traffic deltas around each step) next to the analytic volume:
#     TP buffers: per micro-batch (4 L + 2) x activation bytes b s h 4 (two
#       all-reduces per layer forward, two backward; the embedding's forward,
#       the output layer's backward), plus the vocabulary-parallel loss (row
#       max: b s f32; the two sums: 2 b s f64), plus one 16-byte all-reduce per
#       step (the TP-aware grad norm and inf flag);
#     SP: the same activations as all-gathers (output size) and reduce-scatters
#       (input size), each (4 L + 2) x activation bytes, plus the loss and the
#       sequence-parallel norm gradients ((2 L + 1) h f32, summed over TP);
#     DP: one all-reduce of this rank's fp32 gradients (its parameters x 4
#       bytes) plus the 24-byte metrics all-reduce; with the distributed
#       optimizer a reduce-scatter of those gradients and an all-gather of the
#       parameters instead, plus the 16-byte global norm and inf flag;
#     wire (QCCL_ALGO=ring): all-reduce 2(n-1)/n x buffer, all-gather and
#       reduce-scatter (n-1)/n x the full buffer.
#   The measured/formula columns must be within 5%.
# Usage: bench/tp_layouts.sh [build-dir] [iterations]   (the last half of the iterations is timed)
#   bench/tp_layouts.sh build/release 6
set -euo pipefail
BUILD=${1:-build/release}
ITERS=${2:-6}
QK=$(realpath "$BUILD/src/cli/qk")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export QCCL_ALGO=${QCCL_ALGO:-ring}
# Smaller sizes for a quick look: LAYERS=2 HIDDEN=64 SEQ=32 bench/tp_layouts.sh
LAYERS=${LAYERS:-6} HIDDEN=${HIDDEN:-512} SEQ=${SEQ:-256} MICRO=4 GBS=8
MODEL=(--num-layers $LAYERS --hidden-size $HIDDEN --num-attention-heads 8 --seq-length $SEQ
  --max-position-embeddings $SEQ --position-embedding-type rope --normalization RMSNorm --swiglu
  --disable-bias-linear --untie-embeddings-and-output-weights --attention-dropout 0 --hidden-dropout 0
  --mock-data --tokenizer-type NullTokenizer --vocab-size 4095)
TRAIN=(--micro-batch-size $MICRO --global-batch-size $GBS --train-iters "$ITERS" --lr 3e-4
  --log-interval $((ITERS / 2)) --eval-iters 0)
echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; QCCL_ALGO=$QCCL_ALGO;" \
  "load: $(uptime | sed 's/.*load average: //')"
echo "| layout | ranks | tokens/s | peak RSS rank 0 (GiB) | params per rank | TP buffers MB/it (formula) |" \
  "TP wire MB/it (formula) | DP buffers MB/it (formula) | DP wire MB/it (formula) | max deviation |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
run() {  # name ranks tp sp [distopt] -> one table row
  local name=$1 n=$2 tp=$3 sp=$4 distopt=${5:-0} out="$TMP/${1// /_}"
  local flags=(--tensor-model-parallel-size "$tp" --save "$out" --save-interval 100000)
  [ "$sp" = 1 ] && flags+=(--sequence-parallel)
  [ "$distopt" = 1 ] && flags+=(--use-distributed-optimizer)
  "$QK" run --nproc-per-node "$n" -- "$QK" pretrain-gpt "${MODEL[@]}" "${TRAIN[@]}" "${flags[@]}" > "$out.log" 2>&1 ||
    { tail -20 "$out.log" >&2; exit 1; }
  local params
  params=$(sed -n 's/.*model parallel rank (0, 0): \([0-9]*\).*/\1/p' "$out.log" | head -1)
  /usr/bin/python3 - "$out/metrics.jsonl" "$name" "$n" "$tp" "$sp" "$params" $LAYERS $HIDDEN $SEQ $MICRO $GBS "$distopt" <<'EOF'
import json, sys
path, name, n, tp, sp, params, L, h, s, b, gbs, distopt = sys.argv[1:]
n, tp, sp, params, L, h, s, b, gbs, distopt = map(int, (n, tp, sp, params, L, h, s, b, gbs, distopt))
rec = [j for j in map(json.loads, open(path)) if j["kind"] == "train"][-1]
dp = n // tp
micro = gbs // (b * dp)                      # micro-batches per step
act = b * s * h * 4                          # one activation [b, s, h] in f32
loss = b * s * 4 + 2 * b * s * 8            # vocabulary-parallel cross entropy
ring_ar = lambda x, k: 2 * (k - 1) / k * x
ring_ag = lambda x, k: (k - 1) / k * x
rows, devs = [], []
def cmp(measured, formula):
    if formula > 0: devs.append(abs(measured - formula) / formula)
    return f"{measured / 1e6:.3f} ({formula / 1e6:.3f})"
tp_buf = tp_wire = 0.0
if tp > 1:
    acts = micro * (4 * L + 2) * act
    norms = (2 * L + 1) * h * 4 if sp else 0
    small = micro * loss + 16 + norms        # all-reduces besides the activations
    if sp:
        tp_buf = 2 * acts + small
        tp_wire = 2 * ring_ag(acts, tp) + ring_ar(small, tp)
    else:
        tp_buf = acts + small
        tp_wire = ring_ar(acts + small, tp)
if distopt:
    # reduce-scatter of the fp32 gradients, all-gather of the (f32) parameters,
    # the metrics (24 bytes) and the global norm and inf flag (16) all-reduced
    dp_buf = 2 * params * 4 + 24 + 16 if dp > 1 else 0
    dp_wire = 2 * ring_ag(params * 4, dp) + ring_ar(40, dp) if dp > 1 else 0
else:
    dp_buf = params * 4 + 24 if dp > 1 else 0
    dp_wire = ring_ar(dp_buf, dp) if dp > 1 else 0
g = lambda grp, k: rec.get(f"comm/{grp}/{k}", 0.0)
tp_cell = cmp(g("tp", "bytes"), tp_buf) if tp > 1 else "-"
tpw_cell = cmp(g("tp", "wire_bytes_sent"), tp_wire) if tp > 1 else "-"
dp_cell = cmp(g("dp", "bytes"), dp_buf) if dp > 1 else "-"
dpw_cell = cmp(g("dp", "wire_bytes_sent"), dp_wire) if dp > 1 else "-"
print(f"| {name} | {n} | {rec['tokens_per_second']:.0f} | {rec['peak_memory_bytes'] / 2**30:.2f} | {params} | "
      f"{tp_cell} | {tpw_cell} | {dp_cell} | {dpw_cell} | {100 * max(devs, default=0):.2f}% |")
EOF
}
run "DP=2" 2 1 0
run "TP=2" 2 2 0
run "TP=2 + SP" 2 2 1
run "TP=2 x DP=2" 4 2 0
run "TP=4" 4 4 0
run "DP=2 + distributed optimizer" 2 1 0 1
run "TP=2 x DP=2 + SP + distributed optimizer" 4 2 1 1
echo "# end load: $(uptime | sed 's/.*load average: //')"
