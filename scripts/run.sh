#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, checks the
# machine, then trains the seed's SimpleCNN for 3 epochs on CIFAR-10 in
# ./data (a synthetic CIFAR-10 is written there when the real one is absent),
# data-parallel: `qk run` starts NPROC ranks (default 2) that train with DDP,
# restarts the group if a rank dies (up to 3 times) and the restarted ranks
# resume from the newest checkpoint. Each run writes runs/cifar10-<time>/.
# EPOCHS=N changes the epoch count, NPROC=N the ranks; other arguments go to
# `qk train cifar10`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh --qk  # qk and what it links; test.sh builds the rest
QK=./build/release/src/cli/qk
"$QK" check
nproc_per_node="${NPROC:-2}"
threads=$(( $(nproc) / nproc_per_node ))
(( threads >= 1 )) || threads=1
per_rank_batch=$(( 64 / nproc_per_node ))  # the seed's batch of 64, shared by the ranks
(( per_rank_batch >= 1 )) || per_rank_batch=1
out="runs/cifar10-$(date +%Y%m%d-%H%M%S)"
exec "$QK" run --nproc-per-node "$nproc_per_node" --max-restarts 3 -- \
  "$QK" train cifar10 --epochs "${EPOCHS:-3}" --batch-size "$per_rank_batch" --threads "$threads" \
  --out "$out" --resume --checkpoint-every 100 "$@"
