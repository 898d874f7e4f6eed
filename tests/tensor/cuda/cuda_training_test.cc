// Training arithmetic on a GPU against the CPU: cross entropy (with ignored
// targets and label smoothing), its bad-target error, and a whole forward
// and backward pass of a two-layer MLP through autograd, and the cuBLASLt and
// cuDNN plans built once per shape. Skipped without a CUDA device (they run
// in scripts/device-check.sh on the GPU machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "qk/autograd/functions.h"
#include "common/device_compare.h"
#include "qk/base/error.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/conv.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/tensor/ops/nn.h"
#include "qk/tensor/ops/norm.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

const Device kCuda0("cuda:0");

using devtest::max_abs_diff;

class CudaTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
};

TEST_F(CudaTraining, CrossEntropyMatchesTheCpu) {
  Tensor logits = randn({6, 5, 3});
  Tensor target = from_vector<int64_t>({0, 4, -100, 2, 1, 3, 4, 0, 1, -100, 2, 2, 3, 0, 1, 4, 4, 2}, {6, 3});
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum})
    for (double ls : {0.0, 0.1}) {
      SCOPED_TRACE(static_cast<int>(r));
      auto c = ops::cross_entropy(logits, target, -100, ls, r);
      auto g = ops::cross_entropy(ops::to_device(logits, kCuda0), ops::to_device(target, kCuda0), -100, ls, r);
      EXPECT_LT(max_abs_diff(c.loss, g.loss), 1e-5);
      EXPECT_LT(max_abs_diff(c.log_probs, g.log_probs), 1e-5);
      Tensor grad = ones(c.loss.shape());
      EXPECT_LT(max_abs_diff(ops::cross_entropy_backward(grad, c.log_probs, target, -100, ls, r),
                         ops::cross_entropy_backward(ops::to_device(grad, kCuda0), g.log_probs,
                                                     ops::to_device(target, kCuda0), -100, ls, r)),
                1e-6);
    }
  Tensor bad = from_vector<int64_t>({0, 7}, {2});
  try {
    ops::cross_entropy(ops::to_device(randn({2, 5}), kCuda0), ops::to_device(bad, kCuda0), -100, 0.0,
                       Reduction::mean);
    ADD_FAILURE() << "target 7 of 5 classes";
  } catch (const IndexError& e) {
    EXPECT_NE(e.message().find("target 7 at position 1"), std::string::npos) << e.message();
  }
}

TEST_F(CudaTraining, MlpForwardAndBackwardMatchTheCpu) {
  Tensor x = randn({16, 12}), w1 = randn({32, 12}), b1 = randn({32}), w2 = randn({10, 32}), b2 = randn({10});
  Tensor y = from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5}, {16});
  auto run = [&](Device d) {
    std::vector<Tensor> params;
    for (const Tensor& p : {w1, b1, w2, b2}) params.push_back(ops::to_device(p, d).requires_grad_());
    Tensor h = qk::relu(qk::linear(ops::to_device(x, d), params[0], params[1]));
    Tensor loss = qk::cross_entropy(qk::linear(h, params[2], params[3]), ops::to_device(y, d));
    loss.backward();
    params.insert(params.begin(), loss);
    return params;
  };
  std::vector<Tensor> c = run(kCPU), g = run(kCuda0);
  EXPECT_LT(max_abs_diff(c[0], g[0]), 1e-4) << "loss";
  for (size_t i = 1; i < c.size(); ++i) EXPECT_LT(max_abs_diff(c[i].grad(), g[i].grad()), 1e-4) << "parameter " << i;
}

TEST_F(CudaTraining, ConvolutionForwardAndBackwardMatchTheCpu) {
  Tensor x = randn({2, 6, 9, 8}), w = randn({8, 3, 3, 3}), b = randn({8});
  Conv2dParams p;
  p.stride = {2, 1};
  p.padding = {1, 1};
  p.groups = 2;
  auto dev = [](const Tensor& t) { return ops::to_device(t, kCuda0); };
  Tensor yc = ops::conv2d(x, w, b, p), yg = ops::conv2d(dev(x), dev(w), dev(b), p);
  EXPECT_LT(max_abs_diff(yc, yg), 1e-4);
  Tensor gy = randn(yc.shape());
  auto [dxc, dwc, dbc] = ops::conv2d_backward(gy, x, w, p, true, true, true);
  auto [dxg, dwg, dbg] = ops::conv2d_backward(dev(gy), dev(x), dev(w), p, true, true, true);
  EXPECT_LT(max_abs_diff(dxc, dxg), 1e-4);
  EXPECT_LT(max_abs_diff(dwc, dwg), 1e-3);
  EXPECT_LT(max_abs_diff(dbc, dbg), 1e-4);
}

TEST_F(CudaTraining, DropoutDrawsTheCpusMaskBitForBit) {
  Tensor x = randn({7, 129});  // not a multiple of 4: the last Philox counter half used
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    Generator gc(1234), gg(1234);
    auto [yc, mc] = ops::dropout(ops::cast(x, t), 0.3, gc);
    auto [yg, mg] = ops::dropout(ops::to_device(ops::cast(x, t), kCuda0), 0.3, gg);
    EXPECT_EQ(max_abs_diff(mc, mg), 0);
    EXPECT_EQ(max_abs_diff(yc, yg), 0);
    EXPECT_EQ(gc.offset(), gg.offset());
  }
}

