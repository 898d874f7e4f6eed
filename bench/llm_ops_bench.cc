// The kernels of a GPT/Llama training step other than attention, at the
// sizes of the GPT pre-training benchmarks: every GEMM of GPT-2 124M at 256 tokens per
// step (forward, dx, dW; f32 and bf16) against the GEMM peak `qk check`
// measures, the fused output layer + cross entropy against the unfused one,
// rotary embedding, SwiGLU, layer/RMS norm and AdamW over 124M parameters.
// The PyTorch peer for the same shapes is bench/llm_ops_peer.py;
// bench/llm_ops_compare.sh runs both in one go.
//
//   build/release/bench/llm_ops_bench --benchmark_counters_tabular=true
//   QK_NUM_THREADS=1 build/release/bench/llm_ops_bench --benchmark_filter=Gemm
//   bench/llm_ops_compare.sh     # with the PyTorch peer, 1 and 2 threads
//
// Counters (of the fastest iteration, as the peer reports its best round):
// GFLOPS (2 M N K per product), %peak (of the f32 1024^3 product measured at
// start-up as `qk check` does: the median of 5), GB/s (bytes each op must
// move); the "cpu" ones by CPU time.
// A bf16 GEMM's label is the kernel oneDNN picked for it ("brg:avx512_core_bf16"
// or an AMX one; "f32 fallback" on CPUs without native bf16).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <string>
#include <vector>

#include "qk/autograd/functions.h"
#include "qk/autograd/llm_ops.h"
#include "qk/base/error.h"
#include "qk/base/thread_pool.h"
#include "qk/optim/optim.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/tensor/ops/llm.h"
#include "qk/tensor/ops/norm.h"
#include "qk/tensor/ops/view.h"
#include "tensor/cpu/onednn_matmul.h"

