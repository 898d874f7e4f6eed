// The host time of one op: tensors of one element (or 8 x 8), so that the
// kernel is nothing and what is timed is the framework: dispatch, the new
// tensor's allocation, shape and dtype checks, the autograd record. On a GPU
// this is the time the host needs to launch each kernel; a training step of
// small kernels is host-bound when it exceeds the kernels' time (the first
// GPU run: ResNet inference at batch 1 was 95% host time). The PyTorch peer
// for the same ops is bench/op_overhead_peer.py.
//
//   QK_NUM_THREADS=1 build/release/bench/op_overhead_bench --benchmark_min_time=0.3
#include <benchmark/benchmark.h>

#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

// a + b on one element, no autograd.
void BM_AddNoGrad(benchmark::State& st) {
  NoGradGuard off;
  Tensor a = ones({1}), b = ones({1});
  QK_CHECK((a + b).item<float>() == 2.0f, "add");
  for (auto _ : st) {
    Tensor c = a + b;
    benchmark::DoNotOptimize(c.raw_data());
  }
}
BENCHMARK(BM_AddNoGrad)->Unit(benchmark::kMicrosecond);

// a * 2 (a scalar operand) on one element, no autograd.
void BM_MulScalarNoGrad(benchmark::State& st) {
  NoGradGuard off;
  Tensor a = ones({1});
  for (auto _ : st) {
    Tensor c = a * 2.0;
    benchmark::DoNotOptimize(c.raw_data());
  }
}
BENCHMARK(BM_MulScalarNoGrad)->Unit(benchmark::kMicrosecond);

// a + b recorded for backward (a requires grad).
void BM_AddRecorded(benchmark::State& st) {
  Tensor a = ones({1}).requires_grad_(), b = ones({1});
  for (auto _ : st) {
    Tensor c = a + b;
    benchmark::DoNotOptimize(c.raw_data());
  }
}
BENCHMARK(BM_AddRecorded)->Unit(benchmark::kMicrosecond);

// A view and a copy: x.transpose(0, 1).contiguous() on 8 x 8, no autograd.
void BM_TransposeContiguous(benchmark::State& st) {
  NoGradGuard off;
  Tensor x = randn({8, 8});
  for (auto _ : st) {
    Tensor y = x.transpose(0, 1).contiguous();
    benchmark::DoNotOptimize(y.raw_data());
  }
}
BENCHMARK(BM_TransposeContiguous)->Unit(benchmark::kMicrosecond);

// linear(x [8, 8], w [8, 8], b [8]), no autograd.
void BM_LinearNoGrad(benchmark::State& st) {
  NoGradGuard off;
  Tensor x = randn({8, 8}), w = randn({8, 8}), b = randn({8});
  for (auto _ : st) {
    Tensor y = linear(x, w, b);
    benchmark::DoNotOptimize(y.raw_data());
  }
}
BENCHMARK(BM_LinearNoGrad)->Unit(benchmark::kMicrosecond);

// A small MLP's forward and backward: linear, relu, linear, sum, then
// backward (about 12 kernels); what a step of tiny layers costs the host.
void BM_MlpForwardBackward(benchmark::State& st) {
  Tensor x = randn({8, 8});
  Tensor w1 = randn({8, 8}).requires_grad_(), b1 = randn({8}).requires_grad_();
  Tensor w2 = randn({8, 8}).requires_grad_(), b2 = randn({8}).requires_grad_();
  for (auto _ : st) {
    Tensor loss = sum(linear(relu(linear(x, w1, b1)), w2, b2));
    loss.backward();
    w1.set_grad(Tensor());
    b1.set_grad(Tensor());
    w2.set_grad(Tensor());
    b2.set_grad(Tensor());
  }
}
BENCHMARK(BM_MlpForwardBackward)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace qk

BENCHMARK_MAIN();
