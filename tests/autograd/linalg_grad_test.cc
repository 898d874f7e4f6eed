// Gradient checks of the differentiable matrix products, in f64 (the
// formulas) and f32 (the f32 kernels, differences taken in f64).
#include <gtest/gtest.h>

#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/tensor/generator.h"

namespace qk {
namespace {

using autograd::gradcheck;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Tol {
  double eps, atol, rtol;
};
Tol tol_for(DType dt) { return dt == DType::f64 ? Tol{1e-6, 1e-7, 1e-5} : Tol{1e-2, 2e-2, 2e-2}; }

// Checks f(inputs) contracted with a fixed random tensor (a scalar whose
// gradient has no symmetry that could hide a transposed formula).
void check(const Fn& f, std::vector<Tensor> inputs, DType dt) {
  for (auto& t : inputs) t.requires_grad_();
  Tensor probe;
  {
    NoGradGuard ng;
    Generator g(99);
    probe = randn(f(inputs).shape(), TensorOptions(dt), g);
  }
  auto loss = [&](const std::vector<Tensor>& in) { return sum(mul(f(in), probe)); };
  Tol t = tol_for(dt);
  auto r = gradcheck(loss, inputs, t.eps, t.atol, t.rtol);
  EXPECT_TRUE(r.ok) << dtype_name(dt) << ": " << r.message;
}

class LinalgGrad : public ::testing::TestWithParam<DType> {};

TEST_P(LinalgGrad, Mm) {
  DType dt = GetParam();
  manual_seed(1);
  check([](const auto& in) { return mm(in[0], in[1]); }, {randn({3, 4}, dt), randn({4, 5}, dt)}, dt);
  // Transposed views go to BLAS as flags; their gradients must still be right.
  check([](const auto& in) { return mm(in[0].t(), in[1].t()); }, {randn({4, 3}, dt), randn({5, 4}, dt)},
        dt);
}

TEST_P(LinalgGrad, Bmm) {
  DType dt = GetParam();
  manual_seed(2);
  check([](const auto& in) { return bmm(in[0], in[1]); }, {randn({2, 3, 4}, dt), randn({2, 4, 2}, dt)},
        dt);
}

TEST_P(LinalgGrad, MatmulRanksAndBroadcast) {
  DType dt = GetParam();
  manual_seed(3);
  auto f = [](const auto& in) { return matmul(in[0], in[1]); };
  check(f, {randn({4}, dt), randn({4}, dt)}, dt);
  check(f, {randn({4}, dt), randn({4, 3}, dt)}, dt);
  check(f, {randn({2, 4}, dt), randn({4}, dt)}, dt);
  check(f, {randn({2, 3, 4}, dt), randn({4, 2}, dt)}, dt);      // batch folded into M
  check(f, {randn({2, 1, 3, 4}, dt), randn({3, 4, 2}, dt)}, dt);  // broadcast batch both ways
  check(f, {randn({4}, dt), randn({2, 4, 3}, dt)}, dt);
  check(f, {randn({2, 3, 4}, dt), randn({4}, dt)}, dt);
}

TEST_P(LinalgGrad, Linear) {
  DType dt = GetParam();
  manual_seed(4);
  check([](const auto& in) { return linear(in[0], in[1], in[2]); },
        {randn({2, 3, 5}, dt), randn({4, 5}, dt), randn({4}, dt)}, dt);
  check([](const auto& in) { return linear(in[0], in[1]); }, {randn({3, 5}, dt), randn({2, 5}, dt)}, dt);
}

TEST(LinalgGradOnly, NoGradientForFrozenInput) {
  manual_seed(5);
  Tensor x = randn({3, 4}), w = randn({2, 4}).requires_grad_();
  linear(x, w).sum().backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinalgGrad, ::testing::Values(DType::f64, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace qk
