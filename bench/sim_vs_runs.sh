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
# The machine's own speed drifts too (a one-thread 1024^3 GEMM measured
# 100-157 GFLOP/s within one minute there). So each run is bracketed by a
# 0.3 s probe of that GEMM (bench/gemm_bench), and "at calibration speed"
# scales the measured iteration by the probes' mean over the calibration's
# rate for the same GEMM: what the run would have taken on the machine the
# calibration saw (meaningful while the run is compute-bound).
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
PROBE_BIN=$(realpath "$BUILD/bench/gemm_bench" 2>/dev/null || true)
probe() {  # a one-thread 1024^3 GEMM's GFLOP/s now (0 without bench/gemm_bench)
  [ -x "$PROBE_BIN" ] || { echo 0; return; }
  QK_NUM_THREADS=1 "$PROBE_BIN" --benchmark_filter='BM_qk_mm/M:1024/N:1024/K:1024/T:0/' --benchmark_min_time=0.3 \
    --benchmark_format=json 2>/dev/null | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["benchmarks"][0]["GFLOPS"])'
}
CALIB_GEMM=$(sed -n 's/^gemm 1024x1024x1024 fp32: \([0-9.]*\) GFLOP.*/\1/p' "$TMP/calibrate.log")
grep -E "gemm 1024x1024x1024 fp32|layer norm f32|AdamW|shortest|flash|qccl|^(gelu|softmax|cross_entropy):|ranks at once" "$TMP/calibrate.log" | sed 's/^/#   /'
echo "| layout | ranks | measured s/iteration (median of $REPEAT) | spread | predicted s/step | error | share of the cores | measured x share | error against it | GEMM probe around the runs / calibration | at calibration speed | error against it | predicted: compute / comm / bubble / optimizer s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
run() {  # name ranks flags...
  local name=$1 n=$2 out="$TMP/${1// /_}"
  shift 2
  local measured="" predicted times="" probes=""
  for ((r = 0; r < REPEAT; ++r)); do
    probes+=" $(probe)"
    rm -rf "$out"
    /usr/bin/time -f "%e %U %S" -o "$out.time" "$QK" run --nproc-per-node "$n" -- "$QK" pretrain-gpt "${MODEL[@]}" \
      "${TRAIN[@]}" "$@" --save "$out" --save-interval 100000 > "$out.log" 2>&1 || { tail -20 "$out.log" >&2; exit 1; }
    measured+=" $(/usr/bin/python3 -c '
import json, sys
rec = [j for j in map(json.loads, open(sys.argv[1])) if j["kind"] == "train"][-1]
print(rec["elapsed_ms_per_iteration"] / 1e3)' "$out/metrics.jsonl")"
    times+=" $(cat "$out.time")"
    probes+=" $(probe)"
  done
  predicted=$("$QK" sim --world-size "$n" --cluster "$TMP/local.json" "${MODEL[@]}" "$@" --json)
  /usr/bin/python3 - "$name" "$n" "$measured" "$predicted" "$times" "$(nproc)" "$probes" "${CALIB_GEMM:-0}" <<'PY'
import json, statistics, sys
name, n, predicted = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[4])
probes, calib = [float(x) for x in sys.argv[7].split()], float(sys.argv[8])
runs = [float(x) for x in sys.argv[3].split()]
measured = statistics.median(runs)
spread = (max(runs) - min(runs)) / measured
t3 = [float(x) for x in sys.argv[5].split()]  # wall, user, system of each run
wall, cpu = sum(t3[0::3]), sum(t3[1::3]) + sum(t3[2::3])
share = min(1.0, cpu / wall / min(n, int(sys.argv[6])))
p, t = predicted["step_time_s"], predicted["time_s"]
comm = t["tp_comm"] + t["ep_comm"] + t["pp_wait"] + t["dp_comm"]
idle = measured * share
speed = statistics.mean(probes) / calib if calib > 0 and min(probes) > 0 else 0
at_calib = f"{measured * speed:.3f} | {100 * (p - measured * speed) / (measured * speed):+.1f}%" if speed else "- | -"
print(f"| {name} | {n} | {measured:.3f} | {100 * spread:.0f}% | {p:.3f} | {100 * (p - measured) / measured:+.1f}% | {share:.2f} | "
      f"{idle:.3f} | {100 * (p - idle) / idle:+.1f}% | {statistics.mean(probes):.0f} / {calib:.0f} | {at_calib} | "
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
