// conv2d through autograd: finite-difference checks (f64, f32) over
// stride/padding/dilation/groups, and loss.backward() against PyTorch's
// gradients from tests/fixtures/gen_conv.py.
#include <gtest/gtest.h>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/tensor/generator.h"

namespace qk {
namespace {

using autograd::gradcheck;

ops::Conv2dParams conv(std::array<int64_t, 2> s, std::array<int64_t, 2> pad,
                       std::array<int64_t, 2> dil = {1, 1}, int64_t groups = 1) {
  ops::Conv2dParams p;
  p.stride = s;
  p.padding = pad;
  p.dilation = dil;
  p.groups = groups;
  return p;
}

void check(const Shape& xs, const Shape& ws, bool bias, const ops::Conv2dParams& p, DType dt) {
  Generator g(5);
  std::vector<Tensor> in{randn(xs, TensorOptions(dt), g), randn(ws, TensorOptions(dt), g)};
  if (bias) in.push_back(randn({ws[0]}, TensorOptions(dt), g));
  for (auto& t : in) t.requires_grad_();
  Tensor probe;
  {
    NoGradGuard ng;
    probe = randn(conv2d(in[0], in[1], Tensor(), p).shape(), TensorOptions(dt), g);
  }
  auto loss = [&](const std::vector<Tensor>& v) {
    return sum(mul(conv2d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), p), probe));
  };
  double eps = dt == DType::f64 ? 1e-6 : 1e-2;
  double tol = dt == DType::f64 ? 1e-7 : 3e-2;
  auto r = gradcheck(loss, in, eps, tol, tol);
  EXPECT_TRUE(r.ok) << dtype_name(dt) << ": " << r.message;
}

class ConvGrad : public ::testing::TestWithParam<DType> {};

TEST_P(ConvGrad, Basic) { check({2, 2, 5, 5}, {3, 2, 3, 3}, true, conv({1, 1}, {1, 1}), GetParam()); }
TEST_P(ConvGrad, StrideAndPadding) {
  check({1, 2, 6, 7}, {2, 2, 3, 3}, true, conv({2, 2}, {1, 2}), GetParam());
}
TEST_P(ConvGrad, Dilation) {
  check({1, 2, 7, 6}, {2, 2, 2, 3}, false, conv({1, 1}, {1, 0}, {2, 2}), GetParam());
}
TEST_P(ConvGrad, Groups) {
  check({1, 4, 5, 5}, {4, 2, 3, 3}, true, conv({1, 2}, {1, 1}, {1, 1}, 2), GetParam());
}
TEST_P(ConvGrad, Pointwise) { check({2, 3, 3, 3}, {2, 3, 1, 1}, true, conv({1, 1}, {0, 0}), GetParam()); }

INSTANTIATE_TEST_SUITE_P(Dtypes, ConvGrad, ::testing::Values(DType::f64, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(ConvGradTorch, BackwardMatchesPyTorch) {
  for (const char* name : {"conv2d_stride2", "conv2d_dilation", "conv2d_groups"}) {
    SCOPED_TRACE(name);
    auto fx = test::load_fixture(std::string(name) + ".json");
    ops::Conv2dParams p = conv({int64_t(fx.scalar("stride_h")), int64_t(fx.scalar("stride_w"))},
                               {int64_t(fx.scalar("pad_h")), int64_t(fx.scalar("pad_w"))},
                               {int64_t(fx.scalar("dil_h")), int64_t(fx.scalar("dil_w"))},
                               int64_t(fx.scalar("groups")));
    Tensor x = fx.tensor("x").to(DType::f32).requires_grad_();
    Tensor w = fx.tensor("w").to(DType::f32).requires_grad_();
    Tensor b = fx.tensor("b").to(DType::f32).requires_grad_();
    Tensor y = conv2d(x, w, b, p);
    y.backward(fx.tensor("dy").to(DType::f32));
    EXPECT_TRUE(test::all_close(x.grad(), fx.tensor("dx").to(DType::f32), 1e-4, 1e-4));
    EXPECT_TRUE(test::all_close(w.grad(), fx.tensor("dw").to(DType::f32), 1e-4, 1e-4));
    EXPECT_TRUE(test::all_close(b.grad(), fx.tensor("db").to(DType::f32), 1e-4, 1e-4));
  }
}

}  // namespace
}  // namespace qk
