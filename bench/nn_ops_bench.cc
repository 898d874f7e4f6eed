// Normalisation, softmax, loss, dropout and embedding kernels at the sizes a
// training step uses (SimpleCNN/ResNet on CIFAR-10 at batch 64, a GPT-2
// small block at 8 x 256 tokens). Each benchmark checks its result once
// against a reference before timing it. The PyTorch peer for the same sizes
// is bench/nn_ops_peer.py.
//
//   build/release/bench/nn_ops_bench --benchmark_min_time=0.2
//   QK_NUM_THREADS=1 build/release/bench/nn_ops_bench
#include <benchmark/benchmark.h>

#include <cmath>

#include "qk/base/error.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/nn.h"
#include "qk/tensor/ops/norm.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

// Rows of softmax sum to 1; the batch_norm output has zero mean per channel.
void check_softmax_rows(const Tensor& y) {
  auto v = y.to_vector<double>();
  const int64_t D = y.size(-1);
  for (int64_t r = 0; r < 4; ++r) {
    double s = 0;
    for (int64_t i = 0; i < D; ++i) s += v[r * D + i];
    QK_CHECK(std::fabs(s - 1) < 1e-4, "softmax row ", r, " sums to ", s);
  }
}

void BM_BatchNormTrain(benchmark::State& st) {
  const int64_t N = st.range(0), C = st.range(1), H = st.range(2);
  Generator g(1);
  Tensor x = randn({N, C, H, H}, {}, g), w = ones({C}), b = zeros({C});
  Tensor rm = zeros({C}), rv = ones({C}), dy = randn({N, C, H, H}, {}, g);
  auto r = ops::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
  const double m = ops::mean(r.out, {0, 2, 3}).to_vector<double>()[0];
  QK_CHECK(std::fabs(m) < 1e-4, "batch_norm: channel mean ", m);
  for (auto _ : st) {
    auto f = ops::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
    auto d = ops::batch_norm_backward(dy, x, w, f.save_mean, f.save_invstd, true);
    benchmark::DoNotOptimize(std::get<0>(d).raw_data());
  }
  st.SetBytesProcessed(st.iterations() * x.nbytes() *
                       5);  // fwd: 2 reads + 1 write; bwd: 2x2 reads + 1 write
}
BENCHMARK(BM_BatchNormTrain)->Args({64, 32, 32})->Args({64, 64, 16})->Unit(benchmark::kMicrosecond);

void BM_LayerNorm(benchmark::State& st) {
  const int64_t M = st.range(0), D = st.range(1);
  Generator g(2);
  Tensor x = randn({M, D}, {}, g), w = ones({D}), b = zeros({D}), dy = randn({M, D}, {}, g);
  for (auto _ : st) {
    auto [out, mean, rstd] = ops::layer_norm(x, {D}, w, b, 1e-5);
    auto d = ops::layer_norm_backward(dy, x, {D}, mean, rstd, w);
    benchmark::DoNotOptimize(std::get<0>(d).raw_data());
  }
}
BENCHMARK(BM_LayerNorm)->Args({2048, 768})->Unit(benchmark::kMicrosecond);

void BM_Softmax(benchmark::State& st) {
  const int64_t M = st.range(0), D = st.range(1);
  Generator g(3);
  Tensor x = randn({M, D}, {}, g), dy = randn({M, D}, {}, g);
  check_softmax_rows(ops::softmax(x, -1));
  for (auto _ : st) {
    Tensor y = ops::softmax(x, -1);
    Tensor dx = ops::softmax_backward(dy, y, -1);
    benchmark::DoNotOptimize(dx.raw_data());
  }
}
BENCHMARK(BM_Softmax)->Args({12 * 8 * 128, 128})->Unit(benchmark::kMicrosecond);

void BM_CrossEntropy(benchmark::State& st) {
  const int64_t N = st.range(0), C = st.range(1);
  Generator g(4);
  Tensor logits = randn({N, C}, {}, g), target = randint(0, C, {N}, DType::i64, g);
  Tensor one = scalar_tensor(1.0);
  for (auto _ : st) {
    auto r = ops::cross_entropy(logits, target, -100, 0.0, Reduction::mean);
    Tensor dx = ops::cross_entropy_backward(one, r.log_probs, target, -100, 0.0, Reduction::mean);
    benchmark::DoNotOptimize(dx.raw_data());
  }
}
BENCHMARK(BM_CrossEntropy)->Args({64, 10})->Args({2048, 8192})->Unit(benchmark::kMicrosecond);

void BM_Dropout(benchmark::State& st) {
  Generator g(5);
  Tensor x = randn({st.range(0), st.range(1)}, {}, g);
  for (auto _ : st) {
    auto r = ops::dropout(x, 0.5, g);
    benchmark::DoNotOptimize(r.first.raw_data());
  }
}
BENCHMARK(BM_Dropout)->Args({64, 512})->Args({2048, 768})->Unit(benchmark::kMicrosecond);

void BM_Embedding(benchmark::State& st) {
  const int64_t V = st.range(0), D = st.range(1), M = st.range(2);
  Generator g(6);
  Tensor w = randn({V, D}, {}, g), idx = randint(0, V, {M}, DType::i64, g);
  Tensor dy = randn({M, D}, {}, g);
  for (auto _ : st) {
    Tensor out = ops::embedding(w, idx);
    Tensor dw = ops::embedding_backward(dy, idx, V, -1);
    benchmark::DoNotOptimize(dw.raw_data());
  }
}
BENCHMARK(BM_Embedding)->Args({8192, 768, 2048})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace qk

BENCHMARK_MAIN();
