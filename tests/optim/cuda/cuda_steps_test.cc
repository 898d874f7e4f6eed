// The optimizers' fused CUDA steps against the CPU's: three steps of SGD
// (momentum, Nesterov, weight decay), Adam with AMSGrad and AdamW on the
// same parameters and gradients. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/device_compare.h"
#include "qk/optim/adam.h"
#include "qk/optim/sgd.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

const Device kCuda0("cuda:0");

using devtest::max_abs_diff;

// Runs `steps` steps of the optimizer `make` builds on a parameter on `d`.
template <typename Make>
Tensor run(Device d, const Tensor& init, const std::vector<Tensor>& grads, Make make) {
  Tensor p = ops::to_device(init, d).requires_grad_();
  auto opt = make(std::vector<Tensor>{p});
  for (const Tensor& g : grads) {
    p.set_grad(ops::to_device(g, d));
    opt.step();
  }
  return p;
}

TEST(CudaOptimSteps, MatchTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  Tensor init = randn({1000});
  std::vector<Tensor> grads = {randn({1000}), randn({1000}), randn({1000})};
  auto sgd = [](std::vector<Tensor> ps) {
    return optim::SGD(ps, optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01));
  };
  EXPECT_LT(max_abs_diff(run(kCPU, init, grads, sgd), run(kCuda0, init, grads, sgd)), 1e-6);
  auto adam = [](std::vector<Tensor> ps) {
    return optim::Adam(ps, optim::AdamOptions(1e-2).weight_decay(0.01).amsgrad(true));
  };
  EXPECT_LT(max_abs_diff(run(kCPU, init, grads, adam), run(kCuda0, init, grads, adam)), 1e-6);
  auto adamw = [](std::vector<Tensor> ps) { return optim::AdamW(ps, optim::AdamWOptions(1e-2)); };
  EXPECT_LT(max_abs_diff(run(kCPU, init, grads, adamw), run(kCuda0, init, grads, adamw)), 1e-6);
}

}  // namespace
}  // namespace qk
