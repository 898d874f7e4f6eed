#!/usr/bin/env bash
# The README's test command: installs what is missing (the tests' packages
# too), builds everything, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --preset release --no-tests=error "$@"
