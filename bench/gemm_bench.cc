// GEMM GFLOPS: qk::ops::mm against raw cblas_sgemm on the same buffers, in
// the same run. Goal: qk within 10% of OpenBLAS.
//
//   build/release/bench/gemm_bench --benchmark_counters_tabular=true
//   QK_NUM_THREADS=1 build/release/bench/gemm_bench   (one thread for both)
//
// Before timing, each size checks that qk's product equals sgemm's.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/linalg.h"
#include "tensor/cpu/gemm.h"

namespace {

using qk::Tensor;

struct Operands {
  Tensor a, b;  // [M,K], [K,N]: contiguous, or transposed views of contiguous storage
  int64_t m, n, k;
  bool ta, tb;
};

// trans bit 0: a is the transpose of a contiguous [K,M]; bit 1: b of a [N,K].
Operands make(int64_t m, int64_t n, int64_t k, int64_t trans) {
  qk::Generator g(42);
  bool ta = trans & 1, tb = trans & 2;
  Tensor a = ta ? qk::randn({k, m}, {}, g).t() : qk::randn({m, k}, {}, g);
  Tensor b = tb ? qk::randn({n, k}, {}, g).t() : qk::randn({k, n}, {}, g);
  return {a, b, m, n, k, ta, tb};
}

// OpenBLAS with its own threads, as many as qk's pool has. qk itself runs
// OpenBLAS single-threaded and splits on its pool (Note [One thread pool]);
// this scope gives the raw calls OpenBLAS's native threading.
struct OpenBlasThreads {
  OpenBlasThreads() { openblas_set_num_threads(qk::num_threads()); }
  ~OpenBlasThreads() { openblas_set_num_threads(1); }
};

void raw_sgemm(const Operands& o, float* c) {
  const float* a = static_cast<const float*>(o.a.raw_data());
  const float* b = static_cast<const float*>(o.b.raw_data());
  cblas_sgemm(CblasRowMajor, o.ta ? CblasTrans : CblasNoTrans, o.tb ? CblasTrans : CblasNoTrans,
              o.m, o.n, o.k, 1.0f, a, o.ta ? o.m : o.k, b, o.tb ? o.k : o.n, 0.0f, c, o.n);
}

void check_once(const Operands& o) {
  Tensor ref = qk::empty({o.m, o.n});
  {
    OpenBlasThreads native;
    raw_sgemm(o, ref.data_ptr<float>());
  }
  Tensor got = qk::ops::mm(o.a, o.b);
  auto r = ref.to_vector<float>(), v = got.to_vector<float>();
  for (size_t i = 0; i < r.size(); ++i) {
    if (std::fabs(r[i] - v[i]) > 1e-4f * (1.0f + std::fabs(r[i]))) {
      std::fprintf(stderr, "gemm_bench: qk mm differs from sgemm at %zu: %g vs %g\n", i, v[i], r[i]);
      std::exit(1);
    }
  }
}

void set_flops(benchmark::State& st, const Operands& o) {
  st.counters["GFLOPS"] = benchmark::Counter(2.0 * o.m * o.n * o.k * 1e-9,
                                             benchmark::Counter::kIsIterationInvariantRate);
  st.counters["threads"] = qk::num_threads();
}

void BM_qk_mm(benchmark::State& st) {
  Operands o = make(st.range(0), st.range(1), st.range(2), st.range(3));
  check_once(o);
  for (auto _ : st) benchmark::DoNotOptimize(qk::ops::mm(o.a, o.b));
  set_flops(st, o);
}

void BM_cblas_sgemm(benchmark::State& st) {
  Operands o = make(st.range(0), st.range(1), st.range(2), st.range(3));
  qk::cpu::init_blas();
  OpenBlasThreads native;
  // The output is allocated per call, as qk's is, so both pay the same.
  for (auto _ : st) {
    Tensor c = qk::empty({o.m, o.n});
    raw_sgemm(o, c.data_ptr<float>());
    benchmark::DoNotOptimize(c.raw_data());
  }
  set_flops(st, o);
}

// M, N, K, T (bit 0: A transposed, bit 1: B transposed). Square sizes, then
// SimpleCNN's fc1 at batch 64 (x [64,2048] . W^T [2048,512]) with its two
// gradients (dx = g . W, dW = g^T . x) and a GPT-2-small MLP projection.
void sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K", "T"});
  for (int64_t s : {128, 256, 512, 1024, 2048}) b->Args({s, s, s, 0});
  b->Args({1024, 1024, 1024, 3});
  b->Args({64, 512, 2048, 2});
  b->Args({64, 2048, 512, 0});
  b->Args({512, 2048, 64, 1});
  b->Args({512, 3072, 768, 2});
  b->Unit(benchmark::kMillisecond);
  b->UseRealTime();
}

BENCHMARK(BM_qk_mm)->Apply(sizes);
BENCHMARK(BM_cblas_sgemm)->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
