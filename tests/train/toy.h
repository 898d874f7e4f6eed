// A toy regression for the trainer tests: y = x . w* + 0.1 sin(3 x0) with
// x ~ N(0, 1)^4, sample i drawn from its own generator (so any rank, micro
// batch or resumed run sees the same sample i), and a small MLP (with
// dropout, so the RNG state matters for resuming bit for bit).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "qk/autograd/functions.h"
#include "qk/nn/nn.h"
#include "qk/tensor/generator.h"
#include "qk/train/step_runner.h"

namespace qk_train_test {

inline constexpr int64_t kFeatures = 4;

// Samples first..first+n-1: inputs [n, 4] and targets [n, 1], f32.
inline std::pair<qk::Tensor, qk::Tensor> samples(int64_t first, int64_t n) {
  std::vector<float> x, y;
  const float w[kFeatures] = {0.5f, -1.0f, 0.25f, 2.0f};
  for (int64_t i = first; i < first + n; ++i) {
    qk::Generator g(1000003 * static_cast<uint64_t>(i) + 17);
    const std::vector<float> xi = qk::randn({kFeatures}, {}, g).to_vector<float>();
    float t = 0.1f * std::sin(3.0f * xi[0]);
    for (int64_t k = 0; k < kFeatures; ++k) t += w[k] * xi[static_cast<size_t>(k)];
    x.insert(x.end(), xi.begin(), xi.end());
    y.push_back(t);
  }
  return {qk::from_vector<float>(x, {n, kFeatures}), qk::from_vector<float>(y, {n, 1})};
}

inline qk::nn::Sequential make_mlp(uint64_t seed, double dropout = 0.1) {
  qk::manual_seed(seed);
  return qk::nn::Sequential(qk::nn::Linear(kFeatures, 16), qk::nn::Tanh(), qk::nn::Dropout(dropout),
                            qk::nn::Linear(16, 1));
}

// Megatron's sampler: a global batch is consecutive samples from `start`;
// micro-batch j of data-parallel rank r takes
// start + j * mbs * dp + r * mbs ... + mbs - 1.
inline int64_t first_sample(int64_t start, int64_t micro, int64_t mbs, int rank, int dp) {
  return start + micro * mbs * dp + rank * mbs;
}

inline qk::train::MicroBatchOutput mse_step(qk::nn::Sequential& net, int64_t first, int64_t n) {
  auto [x, y] = samples(first, n);
  if (net->parameters().front().dtype() != qk::DType::f32) x = x.to(net->parameters().front().dtype());
  qk::Tensor out = net->forward(x);
  qk::Tensor loss = qk::mse_loss(out.to(qk::DType::f32), y);
  return {loss, {}};
}

}  // namespace qk_train_test
