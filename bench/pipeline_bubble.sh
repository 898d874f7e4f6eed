#!/usr/bin/env bash
# Pipeline bubble against theory: 1F1B and interleaved 1F1B (2
# virtual stages, with and without overlapped p2p) at p = 2 and 4 stages,
# m = 4, 8, 16 micro-batches; tokens/s and peak memory per stage. One
# process per stage, one thread each (bench/gpt_pipeline.cc forks them).
# Usage: bench/pipeline_bubble.sh [build-dir] [extra gpt_pipeline flags]
#   bench/pipeline_bubble.sh build/release "--layers 8 --hidden 256 --seq 128"
set -euo pipefail
BUILD=${1:-build/release}
EXTRA=${2:-}
BIN="$BUILD/bench/gpt_pipeline"
echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores," \
  "load: $(uptime | sed 's/.*load average: //')"
echo "| p | v | overlap | m | theory | measured | per stage (last step) | ms/step | tokens/s | peak RSS MB per stage | peak tensor MB per stage |"
echo "|---:|---:|---|---:|---:|---:|---|---:|---:|---|---|"
for p in 2 4; do
  for v in 1 2; do
    for overlap in 0 1; do
      [ "$v" = 1 ] && [ "$overlap" = 1 ] && continue  # 1F1B does not overlap (as Megatron)
      for m in 4 8 16; do
        # shellcheck disable=SC2086
        line=$("$BIN" --pp "$p" --vp "$v" --overlap "$overlap" --micro-batches "$m" $EXTRA)
        /usr/bin/python3 - "$line" <<'EOF'
import json, sys
r = json.loads(sys.argv[1])
j = lambda xs, f: " ".join(f.format(x) for x in xs)
print(f"| {r['pp']} | {r['vp']} | {'yes' if r['overlap'] else 'no'} | {r['microbatches']} | {r['bubble_theory']:.3f} "
      f"| {r['bubble_measured']:.3f} | {j(r['bubble_last_step_per_stage'], '{:.2f}')} | {r['ms_per_step']:.0f} "
      f"| {r['tokens_per_s']:.0f} | {j(r['peak_rss_mb_per_stage'], '{:.0f}')} "
      f"| {j(r['peak_tensor_mb_per_stage'], '{:.0f}')} |")
EOF
      done
    done
  done
done
echo "# end load: $(uptime | sed 's/.*load average: //')"
