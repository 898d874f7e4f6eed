#!/usr/bin/env bash
# Configures and builds qianka (Release, Ninja) into build/. Runs setup first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release "$@"
