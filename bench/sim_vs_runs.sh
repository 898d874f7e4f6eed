#!/usr/bin/env bash
# qk sim against our own runs (issue 32, part 6a): every parallel layout of a
# small GPT that bench/ runs on this machine -- DP, TP, TP+SP, PP 1F1B and
# interleaved, EP (MoE), the distributed optimizer; 2 and 4 ranks -- trained
# by `qk run ... qk pretrain-gpt` and predicted by `qk sim` from this
# machine's calibration (`qk sim calibrate`, measured first). Prints one table
# row per layout: the measured time per iteration and the predicted step
# time, and the error.
#
# The calibration measures what the machine does when nothing else runs
# (each kernel the fastest of several calls). On a machine other jobs share
# (the 2-core VM: a 1024^3 GEMM read 100-200 GFLOP/s within an hour, one
# layout's runs minutes apart 30% apart) a run's mean is mostly the
# neighbours. So each run logs every iteration and the first row compares
# like with like: the fastest iteration (past two of warm-up) of REPEAT runs
# of the layout, interleaved with the other layouts' runs -- what the
# machine does when nothing else runs. The machine's speed also drifts over
# minutes (two calibrations five minutes apart differed by 9-34%), so it is
# calibrated before each round of runs and after the last, and a layout's
# prediction is the median of those calibrations'. The median (over the runs of each
# run's median iteration) is printed beside it, with the runs' spread
# ((max - min) / median of those medians) and the runs' share of the cores
# (CPU seconds over wall seconds over min(ranks, cores); below 1: others ran).
# Long: a few minutes on 2 cores per repeat; not part of ctest.
#
# Usage: bench/sim_vs_runs.sh [build-dir] [iterations]
#   bench/sim_vs_runs.sh build/release 8
#   REPEAT=3 bench/sim_vs_runs.sh build/release 8       # three runs per layout, interleaved
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
  --log-interval 1 --eval-iters 0)
MOE=(--num-experts 4 --moe-router-topk 2 --moe-token-dispatcher-type alltoall --moe-aux-loss-coeff 0.01)

echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, load: $(uptime | sed 's/.*load average: //')"
# The calibrations `qk sim` predicts from: one compute thread per rank, as qk run gives
# each of N ranks cores / N (at least one). One before each round of runs and one after
# the last, so the calibrations span the runs' time; each layout's prediction is the
# median of theirs.
calibrate() {  # index
  "$QK" sim calibrate --threads 1 --output "$TMP/local$1.json" > "$TMP/calibrate$1.log"
  echo "# calibration $1 at $(date -u +%T):"
  grep -E "gemm 1024x1024x1024 fp32|layer norm f32|AdamW|shortest|flash|qccl|^(gelu|softmax|cross_entropy|linear|grad_accumulate):|ranks at once" \
    "$TMP/calibrate$1.log" | sed 's/^/#   /'
}
LAYOUTS=(
  "DP|2|"
  "TP|2|--tensor-model-parallel-size 2"
  "TP+SP|2|--tensor-model-parallel-size 2 --sequence-parallel"
  "PP 1F1B|2|--pipeline-model-parallel-size 2"
  "PP interleaved|2|--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2"
  "EP (MoE)|2|--expert-model-parallel-size 2 ${MOE[*]}"
  "DP + distributed optimizer|2|--use-distributed-optimizer"
  "DP|4|"
  "TP 2 x DP 2|4|--tensor-model-parallel-size 2"
  "TP 2 + SP x DP 2|4|--tensor-model-parallel-size 2 --sequence-parallel"
  "PP 4 1F1B|4|--pipeline-model-parallel-size 4"
  "PP 2 interleaved x DP 2|4|--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2"
  "EP 4 (MoE)|4|--expert-model-parallel-size 4 ${MOE[*]}"
  "DP 4 + distributed optimizer|4|--use-distributed-optimizer"
)
# Each layout's runs, interleaved: every layout once, then again, REPEAT times.
for ((r = 0; r < REPEAT; ++r)); do
  calibrate "$r"
  for ((l = 0; l < ${#LAYOUTS[@]}; ++l)); do
    IFS='|' read -r name n flags <<< "${LAYOUTS[$l]}"
    out="$TMP/run$l.$r"
    # shellcheck disable=SC2086
    /usr/bin/time -f "%e %U %S" -o "$out.time" "$QK" run --nproc-per-node "$n" -- "$QK" pretrain-gpt "${MODEL[@]}" \
      "${TRAIN[@]}" $flags --save "$out" --save-interval 100000 > "$out.log" 2>&1 || { tail -20 "$out.log" >&2; exit 1; }
  done
done
calibrate "$REPEAT"
echo "| layout | ranks | fastest iteration of $REPEAT runs, s | predicted s/step (median of $((REPEAT + 1)) calibrations) | error | the calibrations' predictions | median iteration, s | error | spread of the runs | share of the cores | predicted: compute / comm / bubble / optimizer s |"
echo "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"
for ((l = 0; l < ${#LAYOUTS[@]}; ++l)); do
  IFS='|' read -r name n flags <<< "${LAYOUTS[$l]}"
  # shellcheck disable=SC2086
  predicted="["
  for ((c = 0; c <= REPEAT; ++c)); do
    predicted+="$("$QK" sim --world-size "$n" --cluster "$TMP/local$c.json" "${MODEL[@]}" $flags --json)"
    ((c < REPEAT)) && predicted+=","
  done
  predicted+="]"
  /usr/bin/python3 - "$name" "$n" "$predicted" "$(nproc)" "$TMP/run$l" "$REPEAT" <<'PY'
import json, statistics, sys
name, n, cores, prefix, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
each = sorted(json.loads(sys.argv[3]), key=lambda j: j["step_time_s"])
predicted = each[(len(each) - 1) // 2]  # the breakdown: the median calibration's (the lower one of an even count)
fastest, medians, wall, cpu = [], [], 0.0, 0.0
for r in range(repeat):
    its = [j["elapsed_ms_per_iteration"] / 1e3 for j in map(json.loads, open(f"{prefix}.{r}/metrics.jsonl"))
           if j["kind"] == "train"][2:]  # past two of warm-up
    fastest.append(min(its))
    medians.append(statistics.median(its))
    t = [float(x) for x in open(f"{prefix}.{r}.time").read().split()]
    wall, cpu = wall + t[0], cpu + t[1] + t[2]
best, median = min(fastest), statistics.median(medians)
spread = (max(medians) - min(medians)) / median
share = min(1.0, cpu / wall / min(n, cores))
p, t = statistics.median(j["step_time_s"] for j in each), predicted["time_s"]
comm = t["tp_comm"] + t["ep_comm"] + t["pp_wait"] + t["dp_comm"]
preds = " / ".join(f"{j['step_time_s']:.3f}" for j in each)
print(f"| {name} | {n} | {best:.3f} | {p:.3f} | {100 * (p - best) / best:+.1f}% | {preds} | {median:.3f} | {100 * (p - median) / median:+.1f}% | "
      f"{100 * spread:.0f}% | {share:.2f} | {t['compute']:.3f} / {comm:.3f} / {t['bubble']:.3f} / {t['optimizer']:.3f} |")
PY
done
echo "# after: load $(uptime | sed 's/.*load average: //')"
