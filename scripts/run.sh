#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, checks the
# machine, then trains the seed's SimpleCNN for 3 epochs on CIFAR-10 in
# ./data (a synthetic CIFAR-10 is written there when the real one is absent).
# EPOCHS=N changes the epoch count; other arguments go to `qk train cifar10`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/release/src/cli/qk check
exec ./build/release/src/cli/qk train cifar10 --epochs "${EPOCHS:-3}" "$@"