namespace qk {
namespace {

// ---- timing: wall clock, and process CPU time for a shared machine ----

// On a machine other jobs share, wall time measures the neighbours too. The
// process's CPU time divided by the thread count estimates the wall time
// with the cores to ourselves (oneDNN's OpenMP team and qk's pool wait
// passively, so idle threads burn no CPU); the "cpu" counters use it.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The fastest single call by each clock, as the peer takes the best of its
// rounds (a loaded machine only ever slows a call down).
struct Elapsed {
  double wall = 1e300, cpu = 1e300;  // seconds; cpu already divided by the thread count
};

// Times f() once into `e`.
template <typename F>
void timed(Elapsed& e, F&& f) {
  const double c0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  e.wall = std::min(e.wall,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  e.cpu = std::min(e.cpu, (process_cpu_seconds() - c0) / num_threads());
}

// ---- the GEMM peak, as `qk check` measures it (and by CPU time) ----

struct Peak {
  double wall = 0, cpu = 0;  // GFLOP/s
};

// A 1024^3 product in `dt`: the median of 5 after a warm-up, as `qk check`.
Peak peak_gflops(DType dt) {
  const int64_t n = 1024;
  Tensor p = ops::cast(randn({n, n}), dt), q = ops::cast(randn({n, n}), dt);
  ops::mm(p, q);
  std::vector<double> walls, cpus;
  for (int i = 0; i < 5; ++i) {
    Elapsed e;  // one call
    timed(e, [&] { ops::mm(p, q); });
    walls.push_back(e.wall);
    cpus.push_back(e.cpu);
  }
  std::sort(walls.begin(), walls.end());
  std::sort(cpus.begin(), cpus.end());
  const double flops = 2.0 * n * n * n;
  return {flops / walls[2] / 1e9, flops / cpus[2] / 1e9};
}

const Peak& f32_peak() {
  static const Peak peak = peak_gflops(DType::f32);
  return peak;
}

// ---- GPT-2 124M GEMMs at 256 tokens (hidden 768, ffn 3072, vocab 50257) ----

constexpr int64_t kTokens = 256, kHidden = 768, kFfn = 3072, kVocab = 50257, kLayers = 12;

// A linear layer y = x W^T (W [out, in]) and its two backward products.
struct Linear {
  const char* name;
  int64_t in, out;
  int64_t count;  // per training step
};
const Linear kLinears[] = {{"qkv", kHidden, 3 * kHidden, kLayers},
                           {"attn_proj", kHidden, kHidden, kLayers},
                           {"fc1", kHidden, kFfn, kLayers},
                           {"fc2", kFfn, kHidden, kLayers},
                           {"lm_head", kHidden, kVocab, 1}};

enum class Product { fwd, dx, dw };
const char* product_name(Product p) {
  return p == Product::fwd ? "fwd" : p == Product::dx ? "dx" : "dw";
}

// The operands of one product, laid out as linear() and LinearBackward use
// them: fwd = linear(x, W) (x . W^T), dx = mm(g, W), dw = mm(g^T, x).
struct GemmCase {
  Tensor x, w, g;
  Product p;
  int64_t m, n, k;
  Tensor run() const {
    switch (p) {
      case Product::fwd: return ops::linear(x, w, Tensor());
      case Product::dx: return ops::mm(g, w);
      case Product::dw: return ops::mm(g.t(), x);
    }
    return Tensor();
  }
  // oneDNN's kernel for a bf16 product (the layouts gemm.cc hands it).
  std::string kernel() const {
    if (x.dtype() != DType::bf16) return "";
    if (!cpu::onednn::has_bf16_matmul()) return "f32 fallback";
    cpu::onednn::MatmulShape s{p == Product::dw, p == Product::fwd, m, n, k, DType::bf16,
                               DType::bf16};
    const int64_t lda = p == Product::dw ? m : k, ldb = p == Product::fwd ? k : n;
    return cpu::onednn::matmul_impl(s, lda, ldb, n);
  }
};

GemmCase make_case(const Linear& l, Product p, DType dt, Generator& g) {
  GemmCase c;
  c.x = ops::cast(randn({kTokens, l.in}, {}, g), dt);
  c.w = ops::cast(mul(randn({l.out, l.in}, {}, g), 0.02), dt);
  c.g = ops::cast(randn({kTokens, l.out}, {}, g), dt);
  c.p = p;
  if (p == Product::fwd) c.m = kTokens, c.n = l.out, c.k = l.in;
  if (p == Product::dx) c.m = kTokens, c.n = l.in, c.k = l.out;
  if (p == Product::dw) c.m = l.out, c.n = l.in, c.k = kTokens;
  return c;
}

// GFLOPS and %peak of the fastest iteration (excluding the benchmark loop's
// own work), by wall clock and by CPU time.
void set_gemm_counters(benchmark::State& st, double flops, const Elapsed& e) {
  st.counters["GFLOPS"] = flops / e.wall / 1e9;
  st.counters["%peak"] = 100.0 * flops / e.wall / 1e9 / f32_peak().wall;
  st.counters["cpuGFLOPS"] = flops / e.cpu / 1e9;
  st.counters["%peak_cpu"] = 100.0 * flops / e.cpu / 1e9 / f32_peak().cpu;
}

void BM_Gemm(benchmark::State& st, const Linear& l, Product p, DType dt) {
  Generator g(1);
  GemmCase c = make_case(l, p, dt, g);
  // Check once: the product equals f32's on the same inputs.
  Tensor ref = GemmCase{ops::cast(c.x, DType::f32), ops::cast(c.w, DType::f32),
                        ops::cast(c.g, DType::f32), p, c.m, c.n, c.k}.run();
  Tensor got = ops::cast(c.run(), DType::f32);
  const double err = amax(abs(sub(got, ref))).item<double>(), scale = amax(abs(ref)).item<double>();
  QK_CHECK(err <= 1e-2 * scale, "llm_ops_bench: ", l.name, " ", product_name(p), " off by ", err);
  Elapsed total;
  for (auto _ : st) timed(total, [&] { benchmark::DoNotOptimize(c.run().raw_data()); });
  const double flops = 2.0 * c.m * c.n * c.k;
  set_gemm_counters(st, flops, total);
  st.counters["per_step"] = static_cast<double>(l.count);
  st.SetLabel(c.kernel());
}

// Every GEMM of one training step (12 layers x 4 linears x 3 products and
// the output layer's 3), one after another: the figure the goal of >= 60%
// of the GEMM peak is about, for the GEMM part of a step.
void BM_GptStepGemms(benchmark::State& st, DType dt, bool with_lm_head) {
  Generator g(2);
  std::vector<std::pair<GemmCase, int64_t>> cases;
  double flops = 0;
  for (const Linear& l : kLinears) {
    if (!with_lm_head && l.out == kVocab) continue;
    for (Product p : {Product::fwd, Product::dx, Product::dw}) {
      cases.push_back({make_case(l, p, dt, g), l.count});
      flops += 2.0 * cases.back().first.m * cases.back().first.n * cases.back().first.k * l.count;
    }
  }
  for (const auto& [c, count] : cases) c.run();  // warm-up: primitives, allocator cache
  Elapsed total;
  for (auto _ : st)
    timed(total, [&] {
      for (const auto& [c, count] : cases)
        for (int64_t i = 0; i < count; ++i) benchmark::DoNotOptimize(c.run().raw_data());
    });
  set_gemm_counters(st, flops, total);
}

// ---- the output layer + cross entropy (GPT-2: 256 x 768 x 50257) ----

void BM_LinearCrossEntropy(benchmark::State& st, DType dt, bool fused) {
  Generator g(3);
  Tensor h = ops::cast(randn({kTokens, kHidden}, {}, g), dt).requires_grad_();
  Tensor w = ops::cast(mul(randn({kVocab, kHidden}, {}, g), 0.02), dt).requires_grad_();
  std::vector<int64_t> t(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) t[i] = (i * 7919) % kVocab;
  Tensor target = from_vector<int64_t>(t, {kTokens});
  Tensor tw = full({kTokens}, 1.0 / kTokens);
  auto step = [&] {
    h.set_grad(Tensor());
    w.set_grad(Tensor());
    Tensor loss =
        fused ? linear_cross_entropy(h, w, target, tw)
              : sum(mul(cross_entropy(linear(h, w), target, -100, 0.0, Reduction::none).to(
                            DType::f32),
                        tw));
    loss.backward();
    return loss;
  };
  step();  // warm-up: primitives, and the allocator's cache of the large blocks
  Elapsed total;
  for (auto _ : st) timed(total, [&] { benchmark::DoNotOptimize(step().raw_data()); });
  const double flops = 3 * 2.0 * kTokens * kHidden * kVocab;
  set_gemm_counters(st, flops, total);
}

// ---- elementwise fused ops and norms: bytes moved per forward + backward ----

void set_bytes(benchmark::State& st, double bytes, const Elapsed& e) {
  st.counters["GB/s"] = bytes / e.wall / 1e9;
  st.counters["cpuGB/s"] = bytes / e.cpu / 1e9;
}

// The seed's Llama practice model: 4 x 1024 tokens, 8 heads of 64, hidden 512.
constexpr int64_t kLlamaBatch = 4, kLlamaSeq = 1024, kLlamaHeads = 8, kHeadDim = 64;

void BM_Rotary(benchmark::State& st, DType dt) {
  Generator g(4);
  Tensor x = ops::cast(randn({kLlamaBatch, kLlamaSeq, kLlamaHeads, kHeadDim}, {}, g), dt);
  Tensor cos = randn({kLlamaSeq, kHeadDim}, {}, g), sin = randn({kLlamaSeq, kHeadDim}, {}, g);
  Elapsed e;
  for (auto _ : st)
    timed(e, [&] {
      Tensor y = ops::rotary_embedding(x, cos, sin);
      benchmark::DoNotOptimize(ops::rotary_embedding_backward(y, cos, sin).raw_data());
    });
  set_bytes(st, 4.0 * x.nbytes(), e);  // read x, write y; read dy, write dx
}

void BM_Swiglu(benchmark::State& st, DType dt) {
  Generator g(5);
  const int64_t F = st.range(0);
  Tensor x = ops::cast(randn({kLlamaBatch * kLlamaSeq, 2 * F}, {}, g), dt);
  Tensor dy = ops::cast(randn({kLlamaBatch * kLlamaSeq, F}, {}, g), dt);
  Elapsed e;
  for (auto _ : st)
    timed(e, [&] {
      benchmark::DoNotOptimize(ops::swiglu(x).raw_data());
      benchmark::DoNotOptimize(ops::swiglu_backward(dy, x).raw_data());
    });
  set_bytes(st, 1.5 * x.nbytes() + 2.5 * x.nbytes(), e);  // fwd: x, y; bwd: dy, x, dx
}

void BM_Norm(benchmark::State& st, DType dt, bool rms) {
  Generator g(6);
  const int64_t N = st.range(0), C = st.range(1);
  Tensor x = ops::cast(randn({N, C}, {}, g), dt), dy = ops::cast(randn({N, C}, {}, g), dt);
  Tensor w = ones({C}), b = zeros({C});
  Elapsed e;
  for (auto _ : st)
    timed(e, [&] {
      if (rms) {
        auto [y, rstd] = ops::rms_norm(x, {C}, w, 1e-5);
        benchmark::DoNotOptimize(ops::rms_norm_backward(dy, x, {C}, rstd, w).first.raw_data());
      } else {
        auto [y, mean, rstd] = ops::layer_norm(x, {C}, w, b, 1e-5);
        benchmark::DoNotOptimize(
            std::get<0>(ops::layer_norm_backward(dy, x, {C}, mean, rstd, w)).raw_data());
      }
    });
  set_bytes(st, 5.0 * x.nbytes(), e);  // fwd: x, y; bwd: dy, x, dx
}

// ---- AdamW over GPT-2 124M's parameters ----

std::vector<Shape> gpt2_parameter_shapes() {
  std::vector<Shape> s{{kVocab, kHidden}, {1024, kHidden}};
  for (int64_t l = 0; l < kLayers; ++l) {
    for (Shape p : std::vector<Shape>{{kHidden},
                                      {kHidden},
                                      {3 * kHidden, kHidden},
                                      {3 * kHidden},
                                      {kHidden, kHidden},
                                      {kHidden},
                                      {kHidden},
                                      {kHidden},
                                      {kFfn, kHidden},
                                      {kFfn},
                                      {kHidden, kFfn},
                                      {kHidden}})
      s.push_back(p);
  }
  s.push_back({kHidden});
  s.push_back({kHidden});
  return s;
}

void BM_AdamW124M(benchmark::State& st) {
  Generator g(7);
  std::vector<Tensor> ps;
  double n = 0;
  for (const Shape& s : gpt2_parameter_shapes()) {
    Tensor p = mul(randn(s, {}, g), 0.02).requires_grad_();
    p.set_grad(mul(randn(s, {}, g), 1e-3));
    n += static_cast<double>(p.numel());
    ps.push_back(p);
  }
  optim::AdamW opt(ps, optim::AdamWOptions(6e-4).weight_decay(0.1));
  opt.step();  // the state is allocated outside the timing
  Elapsed e;
  for (auto _ : st) timed(e, [&] { opt.step(); });
  st.counters["Mparams"] = n / 1e6;
  set_bytes(st, 7 * 4 * n, e);  // reads p, g, m, v; writes p, m, v (f32)
}

void register_all() {
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::string d = dtype_name(dt);
    for (const Linear& l : kLinears)
      for (Product p : {Product::fwd, Product::dx, Product::dw})
        benchmark::RegisterBenchmark(
            ("Gemm/" + std::string(l.name) + "_" + product_name(p) + "/" + d).c_str(),
            [&l, p, dt](benchmark::State& st) { BM_Gemm(st, l, p, dt); })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    for (bool lm : {false, true})
      benchmark::RegisterBenchmark(
          ("GptStepGemms/" + std::string(lm ? "with_lm_head" : "blocks") + "/" + d).c_str(),
          [dt, lm](benchmark::State& st) { BM_GptStepGemms(st, dt, lm); })
          ->Iterations(3)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    for (bool fused : {true, false})
      benchmark::RegisterBenchmark(
          ("LinearCrossEntropy/" + std::string(fused ? "fused" : "unfused") + "/" + d).c_str(),
          [dt, fused](benchmark::State& st) { BM_LinearCrossEntropy(st, dt, fused); })
          ->Iterations(4)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    benchmark::RegisterBenchmark(("Rotary/" + d).c_str(),
                                 [dt](benchmark::State& st) { BM_Rotary(st, dt); })
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("Swiglu/" + d).c_str(),
                                 [dt](benchmark::State& st) { BM_Swiglu(st, dt); })
        ->Arg(1408)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    for (bool rms : {false, true})
      benchmark::RegisterBenchmark(((rms ? "RmsNorm/" : "LayerNorm/") + d).c_str(),
                                   [dt, rms](benchmark::State& st) { BM_Norm(st, dt, rms); })
          ->Args({4096, 512})
          ->Args({4096, 768})
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
  }
  benchmark::RegisterBenchmark("AdamW124M/f32", BM_AdamW124M)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

}  // namespace
}  // namespace qk

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  qk::register_all();
  const qk::Peak bf16 = qk::peak_gflops(qk::DType::bf16);
  std::printf(
      "GEMM peak 1024^3 (as qk check), %d threads: f32 %.1f GFLOP/s (by CPU time %.1f), bf16 "
      "%.1f (%.1f)\n",
      qk::num_threads(), qk::f32_peak().wall, qk::f32_peak().cpu, bf16.wall, bf16.cpu);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
