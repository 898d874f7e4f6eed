#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs the
# built-in default workload.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec ./build/release/qk check "$@"
