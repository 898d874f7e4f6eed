#!/usr/bin/env bash
# The extension kit end to end, as a user meets it: install qianka into a
# prefix, build examples/extension out of tree against it (find_package,
# qk_add_extension, with nvcc where it is found), check the op (forward
# against built-in ops, backward with gradcheck), list it with the installed
# `qk` through QK_EXTENSIONS, and check that a CUDA source without a CUDA
# compiler stops the configure with a clear message.
#   check_extension.sh BUILD_DIR SOURCE_DIR [CXX_FLAGS]
set -euo pipefail
build_dir=$1
src_dir=$2
cxx_flags=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
step() { echo "[$((SECONDS))s] $*"; }

step "cmake --install"
cmake --install "$build_dir" --prefix "$tmp/prefix" > "$tmp/install.log"
step "configure examples/extension"
extra=()
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  extra+=(-DMY_OPS_FORCE_CUDA=ON)  # every source through nvcc as well (force_mcc)
fi
cmake -S "$src_dir/examples/extension" -B "$tmp/ext" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_CXX_FLAGS="$cxx_flags" "${extra[@]}" \
  > "$tmp/configure.log" 2>&1 \
  || { cat "$tmp/configure.log"; exit 1; }
grep "my_ops:" "$tmp/configure.log"
step "build"
cmake --build "$tmp/ext" > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
if grep -q "warning" "$tmp/build.log"; then cat "$tmp/build.log"; echo "warnings in the example"; exit 1; fi
step "run my_ops_test"
"$tmp/ext/my_ops_test" "$tmp/ext/libmy_ops.so"
cuda_built=false
grep -q "CUDA kernels built" "$tmp/configure.log" && cuda_built=true
if $cuda_built; then
  test -f "$tmp/ext/libmy_ops_nvcc.so" || { echo "FORCE_CUDA library not built"; exit 1; }
  step "run my_ops_test on the FORCE_CUDA (all-nvcc) build"
  "$tmp/ext/my_ops_test" "$tmp/ext/libmy_ops_nvcc.so" | tail -1
fi
step "qk ops with QK_EXTENSIONS"
QK_EXTENSIONS="$tmp/ext/libmy_ops.so" "$tmp/prefix/bin/qk" ops | tee "$tmp/ops.log"
grep -q "my_ops::fused_bias_gelu(Tensor x, Tensor bias) -> Tensor" "$tmp/ops.log"
want_kernels="kernels: cpu; backward: yes"
$cuda_built && want_kernels="kernels: cpu, cuda; backward: yes"
grep -q "$want_kernels" "$tmp/ops.log" || { echo "expected '$want_kernels'"; exit 1; }

step "a .cu source without a CUDA compiler"
mkdir -p "$tmp/nocuda"
cat > "$tmp/nocuda/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(nocuda LANGUAGES CXX)
find_package(qianka REQUIRED)
qk_add_extension(bad_ops SOURCES op.cc op_kernel.cu)
CMAKE
touch "$tmp/nocuda/op.cc" "$tmp/nocuda/op_kernel.cu"
if cmake -S "$tmp/nocuda" -B "$tmp/nocuda/build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
     -DCMAKE_CUDA_COMPILER=NOTFOUND > "$tmp/nocuda.log" 2>&1; then
  echo "configure succeeded without a CUDA compiler"; exit 1
fi
grep -q "qk_add_extension(bad_ops): op_kernel.cu: CUDA source(s), but no CUDA compiler (nvcc) was found" \
  <(tr -s ' \n' ' ' < "$tmp/nocuda.log") || { cat "$tmp/nocuda.log"; exit 1; }
step "extension check: ok"