TEST_F(CudaTraining, PoolingForwardAndBackwardMatchTheCpu) {
  auto dev = [](const Tensor& t) { return ops::to_device(t, kCuda0); };
  Tensor x = randn({2, 3, 11, 9});
  Pool2dParams p;
  p.kernel = {3, 3};
  p.stride = {2, 2};
  p.padding = {1, 1};  // overlapping windows with padding
  auto [yc, ic] = ops::max_pool2d(x, p);
  auto [yg, ig] = ops::max_pool2d(dev(x), p);
  EXPECT_EQ(max_abs_diff(yc, yg), 0);
  EXPECT_EQ(max_abs_diff(ic, ig), 0) << "the same index rule";
  Tensor gy = randn(yc.shape());
  EXPECT_LT(max_abs_diff(ops::max_pool2d_backward(gy, x, ic), ops::max_pool2d_backward(dev(gy), dev(x), ig)), 1e-5);
  p.count_include_pad = false;
  EXPECT_LT(max_abs_diff(ops::avg_pool2d(x, p), ops::avg_pool2d(dev(x), p)), 1e-6);
  EXPECT_LT(max_abs_diff(ops::avg_pool2d_backward(gy, x, p), ops::avg_pool2d_backward(dev(gy), dev(x), p)), 1e-6);
  Tensor ga = randn({2, 3, 4, 3});
  EXPECT_LT(max_abs_diff(ops::adaptive_avg_pool2d(x, {4, 3}), ops::adaptive_avg_pool2d(dev(x), {4, 3})), 1e-6);
  EXPECT_LT(max_abs_diff(ops::adaptive_avg_pool2d_backward(ga, x), ops::adaptive_avg_pool2d_backward(dev(ga), dev(x))),
            1e-6);
}

TEST_F(CudaTraining, BatchNormMatchesTheCpu) {
  auto dev = [](const Tensor& t) { return ops::to_device(t, kCuda0); };
  Tensor x = randn({4, 5, 6, 7}), w = randn({5}), b = randn({5});
  Tensor rmc = zeros({5}), rvc = ones({5});
  Tensor rmg = dev(rmc), rvg = dev(rvc);
  auto c = ops::batch_norm(x, w, b, rmc, rvc, true, 0.1, 1e-5);
  auto g = ops::batch_norm(dev(x), dev(w), dev(b), rmg, rvg, true, 0.1, 1e-5);
  EXPECT_LT(max_abs_diff(c.out, g.out), 1e-4);
  EXPECT_LT(max_abs_diff(rmc, rmg), 1e-6);
  EXPECT_LT(max_abs_diff(rvc, rvg), 1e-5);
  Tensor gy = randn(x.shape());
  auto [dxc, dwc, dbc] = ops::batch_norm_backward(gy, x, w, c.save_mean, c.save_invstd, true);
  auto [dxg, dwg, dbg] = ops::batch_norm_backward(dev(gy), dev(x), dev(w), g.save_mean, g.save_invstd, true);
  EXPECT_LT(max_abs_diff(dxc, dxg), 1e-4);
  EXPECT_LT(max_abs_diff(dwc, dwg), 1e-3);
  EXPECT_LT(max_abs_diff(dbc, dbg), 1e-4);
  auto e = ops::batch_norm(x, w, b, rmc, rvc, false, 0.1, 1e-5);
  auto eg = ops::batch_norm(dev(x), dev(w), dev(b), rmg, rvg, false, 0.1, 1e-5);
  EXPECT_LT(max_abs_diff(e.out, eg.out), 1e-4) << "evaluation: the running statistics";
}

}  // namespace
}  // namespace qk

namespace qk {
namespace {

int64_t builds_of(const std::string& name) {
  for (const auto& s : cuda::plan_cache_stats())
    if (s.name == name) return s.builds;
  return 0;
}

// A steady-state step does no descriptor or heuristic work: the second
// product or convolution of a shape builds no plan (cuBLASLt's algorithm,
// cuDNN's per direction), a new shape builds one.
TEST_F(CudaTraining, PlansAreBuiltOncePerShape) {
  const Tensor a = ops::to_device(randn({33, 17}), kCuda0), b = ops::to_device(randn({17, 9}), kCuda0);
  (void)ops::mm(a, b);
  const int64_t mm_builds = builds_of("cublaslt_matmul");
  for (int i = 0; i < 3; ++i) (void)ops::mm(a, b);
  EXPECT_EQ(builds_of("cublaslt_matmul"), mm_builds);
  (void)ops::mm(a, ops::to_device(randn({17, 10}), kCuda0));
  EXPECT_EQ(builds_of("cublaslt_matmul"), mm_builds + 1);

  Tensor x = ops::to_device(randn({2, 3, 8, 8}), kCuda0), w = ops::to_device(randn({4, 3, 3, 3}), kCuda0);
  const ops::Conv2dParams p{{1, 1}, {1, 1}, {1, 1}, 1};
  auto step = [&] {
    Tensor y = ops::conv2d(x, w, Tensor(), p);
    (void)ops::conv2d_backward(y, x, w, p, true, true, false);
  };
  step();
  const int64_t f = builds_of("cudnn_conv2d_forward"), d = builds_of("cudnn_conv2d_backward_data"),
                g = builds_of("cudnn_conv2d_backward_filter");
  step();
  step();
  EXPECT_EQ(builds_of("cudnn_conv2d_forward"), f);
  EXPECT_EQ(builds_of("cudnn_conv2d_backward_data"), d);
  EXPECT_EQ(builds_of("cudnn_conv2d_backward_filter"), g);
}

}  // namespace
}  // namespace qk
