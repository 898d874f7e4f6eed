// conv2d on SimpleCNN's layers (batch 64, k3 p1): im2col+GEMM against
// oneDNN (blocked and plain layouts) and the per-shape choice qk makes
// (Note [Conv algorithm choice] in src/tensor/cpu/conv.h), forward and
// backward (dx, dw, db), and backward without dx as in a first layer.
//
//   build/release/bench/conv_bench --benchmark_counters_tabular=true
//   QK_NUM_THREADS=1 build/release/bench/conv_bench
//
// Before timing, every algorithm's result is checked against im2col's.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/conv.h"
#include "tensor/cpu/conv.h"
#include "tensor/cpu/onednn.h"

namespace {

using qk::Tensor;

struct Layer {
  int64_t c, o, hw;
};
// SimpleCNN: conv1 3->32 @32x32, conv2 32->64 @16x16, conv3 64->128 @8x8.
constexpr Layer kLayers[] = {{3, 32, 32}, {32, 64, 16}, {64, 128, 8}};
constexpr int64_t kBatch = 64;
enum Algo : int64_t { kIm2col, kOneDnnBlocked, kOneDnnPlain, kAuto };
const char* kAlgoNames[] = {"im2col", "onednn_blocked", "onednn_plain", "auto"};

struct Problem {
  Tensor x, w, b, dy;
  qk::Conv2dParams p;
  qk::cpu::ConvGeom g;
};

Problem make(const Layer& l) {
  qk::Generator gen(3);
  Problem pr;
  pr.x = qk::randn({kBatch, l.c, l.hw, l.hw}, {}, gen);
  pr.w = qk::randn({l.o, l.c, 3, 3}, {}, gen);
  pr.b = qk::randn({l.o}, {}, gen);
  pr.dy = qk::randn({kBatch, l.o, l.hw, l.hw}, {}, gen);
  pr.p.padding = {1, 1};
  pr.g = qk::cpu::conv_geom(pr.x, pr.w, pr.p);
  return pr;
}

Tensor forward(const Problem& pr, int64_t algo) {
  using qk::cpu::onednn::Layout;
  switch (algo) {
    case kIm2col: return qk::cpu::conv2d_forward_im2col(pr.x, pr.w, pr.b, pr.p);
    case kOneDnnBlocked: return qk::cpu::onednn::conv2d_forward(pr.x, pr.w, pr.b, pr.g, Layout::blocked);
    case kOneDnnPlain: return qk::cpu::onednn::conv2d_forward(pr.x, pr.w, pr.b, pr.g, Layout::plain);
    default: return qk::ops::conv2d(pr.x, pr.w, pr.b, pr.p);
  }
}

// need_dx = false is the first layer of a network (its input needs no gradient).
std::tuple<Tensor, Tensor, Tensor> backward(const Problem& pr, int64_t algo, bool need_dx) {
  using qk::cpu::onednn::Layout;
  switch (algo) {
    case kIm2col:
      return qk::cpu::conv2d_backward_im2col(pr.dy, pr.x, pr.w, pr.p, need_dx, true, true);
    case kOneDnnBlocked:
      return qk::cpu::onednn::conv2d_backward(pr.dy, pr.x, pr.w, pr.g, need_dx, true, true,
                                              Layout::blocked);
    case kOneDnnPlain:
      return qk::cpu::onednn::conv2d_backward(pr.dy, pr.x, pr.w, pr.g, need_dx, true, true,
                                              Layout::plain);
    default: return qk::ops::conv2d_backward(pr.dy, pr.x, pr.w, pr.p, need_dx, true, true);
  }
}

void expect_close(const Tensor& got, const Tensor& ref, const char* what, int64_t algo) {
  auto g = got.to_vector<float>(), r = ref.to_vector<float>();
  for (size_t i = 0; i < r.size(); ++i)
    if (std::fabs(g[i] - r[i]) > 1e-3f * (1.0f + std::fabs(r[i]))) {
      std::fprintf(stderr, "conv_bench: %s of %s differs from im2col at %zu: %g vs %g\n", what,
                   kAlgoNames[algo], i, g[i], r[i]);
      std::exit(1);
    }
}

void BM_conv(benchmark::State& st) {
  const Layer& l = kLayers[st.range(0)];
  const int64_t algo = st.range(1), phase = st.range(2);
  if (algo != kIm2col && !qk::cpu::onednn::available()) {
    st.SkipWithError("built without oneDNN");
    return;
  }
  Problem pr = make(l);
  double flops = 2.0 * kBatch * l.o * l.c * 9 * l.hw * l.hw;  // one GEMM's worth
  if (phase == 0) {
    expect_close(forward(pr, algo), forward(pr, kIm2col), "y", algo);
    for (auto _ : st) benchmark::DoNotOptimize(forward(pr, algo));
  } else {
    const bool need_dx = phase == 1;
    auto [dx, dw, db] = backward(pr, algo, need_dx);
    auto [rx, rw, rb] = backward(pr, kIm2col, need_dx);
    if (need_dx) expect_close(dx, rx, "dx", algo);
    expect_close(dw, rw, "dw", algo);
    expect_close(db, rb, "db", algo);
    for (auto _ : st) benchmark::DoNotOptimize(backward(pr, algo, need_dx));
    if (need_dx) flops *= 2;  // dx and dw
  }
  st.counters["GFLOPS"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["threads"] = qk::num_threads();
  const char* phases[] = {" fwd", " bwd", " bwd_w"};
  st.SetLabel(std::string(kAlgoNames[algo]) + phases[phase]);
}

// phase 0: forward; 1: backward (dx, dw, db); 2: backward without dx (conv1).
BENCHMARK(BM_conv)
    ->ArgNames({"layer", "algo", "phase"})
    ->ArgsProduct({{0, 1, 2}, {kIm2col, kOneDnnBlocked, kOneDnnPlain, kAuto}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
