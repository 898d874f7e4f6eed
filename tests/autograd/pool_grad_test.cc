// Gradient checks of max/avg/adaptive-avg pooling in f64 and f32.
#include <gtest/gtest.h>

#include "common/pool_params.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/tensor/generator.h"

namespace qk {
namespace {

using autograd::gradcheck;

using test::pool;

void check(const std::function<Tensor(const Tensor&)>& f, const Shape& shape, DType dt) {
  Generator g(7);
  // Well-separated values (a permutation scaled by 0.1) so no max-pool window
  // holds a near-tie that a finite difference would step across.
  Tensor x = (randperm(shape_numel(shape), g).to(dt) * 0.1).reshape(shape).contiguous();
  x = x.detach().requires_grad_();
  Tensor probe = randn(f(x).shape(), TensorOptions(dt), g);
  auto loss = [&](const std::vector<Tensor>& in) { return sum(mul(f(in[0]), probe)); };
  double eps = dt == DType::f64 ? 1e-6 : 1e-2;
  double tol = dt == DType::f64 ? 1e-7 : 2e-2;
  auto r = gradcheck(loss, {x}, eps, tol, tol);
  EXPECT_TRUE(r.ok) << dtype_name(dt) << ": " << r.message;
}

class PoolGrad : public ::testing::TestWithParam<DType> {};

TEST_P(PoolGrad, MaxPool) {
  DType dt = GetParam();
  check([](const Tensor& x) { return max_pool2d(x, pool({2, 2}, {2, 2}, {0, 0})); }, {2, 2, 4, 4}, dt);
  check([](const Tensor& x) { return max_pool2d(x, pool({3, 3}, {2, 2}, {1, 1}, true)); }, {1, 2, 5, 6},
        dt);
}

TEST_P(PoolGrad, AvgPool) {
  DType dt = GetParam();
  check([](const Tensor& x) { return avg_pool2d(x, pool({2, 2}, {2, 2}, {0, 0})); }, {2, 2, 4, 4}, dt);
  auto p = pool({3, 3}, {2, 2}, {1, 1}, true);
  p.count_include_pad = false;
  check([p](const Tensor& x) { return avg_pool2d(x, p); }, {1, 2, 5, 6}, dt);
}

TEST_P(PoolGrad, AdaptiveAvgPool) {
  DType dt = GetParam();
  check([](const Tensor& x) { return adaptive_avg_pool2d(x, {2, 3}); }, {1, 2, 5, 7}, dt);
  check([](const Tensor& x) { return adaptive_avg_pool2d(x, {1, 1}); }, {2, 3, 4, 4}, dt);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PoolGrad, ::testing::Values(DType::f64, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace qk
