#!/usr/bin/env bash
# `cmake --install` gives headers, libraries, `qk` and find_package(qianka):
# install the build tree into a temporary prefix and build a consumer with it.
set -euo pipefail
build_dir=$1
src_dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build_dir" --prefix "$tmp/prefix" > "$tmp/install.log"
test -x "$tmp/prefix/bin/qk" || { echo "qk not installed"; exit 1; }
"$tmp/prefix/bin/qk" --version
test -f "$tmp/prefix/include/qk/tensor/tensor.h" || { echo "headers not installed"; exit 1; }
# The config asks consumers only for what the libraries use (spdlog was dropped).
if grep -rl spdlog "$tmp/prefix/lib"*/cmake/qianka; then echo "installed config still names spdlog"; exit 1; fi
cmake -S "$src_dir/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/consumer" > "$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
"$tmp/consumer/consumer"
"$tmp/consumer/consumer_tensor_only"
if [ -x "$tmp/consumer/consumer_nccl" ]; then "$tmp/consumer/consumer_nccl"; fi
if [ -x "$tmp/consumer/consumer_cuda" ]; then "$tmp/consumer/consumer_cuda"; fi
echo "install check: ok"
