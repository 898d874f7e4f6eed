#!/usr/bin/env bash
# The soak test (not in CI): a 2-rank `qk pretrain-gpt` and a 2-rank
# `qk train cifar10`, each MINUTES minutes under `qk run --max-restarts`
# while bench/soak.py kills (SIGKILL, SIGTERM) or pauses (SIGSTOP/SIGCONT) a
# random rank every MEAN_GAP seconds on average; then each is compared with an
# uninterrupted run of the same steps (bit for bit), its checkpoints verified,
# its log checked for lost iterations, and a report written.
#
#   bench/soak.sh [MINUTES=60] [MEAN_GAP=60] [OUT=/tmp/qk_soak]
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-60}
GAP=${2:-60}
OUT=${3:-/tmp/qk_soak}
QK=${QK:-build/release/src/cli/qk}
[ -x "$QK" ] || { echo "soak.sh: $QK not built (scripts/build.sh)" >&2; exit 1; }
status=0
for w in gpt cifar; do
  python3 bench/soak.py --workload "$w" --minutes "$MINUTES" --mean-gap "$GAP" --qk "$QK" --out "$OUT/$w" || status=1
done
exit $status
