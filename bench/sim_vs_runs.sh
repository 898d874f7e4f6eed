#!/usr/bin/env bash
# qk sim against our own runs (issue 32, part 6a): every parallel layout of a
# small GPT that bench/ runs on this machine -- DP, TP, TP+SP, PP 1F1B and
# interleaved, EP (MoE), the distributed optimizer; 2 and 4 ranks -- trained
# by `qk run ... qk pretrain-gpt` and predicted by `qk sim` from this
# machine's calibration (`qk sim calibrate`, measured first). Prints one table
# row per layout: the measured time per iteration (the mean over the last
# half of the iterations, from metrics.jsonl), the predicted step time, and
# the error. Long: a few minutes on 2 cores; not part of ctest.
#
# On a machine other jobs share, a run gets only part of the cores while the
# calibration (the fastest of several calls) measures what they do when
# free. So each run is also timed by /usr/bin/time, and its share of the
# cores -- CPU seconds over wall seconds over min(ranks, cores) -- is
# printed; "measured x share" estimates the iteration on an idle machine
# (meaningful while the run is compute-bound). Compare on an idle machine
# for the real figure.
#
# On such a machine the same layout also varies from run to run (up to 30%
# minutes apart on the 2-core VM): REPEAT=N trains each layout N times and
# reports the median, with the runs' spread ((max - min) / median).
#
# Usage: bench/sim_vs_runs.sh [build-dir] [iterations]
#   bench/sim_vs_runs.sh build/release 8
#   REPEAT=3 bench/sim_vs_runs.sh build/release 8       # the median of three runs per layout
#   LAYERS=4 HIDDEN=256 SEQ=128 bench/sim_vs_runs.sh     # the model's size (these are the defaults)
set -euo pipefail
BUILD=${1:-build/release}
ITERS=${2:-8}
QK=$(realpath "$BUILD/src/cli/qk")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
REPEAT=${REPEAT:-1}
LAYERS=${LAYERS:-4} HIDDEN=${HIDDEN:-256} SEQ=${SEQ:-128} MICRO=${MICRO:-2} GBS=${GBS:-16}
MODEL=(--num-layers $LAYERS --hidden-size $HIDDEN --num-attention-heads 8 --seq-length $SEQ
  --max-position-embeddings $SEQ --attention-dropout 0 --hidden-dropout 0 --vocab-size 4095
  --micro-batch-size $MICRO --global-batch-size $GBS)
TRAIN=(--mock-data --tokenizer-type NullTokenizer --train-iters "$ITERS" --lr 3e-4
  --log-interval $((ITERS / 2)) --eval-iters 0)
MOE=(--num-experts 4 --moe-router-topk 2 --moe-token-dispatcher-type alltoall --moe-aux-loss-coeff 0.01)

echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, load: $(uptime | sed 's/.*load average: //')"
# The calibration `qk sim` predicts from: one compute thread per rank, as qk run gives
# each of N ranks cores / N (at least one).
"$QK" sim calibrate --threads 1 --output "$TMP/local.json" > "$TMP/calibrate.log"
grep -E "gemm 1024x1024x1024 fp32|layer norm f32|AdamW|shortest|flash|qccl|^(gelu|softmax|cross_entropy):|ranks at once" "$TMP/calibrate.log" | sed 's/^/#   /'
echo "| layout | ranks | measured s/iteration (median of $REPEAT) | spread | predicted s/step | error | share of the cores | measured x share | error against it | predicted: compute / comm / bubble / optimizer s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
run() {  # name ranks flags...
  local name=$1 n=$2 out="$TMP/${1// /_}"
  shift 2
  local measured="" predicted times=""
  for ((r = 0; r < REPEAT; ++r)); do
    rm -rf "$out"
    /usr/bin/time -f "%e %U %S" -o "$out.time" "$QK" run --nproc-per-node "$n" -- "$QK" pretrain-gpt "${MODEL[@]}" \
      "${TRAIN[@]}" "$@" --save "$out" --save-interval 100000 > "$out.log" 2>&1 || { tail -20 "$out.log" >&2; exit 1; }
    measured+=" $(/usr/bin/python3 -c '
import json, sys
rec = [j for j in map(json.loads, open(sys.argv[1])) if j["kind"] == "train"][-1]
print(rec["elapsed_ms_per_iteration"] / 1e3)' "$out/metrics.jsonl")"
    times+=" $(cat "$out.time")"
  done
  predicted=$("$QK" sim --world-size "$n" --cluster "$TMP/local.json" "${MODEL[@]}" "$@" --json)
  /usr/bin/python3 - "$name" "$n" "$measured" "$predicted" "$times" "$(nproc)" <<'PY'
import json, statistics, sys
name, n, predicted = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[4])
runs = [float(x) for x in sys.argv[3].split()]
measured = statistics.median(runs)
spread = (max(runs) - min(runs)) / measured
t3 = [float(x) for x in sys.argv[5].split()]  # wall, user, system of each run
wall, cpu = sum(t3[0::3]), sum(t3[1::3]) + sum(t3[2::3])
share = min(1.0, cpu / wall / min(n, int(sys.argv[6])))
p, t = predicted["step_time_s"], predicted["time_s"]
comm = t["tp_comm"] + t["ep_comm"] + t["pp_wait"] + t["dp_comm"]
idle = measured * share
print(f"| {name} | {n} | {measured:.3f} | {100 * spread:.0f}% | {p:.3f} | {100 * (p - measured) / measured:+.1f}% | {share:.2f} | "
      f"{idle:.3f} | {100 * (p - idle) / idle:+.1f}% | "
      f"{t['compute']:.3f} / {comm:.3f} / {t['bubble']:.3f} / {t['optimizer']:.3f} |")
PY
}
run "DP" 2
run "TP" 2 --tensor-model-parallel-size 2
run "TP+SP" 2 --tensor-model-parallel-size 2 --sequence-parallel
run "PP 1F1B" 2 --pipeline-model-parallel-size 2
run "PP interleaved" 2 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2
run "EP (MoE)" 2 --expert-model-parallel-size 2 "${MOE[@]}"
run "DP + distributed optimizer" 2 --use-distributed-optimizer
run "DP" 4
run "TP 2 x DP 2" 4 --tensor-model-parallel-size 2
run "TP 2 + SP x DP 2" 4 --tensor-model-parallel-size 2 --sequence-parallel
run "PP 4 1F1B" 4 --pipeline-model-parallel-size 4
run "PP 2 interleaved x DP 2" 4 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2
run "EP 4 (MoE)" 4 --expert-model-parallel-size 4 "${MOE[@]}"
run "DP 4 + distributed optimizer" 4 --use-distributed-optimizer
echo "# after: load $(uptime | sed 's/.*load average: //')"
