// Optimizer step throughput: the fused SGD-momentum and AdamW kernels over
// one large parameter and over SimpleCNN-like parameter lists. The peer is
// bench/optim_peer.py (torch.optim on the same sizes, same thread count).
//
//   build/release/bench/optim_bench --benchmark_counters_tabular=true
//   QK_NUM_THREADS=1 build/release/bench/optim_bench
//
// Before timing, one AdamW step is checked against the update written out
// in double precision. GB/s counts the bytes a step must move: SGD-momentum
// reads p, g, buf and writes p, buf (5 x 4 bytes per element); AdamW reads
// p, g, m, v and writes p, m, v (7 x 4 bytes).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "qk/optim/optim.h"
#include "qk/tensor/generator.h"

namespace {

using qk::Tensor;

std::vector<Tensor> make_params(const std::vector<qk::Shape>& shapes) {
  std::vector<Tensor> ps;
  qk::Generator g(1);
  for (const auto& s : shapes) {
    Tensor p = qk::randn(s, {}, g).requires_grad_();
    p.set_grad(qk::randn(s, {}, g));
    ps.push_back(p);
  }
  return ps;
}

int64_t total_numel(const std::vector<Tensor>& ps) {
  int64_t n = 0;
  for (const auto& p : ps) n += p.numel();
  return n;
}

// The seed's SimpleCNN: conv(3->32), conv(32->64), fc(4096->512), fc(512->10).
std::vector<qk::Shape> simple_cnn() {
  return {{32, 3, 3, 3}, {32}, {64, 32, 3, 3}, {64}, {512, 4096}, {512}, {10, 512}, {10}};
}

void check_adamw_once() {
  auto ps = make_params({{1000}});
  auto p0 = ps[0].to_vector<double>(), g = ps[0].grad().to_vector<double>();
  qk::optim::AdamW opt(ps, qk::optim::AdamWOptions(1e-3));
  opt.step();
  auto got = ps[0].to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) {
    double x = p0[i] * (1 - 1e-3 * 1e-2);
    double m = 0.1 * g[i], v = 0.001 * g[i] * g[i];
    x -= 1e-3 * (m / 0.1) / (std::sqrt(v / 0.001) + 1e-8);
    if (std::fabs(got[i] - x) > 1e-6 + 1e-5 * std::fabs(x)) {
      std::fprintf(stderr, "optim_bench: AdamW check failed at %zu: %g vs %g\n", i, got[i], x);
      std::exit(1);
    }
  }
}

template <typename Opt, typename Options>
void run(benchmark::State& state, const std::vector<qk::Shape>& shapes, Options o, int bytes_per_elem) {
  auto ps = make_params(shapes);
  Opt opt(ps, o);
  opt.step();  // allocate the state outside the timing
  for (auto _ : state) opt.step();
  const double n = static_cast<double>(total_numel(ps));
  state.counters["Melem"] = n / 1e6;
  state.counters["GB/s"] = benchmark::Counter(n * bytes_per_elem * static_cast<double>(state.iterations()),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void BM_SGDMomentum_10M(benchmark::State& s) {
  run<qk::optim::SGD>(s, {{10'000'000}}, qk::optim::SGDOptions(0.01).momentum(0.9), 20);
}
void BM_AdamW_10M(benchmark::State& s) {
  run<qk::optim::AdamW>(s, {{10'000'000}}, qk::optim::AdamWOptions(1e-3), 28);
}
void BM_SGDMomentum_SimpleCNN(benchmark::State& s) {
  run<qk::optim::SGD>(s, simple_cnn(), qk::optim::SGDOptions(0.01).momentum(0.9), 20);
}
void BM_AdamW_SimpleCNN(benchmark::State& s) {
  run<qk::optim::AdamW>(s, simple_cnn(), qk::optim::AdamWOptions(1e-3), 28);
}

BENCHMARK(BM_SGDMomentum_10M)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamW_10M)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SGDMomentum_SimpleCNN)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamW_SimpleCNN)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  check_adamw_once();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
