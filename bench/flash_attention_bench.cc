// flash_attention against the unfused composition built from qk's own ops
// (matmul, masked softmax, matmul: the T x S scores and probabilities stored),
// forward and forward+backward, at GPT-2 small (B=4, T=64, H=12, D=64) and
// Llama-practice (B=1..4, T=1024, H=8, D=64) shapes, f32 and bf16, causal.
// BM_ForwardBackwardDropout adds attention dropout 0.1 (flash only).
// BM_PeakMemory reports the tensor high-water mark of one forward+backward at
// T = 512, 1024, 2048 (MB), flash and unfused. Each shape is checked once
// (flash vs unfused) before it is timed. The PyTorch peer is
// bench/flash_attention_peer.py; bench/flash_attention_compare.sh runs both.
//
//   QK_NUM_THREADS=2 build/release/bench/flash_attention_bench --benchmark_min_time=0.5
//
// Args: B, T, H, D, dtype (0 f32, 1 bf16), impl (0 flash, 1 unfused).
// GFLOP/s counts the causal half: forward 2 * B*H*T*T*D, backward 2.5x that.
#include <benchmark/benchmark.h>

#include <cmath>
#include <map>

#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/llm_ops.h"
#include "qk/base/error.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"

namespace qk {
namespace {

Tensor causal_hide(int64_t T, int64_t S) {
  std::vector<bool> hide(static_cast<size_t>(T * S));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < S; ++s) hide[t * S + s] = s > t + S - T;
  return from_vector<bool>(hide, {T, S});
}

// The textbook composition, in the layout flash_attention takes.
Tensor unfused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& hide) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  Tensor s = matmul(q.permute({0, 2, 1, 3}), k.permute({0, 2, 3, 1})) * scale;
  Tensor p = softmax(masked_fill(s, hide, -INFINITY), -1);
  return matmul(p.to(q.dtype()), v.permute({0, 2, 1, 3})).permute({0, 2, 1, 3}).contiguous();
}

struct Case {
  Tensor q, k, v, dout, hide;
  DType dt;
};

Case make_case(int64_t B, int64_t T, int64_t H, int64_t D, bool bf16) {
  Generator g(1);
  Case c;
  c.dt = bf16 ? DType::bf16 : DType::f32;
  c.q = randn({B, T, H, D}, {}, g).to(c.dt).requires_grad_();
  c.k = randn({B, T, H, D}, {}, g).to(c.dt).requires_grad_();
  c.v = randn({B, T, H, D}, {}, g).to(c.dt).requires_grad_();
  c.dout = randn({B, T, H, D}, {}, g).to(c.dt);
  c.hide = causal_hide(T, T);
  return c;
}

Tensor run(const Case& c, bool flash, bool backward) {
  // bf16 unfused as PyTorch's autocast runs it: bf16 matmuls, f32 softmax.
  autocast::Guard amp(DType::bf16, !flash && c.dt == DType::bf16);
  Tensor out = flash ? flash_attention(c.q, c.k, c.v) : unfused(c.q, c.k, c.v, c.hide);
  if (backward) out.backward(c.dout);
  return out;
}

// flash vs unfused on this case, once per shape.
void check_once(const Case& c) {
  static std::map<std::vector<int64_t>, bool> done;
  std::vector<int64_t> key = c.q.shape();
  key.push_back(static_cast<int64_t>(c.dt));
  if (done[key]) return;
  done[key] = true;
  Tensor a = run(c, true, false).to(DType::f32), b = run(c, false, false).to(DType::f32);
  const double err = amax(abs(a - b)).item<double>();
  const double tol = c.dt == DType::f32 ? 1e-4 : 5e-2;
  QK_CHECK(err < tol, "flash_attention differs from the unfused composition by ", err);
}

void BM_Attention(benchmark::State& st, bool backward) {
  const int64_t B = st.range(0), T = st.range(1), H = st.range(2), D = st.range(3);
  const bool bf16 = st.range(4) == 1, flash = st.range(5) == 0;
  Case c = make_case(B, T, H, D, bf16);
  check_once(c);
  for (auto _ : st) {
    Tensor out = run(c, flash, backward);
    benchmark::DoNotOptimize(out.raw_data());
    if (backward)
      for (Tensor* t : {&c.q, &c.k, &c.v}) t->set_grad(Tensor());
  }
  const double flops = 2.0 * B * H * T * T * D * (backward ? 3.5 : 1.0);
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(std::string(flash ? "flash" : "unfused") + (bf16 ? " bf16" : " f32"));
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int64_t dt : {0, 1})
    for (int64_t impl : {0, 1}) {
      b->Args({4, 64, 12, 64, dt, impl});
      for (int64_t batch : {1, 2, 4}) b->Args({batch, 1024, 8, 64, dt, impl});
    }
}

void BM_Forward(benchmark::State& st) { BM_Attention(st, false); }
void BM_ForwardBackward(benchmark::State& st) { BM_Attention(st, true); }
BENCHMARK(BM_Forward)->Apply(shapes)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();
BENCHMARK(BM_ForwardBackward)->Apply(shapes)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();

// Attention dropout (p = 0.1, Megatron's default) costs a Philox draw per
// probability, in the forward and again in the backward.
void BM_ForwardBackwardDropout(benchmark::State& st) {
  Case c = make_case(st.range(0), st.range(1), st.range(2), st.range(3), st.range(4) == 1);
  Generator gen(3);
  for (auto _ : st) {
    Tensor out = flash_attention(c.q, c.k, c.v, {.dropout_p = 0.1, .training = true, .generator = &gen});
    out.backward(c.dout);
    benchmark::DoNotOptimize(out.raw_data());
    for (Tensor* t : {&c.q, &c.k, &c.v}) t->set_grad(Tensor());
  }
  st.SetLabel(st.range(4) == 1 ? "flash bf16 dropout 0.1" : "flash f32 dropout 0.1");
}
BENCHMARK(BM_ForwardBackwardDropout)
    ->ArgsProduct({{1}, {1024}, {8}, {64}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// Tensor high-water mark of one forward+backward above the inputs (MB).
void BM_PeakMemory(benchmark::State& st) {
  const int64_t T = st.range(0);
  const bool flash = st.range(1) == 0;
  Case c = make_case(1, T, 8, 64, false);
  double peak_mb = 0;
  for (auto _ : st) {
    const uint64_t base = memory_stats(kCPU).allocated;
    reset_peak_memory(kCPU);
    Tensor out = run(c, flash, true);
    peak_mb = static_cast<double>(memory_stats(kCPU).peak_allocated - base) / 1e6;
    for (Tensor* t : {&c.q, &c.k, &c.v}) t->set_grad(Tensor());
  }
  st.counters["peak_MB"] = peak_mb;
  st.SetLabel(flash ? "flash" : "unfused");
}
BENCHMARK(BM_PeakMemory)
    ->ArgsProduct({{512, 1024, 2048}, {0, 1}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace qk

BENCHMARK_MAIN();
