// The routed experts of one MoE layer, forward and backward: one grouped
// GEMM per projection (--moe-grouped-gemm, Megatron's GroupedMLP) against a
// loop of per-expert linear calls (SequentialMLP), at DeepSeek-toy sizes:
// hidden 512, 16 experts of width 256 / 704 / 1408, 4096 tokens routed top-2
// (8192 rows, uneven per expert as a random router gives them), plus a
// many-small-experts case (64 experts of width 256, 1024 tokens top-2: about
// 32 rows each) and a case with a new routing every step, as in training
// (new per-expert row counts each step).
//
//   build/release/bench/moe_grouped_gemm_bench --benchmark_counters_tabular=true
//   QK_NUM_THREADS=1 build/release/bench/moe_grouped_gemm_bench
//
// Counters, of the fastest iteration: GFLOPS (the experts' GEMMs: fc1, fc2
// and their dx and dW products, 2 M N K each) by wall time and by process
// CPU time divided by the threads ("cpu": the rate with the cores to
// ourselves on a shared machine). Both variants are checked equal first.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <vector>

#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/view.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {
namespace {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Elapsed {
  double wall = 1e300, cpu = 1e300;
};

// 16 (or `experts`) SwiGLU experts of width ffn over hidden 512.
TransformerConfig experts_config(int64_t experts, int64_t ffn, bool grouped) {
  TransformerConfig c;
  c.num_layers = 1;
  c.hidden_size = 512;
  c.num_attention_heads = 8;
  c.seq_length = 1024;
  c.vocab_size = 1024;
  c.set_swiglu();
  c.ffn_hidden_size = ffn;
  c.num_moe_experts = experts;
  c.moe_ffn_hidden_size = ffn;
  c.moe_router_topk = 2;
  c.moe_grouped_gemm = grouped;
  c.validate();
  return c;
}

// Rows per expert of `tokens` tokens routed top-2 by random scores.
std::vector<int64_t> random_routing(int64_t tokens, int64_t experts, uint64_t seed = 7) {
  Generator g(seed);
  const Tensor scores = randn({tokens, experts}, {}, g);
  const Tensor index = topk(scores, 2, 1).second;
  std::vector<int64_t> rows(static_cast<size_t>(experts), 0);
  for (int64_t i : index.to_vector<int64_t>()) ++rows[static_cast<size_t>(i)];
  return rows;
}

struct Case {
  Experts experts{nullptr};
  std::vector<int64_t> rows;
  Tensor x, grad;
  double flops = 0;
};

Case make_case(int64_t experts, int64_t ffn, int64_t tokens, DType dt, bool grouped) {
  Case c;
  const TransformerConfig config = experts_config(experts, ffn, grouped);
  manual_seed(1);
  c.experts = Experts(config);
  c.experts->to(dt);
  c.rows = random_routing(tokens, experts);
  Generator g(3);
  c.x = ops::cast(randn({2 * tokens, 512}, {}, g), dt).requires_grad_();
  c.grad = ops::cast(randn({2 * tokens, 512}, {}, g), dt);
  // fc1 [2F, C] and fc2 [C, F], each forward + dx + dW.
  c.flops = 3.0 * (2.0 * 2 * tokens * 512 * 2 * ffn + 2.0 * 2 * tokens * ffn * 512);
  return c;
}

void step(Case& c) {
  c.x.set_grad(Tensor());
  c.experts->zero_grad();
  c.experts->forward(c.x, c.rows).backward(c.grad);
}

// Grouped and loop must agree before either is timed.
void check_equal(int64_t experts, int64_t ffn, int64_t tokens, DType dt) {
  Case a = make_case(experts, ffn, tokens, dt, true), b = make_case(experts, ffn, tokens, dt, false);
  const Tensor ya = a.experts->forward(a.x, a.rows), yb = b.experts->forward(b.x, b.rows);
  const Tensor d = ops::cast(sub(ya, yb).detach(), DType::f32);
  const double err = amax(abs(d)).item<double>(), scale = amax(abs(yb.detach().to(DType::f32))).item<double>();
  QK_CHECK(err <= (dt == DType::bf16 ? 2e-2 : 1e-5) * scale, "grouped and loop experts differ: ", err, " of ", scale);
}

// reroute: a new random routing every step, as in training (new per-expert
// row counts: new GEMM shapes for the loop, the same tile shapes for the
// grouped GEMM, Note [Fixed bf16 shapes] in src/tensor/cpu/grouped_gemm.cc).
void BM_Experts(benchmark::State& st, int64_t experts, int64_t tokens, DType dt, bool grouped, bool reroute) {
  const int64_t ffn = st.range(0);
  static bool checked[2][2048] = {};
  bool& done = checked[dt == DType::bf16][ffn % 2048];
  if (!done) {
    check_equal(experts, ffn, tokens, dt);
    done = true;
  }
  Case c = make_case(experts, ffn, tokens, dt, grouped);
  step(c);  // warm-up: primitives, allocator
  Elapsed e;
  uint64_t seed = 100;
  for (auto _ : st) {
    if (reroute) c.rows = random_routing(tokens, experts, ++seed);
    const double c0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    step(c);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st.SetIterationTime(wall);
    e.wall = std::min(e.wall, wall);
    e.cpu = std::min(e.cpu, (process_cpu_seconds() - c0) / num_threads());
  }
  int64_t largest = 0, smallest = tokens;
  for (int64_t r : c.rows) largest = std::max(largest, r), smallest = std::min(smallest, r);
  st.counters["GFLOPS"] = c.flops / e.wall / 1e9;
  st.counters["cpuGFLOPS"] = c.flops / e.cpu / 1e9;
  st.counters["rows_min"] = static_cast<double>(smallest);
  st.counters["rows_max"] = static_cast<double>(largest);
  st.counters["threads"] = num_threads();
}

void register_all() {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (bool grouped : {true, false}) {
      const std::string suffix = std::string(dtype_name(dt)) + (grouped ? "/grouped" : "/loop");
      benchmark::RegisterBenchmark(("Experts16x4096/" + suffix).c_str(),
                                   [=](benchmark::State& st) { BM_Experts(st, 16, 4096, dt, grouped, false); })
          ->Arg(256)
          ->Arg(704)
          ->Arg(1408)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(1.0);
      benchmark::RegisterBenchmark(("Experts64x1024/" + suffix).c_str(),
                                   [=](benchmark::State& st) { BM_Experts(st, 64, 1024, dt, grouped, false); })
          ->Arg(256)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(1.0);
      benchmark::RegisterBenchmark(("Experts16x4096Rerouted/" + suffix).c_str(),
                                   [=](benchmark::State& st) { BM_Experts(st, 16, 4096, dt, grouped, true); })
          ->Arg(704)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(2.0);
    }
  }
}

}  // namespace
}  // namespace qk::transformer

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  qk::transformer::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
