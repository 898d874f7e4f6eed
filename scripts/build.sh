#!/usr/bin/env bash
# Configures and builds qianka (Release, Ninja) into build/release; installs
# what is missing first (scripts/setup.sh).
#   scripts/build.sh           everything: libraries, qk, tests, benchmarks, examples
#                              (setup.sh --tests: the tests' packages too)
#   scripts/build.sh --qk      only `qk` and the libraries it links (setup.sh: the
#                              main job's packages), as ./scripts/run.sh does
# Other arguments go to `cmake --build`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--qk" ]; then
  shift
  bash scripts/setup.sh
  cmake --preset release >/dev/null
  cmake --build --preset release --target qk "$@"
else
  bash scripts/setup.sh --tests
  cmake --preset release >/dev/null
  cmake --build --preset release "$@"
fi
