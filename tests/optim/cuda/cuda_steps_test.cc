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
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/optimizer.h"
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

// The list kernels (one launch per up to 48 parameters) on 60 parameters of
// mixed sizes (empty, one element, several chunks) and dtypes: each
// parameter's bits equal the one-parameter kernel's, and both the CPU's.
TEST(CudaOptimSteps, ListKernelsEqualTheOneParameterKernels) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  std::vector<Tensor> init, grads;
  for (int i = 0; i < 60; ++i) {
    const int64_t n = i == 7 ? 0 : (i % 5 == 0 ? 40000 + i : 1 + 37 * i);
    const DType dt = i % 9 == 4 ? DType::f64 : DType::f32;
    init.push_back(ops::cast(randn({n}), dt));
    grads.push_back(ops::cast(randn({n}), dt));
  }
  ops::AdamStepArgs a;
  a.lr = 1e-2, a.beta1 = 0.9, a.beta2 = 0.99, a.eps = 1e-8, a.weight_decay = 0.1, a.step = 3, a.decoupled = true;
  a.amsgrad = true;
  ops::SgdStepArgs s{0.1, 0.9, 0.0, 0.01, true, false};
  auto state = [&](Device d) {
    ops::AdamStepLists l;
    for (size_t i = 0; i < init.size(); ++i) {
      l.params.push_back(ops::to_device(init[i], d));
      l.grads.push_back(ops::to_device(grads[i], d));
      l.exp_avgs.push_back(ops::to_device(grads[i], d));  // any values: the same on each side
      l.exp_avg_sqs.push_back(ops::to_device(ops::binary(BinaryOp::mul, grads[i], grads[i]), d));
      l.max_exp_avg_sqs.push_back(ops::to_device(ops::binary(BinaryOp::mul, init[i], init[i]), d));
    }
    return l;
  };
  ops::AdamStepLists list = state(kCuda0), one = state(kCuda0), cpu = state(kCPU);
  ops::multi_tensor_adam_step_(list, a);
  ops::multi_tensor_adam_step_(cpu, a);
  for (size_t i = 0; i < init.size(); ++i)
    ops::adam_step_kernel.get(kCuda0)(one.params[i], one.grads[i], one.exp_avgs[i], one.exp_avg_sqs[i],
                                      one.max_exp_avg_sqs[i], a);
  for (size_t i = 0; i < init.size(); ++i) {
    EXPECT_EQ(max_abs_diff(list.params[i], one.params[i]), 0.0) << "adam, parameter " << i;
    EXPECT_EQ(max_abs_diff(list.max_exp_avg_sqs[i], one.max_exp_avg_sqs[i]), 0.0) << "adam, parameter " << i;
    EXPECT_LT(max_abs_diff(list.params[i], cpu.params[i]), 1e-5) << "adam, parameter " << i;
  }
  ops::SgdStepLists sl{list.params, list.grads, list.exp_avgs}, so{one.params, one.grads, one.exp_avgs},
      sc{cpu.params, cpu.grads, cpu.exp_avgs};
  ops::multi_tensor_sgd_step_(sl, s);
  ops::multi_tensor_sgd_step_(sc, s);
  for (size_t i = 0; i < init.size(); ++i) ops::sgd_step_kernel.get(kCuda0)(so.params[i], so.grads[i], so.momentum_bufs[i], s);
  for (size_t i = 0; i < init.size(); ++i) {
    EXPECT_EQ(max_abs_diff(sl.params[i], so.params[i]), 0.0) << "sgd, parameter " << i;
    EXPECT_EQ(max_abs_diff(sl.momentum_bufs[i], so.momentum_bufs[i]), 0.0) << "sgd, parameter " << i;
    EXPECT_LT(max_abs_diff(sl.params[i], sc.params[i]), 1e-5) << "sgd, parameter " << i;
  }
}

}  // namespace
}  // namespace qk
