// Mixed precision on a GPU against the CPU: a two-layer MLP's forward and
// backward under bf16 and f16 autocast (linears in the low dtype, the loss
// in f32, f32 gradients on the f32 weights), and GradScaler on device
// gradients: it unscales them, and finds an inf or a NaN in any of them
// with one read back. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/device_compare.h"
#include "qk/amp/grad_scaler.h"
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/optim/sgd.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

const Device kCuda0("cuda:0");
using devtest::max_abs_diff;

struct Mlp {
  Tensor w1, b1, w2, b2;
};

Mlp on(const Mlp& m, Device d) {
  // Fresh leaves on either device (to_device of a CPU tensor to the CPU is
  // the tensor itself, whose gradients would pile up over the passes).
  auto mv = [&](const Tensor& t) { return ops::clone(ops::to_device(t, d)).requires_grad_(); };
  return {mv(m.w1), mv(m.b1), mv(m.w2), mv(m.b2)};
}

// The loss and the weight gradients of one step under autocast to `low`.
std::vector<Tensor> step(const Mlp& m, const Tensor& x, const Tensor& y, DType low) {
  Tensor loss;
  {
    autocast::Guard amp(low);
    Tensor h = relu(linear(x, m.w1, m.b1));
    loss = cross_entropy(linear(h, m.w2, m.b2), y);
  }
  EXPECT_EQ(loss.dtype(), DType::f32);
  loss.backward();
  EXPECT_EQ(m.w1.grad().dtype(), DType::f32);
  return {loss, m.w1.grad(), m.b1.grad(), m.w2.grad(), m.b2.grad()};
}

TEST(CudaAmp, AutocastStepMatchesTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  Mlp m{randn({32, 20}), randn({32}), randn({10, 32}), randn({10})};
  Tensor x = randn({16, 20});
  Tensor y = from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5}, {16});
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(low));
    std::vector<Tensor> c = step(on(m, kCPU), x, y, low);
    std::vector<Tensor> g = step(on(m, kCuda0), ops::to_device(x, kCuda0), ops::to_device(y, kCuda0), low);
    const double tol = low == DType::bf16 ? 0.1 : 0.02;  // two low-precision products in a row
    for (size_t i = 0; i < c.size(); ++i) EXPECT_LT(max_abs_diff(c[i], g[i]), tol) << "output " << i;
  }
}

TEST(CudaAmp, GradScalerUnscalesAndFindsNonFiniteDeviceGradients) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  Tensor a = ops::to_device(ones({100}), kCuda0).requires_grad_();
  Tensor b = ops::to_device(ones({7}), kCuda0).requires_grad_();
  optim::SGD opt({a, b}, optim::SGDOptions(0.5));
  amp::GradScalerOptions so;
  so.init_scale = 1024.0;
  amp::GradScaler scaler(so);
  a.set_grad(ops::to_device(full({100}, 2048.0), kCuda0));
  b.set_grad(ops::to_device(full({7}, -1024.0), kCuda0));
  scaler.unscale_(opt);
  EXPECT_FALSE(scaler.found_inf());
  EXPECT_LT(max_abs_diff(a.grad(), full({100}, 2.0)), 1e-6);
  EXPECT_LT(max_abs_diff(b.grad(), full({7}, -1.0)), 1e-6);
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    std::vector<float> v(7, 1.0f);
    v[3] = static_cast<float>(bad);
    b.set_grad(ops::to_device(from_vector<float>(v, {7}), kCuda0));
    a.set_grad(ops::to_device(ones({100}), kCuda0));
    const double before = scaler.get_scale();
    EXPECT_FALSE(scaler.step(opt)) << bad;  // skipped
    EXPECT_TRUE(scaler.found_inf()) << bad;
    scaler.update();
    EXPECT_LT(scaler.get_scale(), before) << bad;  // backed off
  }
}

}  // namespace
}  // namespace qk
