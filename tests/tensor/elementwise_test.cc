#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/fixtures.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace {
using namespace qk;
using test::all_close;

Tensor vec(std::vector<float> v) { return from_vector<float>(v, {static_cast<int64_t>(v.size())}); }

TEST(Elementwise, BroadcastingBinary) {
  Tensor a = ops::reshape(arange(0, 6, 1), {2, 3});
  Tensor b = vec({10, 20, 30});
  EXPECT_EQ(ops::add(a, b).to_vector<float>(), (std::vector<float>{10, 21, 32, 13, 24, 35}));
  Tensor col = ops::reshape(vec({1, 2}), {2, 1});
  EXPECT_EQ(ops::mul(a, col).to_vector<float>(), (std::vector<float>{0, 1, 2, 6, 8, 10}));
  EXPECT_EQ(ops::sub(b, a).shape(), (Shape{2, 3}));
  // Non-contiguous operand.
  Tensor at = ops::transpose(a, 0, 1);
  EXPECT_EQ(ops::add(at, at).to_vector<float>(), (std::vector<float>{0, 6, 2, 8, 4, 10}));
}

TEST(Elementwise, MismatchesAreClearErrors) {
  try {
    ops::add(zeros({2, 3}), zeros({4}));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(e.message().find("[2, 3]"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("add"), std::string::npos);
  }
  EXPECT_THROW(ops::add(zeros({2}), zeros({2}, DType::f64)), TypeError);
  EXPECT_THROW(ops::div(zeros({2}, DType::i64), ones({2}, DType::i64)), TypeError);
  EXPECT_THROW(ops::unary(UnaryOp::exp, zeros({2}, DType::i32)), TypeError);
}

TEST(Elementwise, UnaryValues) {
  Tensor x = vec({-2, -0.5f, 0, 0.5f, 2});
  auto xs = x.to_vector<float>();
  auto check = [&](UnaryOp op, auto f) {
    auto y = ops::unary(op, x).to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(y[i], f(double(xs[i])), 1e-6) << unary_op_name(op);
  };
  check(UnaryOp::relu, [](double v) { return v > 0 ? v : 0; });
  check(UnaryOp::tanh, [](double v) { return std::tanh(v); });
  check(UnaryOp::sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); });
  check(UnaryOp::silu, [](double v) { return v / (1 + std::exp(-v)); });
  check(UnaryOp::gelu, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); });
  check(UnaryOp::exp, [](double v) { return std::exp(v); });
  check(UnaryOp::neg, [](double v) { return -v; });
  EXPECT_TRUE(std::isnan(ops::unary(UnaryOp::log, vec({-1})).item<float>()));
}

// The float loops of erf, GELU, SiLU, sigmoid and exp run vectorized math
// (qk/base/vec_math.h) instead of libm: over a dense range their
// values and GELU's, SiLU's and erf's derivatives stay within a few float
// ulps of the double reference, and the edges (NaN, infinities, the clamps
// of the approximations) come out as libm's would.
TEST(Elementwise, VectorizedFloatMathMatchesTheDoubleReference) {
  std::vector<float> xs;
  for (int i = -6000; i <= 6000; ++i) xs.push_back(static_cast<float>(i) * 1e-3f);  // [-6, 6]
  const Tensor x = from_vector(xs, {static_cast<int64_t>(xs.size())});
  auto worst = [&](UnaryOp op, auto f, bool backward = false) {
    const Tensor g = full_like(x, 1.0);
    const std::vector<float> y =
        (backward ? ops::unary_backward(op, g, x, ops::unary(op, x)) : ops::unary(op, x)).to_vector<float>();
    double err = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double ref = f(static_cast<double>(xs[i]));
      err = std::max(err, std::abs(y[i] - ref) / std::max(1.0, std::abs(ref)));
    }
    return err;
  };
  const double r2 = 1 / std::sqrt(2.0), inv_sqrt_2pi = 1 / std::sqrt(2 * M_PI);
  EXPECT_LT(worst(UnaryOp::erf, [](double v) { return std::erf(v); }), 4e-7);
  EXPECT_LT(worst(UnaryOp::gelu, [&](double v) { return 0.5 * v * (1 + std::erf(v * r2)); }), 1e-6);
  EXPECT_LT(worst(UnaryOp::gelu,
                  [&](double v) { return 0.5 * (1 + std::erf(v * r2)) + v * inv_sqrt_2pi * std::exp(-0.5 * v * v); },
                  true),
            2e-6);
  EXPECT_LT(worst(UnaryOp::erf, [](double v) { return 2 / std::sqrt(M_PI) * std::exp(-v * v); }, true), 1e-6);
  EXPECT_LT(worst(UnaryOp::silu, [](double v) { return v / (1 + std::exp(-v)); }), 1e-6);
  EXPECT_LT(worst(UnaryOp::sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }), 1e-6);
  EXPECT_LT(worst(UnaryOp::exp, [](double v) { return std::exp(v); }), 1e-6);
  // Edges: NaN stays NaN; erf saturates at +-1, GELU at x and 0, SiLU and
  // sigmoid past exp's overflow, exp itself to 0 and inf.
  const float inf = INFINITY, nan = NAN;
  const Tensor e = vec({nan, -inf, inf, -100, 100, 1000});
  const std::vector<float> erf = ops::unary(UnaryOp::erf, e).to_vector<float>();
  EXPECT_TRUE(std::isnan(erf[0]));
  EXPECT_EQ(erf[1], -1.0f);
  EXPECT_EQ(erf[2], 1.0f);
  EXPECT_EQ(erf[3], -1.0f);
  EXPECT_EQ(erf[4], 1.0f);
  const std::vector<float> gelu = ops::unary(UnaryOp::gelu, e).to_vector<float>();
  EXPECT_TRUE(std::isnan(gelu[0]));
  EXPECT_EQ(gelu[4], 100.0f);
  EXPECT_EQ(gelu[3], -0.0f);
  const std::vector<float> silu = ops::unary(UnaryOp::silu, e).to_vector<float>();
  EXPECT_EQ(silu[4], 100.0f);
  EXPECT_EQ(silu[5], 1000.0f);
  EXPECT_NEAR(silu[3], 0.0f, 1e-30f);
  const std::vector<float> sig = ops::unary(UnaryOp::sigmoid, e).to_vector<float>();
  EXPECT_EQ(sig[2], 1.0f);
  EXPECT_EQ(sig[1], 0.0f);
  const std::vector<float> ex = ops::unary(UnaryOp::exp, e).to_vector<float>();
  EXPECT_TRUE(std::isnan(ex[0]));
  EXPECT_EQ(ex[1], 0.0f);
  EXPECT_EQ(ex[2], inf);
  EXPECT_EQ(ex[5], inf);
}

TEST(Elementwise, ComparisonsWhereClamp) {
  Tensor a = vec({1, 5, 3});
  Tensor b = vec({2, 5, 1});
  EXPECT_EQ(ops::binary(BinaryOp::lt, a, b).to_vector<bool>(), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(ops::binary(BinaryOp::eq, a, b).dtype(), DType::boolean);
  Tensor w = ops::where(ops::binary(BinaryOp::gt, a, b), a, b);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{2, 5, 3}));
  EXPECT_EQ(ops::clamp(a, 2.0, 4.0).to_vector<float>(), (std::vector<float>{2, 4, 3}));
  EXPECT_EQ(ops::masked_fill(a, ops::binary(BinaryOp::ge, a, b), -1).to_vector<float>(),
            (std::vector<float>{1, -1, -1}));
  EXPECT_THROW(ops::clamp(a, 4.0, 2.0), ValueError);
}

TEST(Elementwise, ReducedPrecisionComputesInFloat) {
  Tensor a = vec({1.0f, 2.0f, 3.0f}).to(DType::bf16);
  Tensor b = vec({0.5f, 0.25f, 0.125f}).to(DType::bf16);
  EXPECT_EQ(ops::add(a, b).to_vector<float>(), (std::vector<float>{1.5f, 2.25f, 3.125f}));
  EXPECT_EQ(ops::mul(a.to(DType::f16), b.to(DType::f16)).to_vector<float>(),
            (std::vector<float>{0.5f, 0.5f, 0.375f}));
}

TEST(Elementwise, InPlaceAddAndLargeParallel) {
  Tensor s = zeros({100000});
  ops::add_(s, ones({100000}), 2.5);
  ops::mul_(s, 2.0);
  auto v = s.to_vector<float>();
  for (float x : v) ASSERT_EQ(x, 5.0f);
  EXPECT_THROW(ops::add_(zeros({3}), zeros({2, 3})), ValueError);
}

TEST(Reduce, SumMeanOverDims) {
  Tensor a = ops::reshape(arange(0, 24, 1), {2, 3, 4});
  EXPECT_EQ(ops::sum(a).item<float>(), 276.0f);
  EXPECT_EQ(ops::sum(a, {0, 2}).to_vector<float>(), (std::vector<float>{60, 92, 124}));
  EXPECT_EQ(ops::sum(a, {1}, true).shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(ops::mean(a, {-1}).to_vector<float>()[0], 1.5f);
  EXPECT_EQ(ops::amax(a, {0, 1}).to_vector<float>(), (std::vector<float>{20, 21, 22, 23}));
  EXPECT_EQ(ops::amin(a).item<float>(), 0.0f);
  // non-contiguous input
  Tensor at = ops::transpose(a, 0, 2);
  EXPECT_EQ(ops::sum(at, {2}).to_vector<float>(),
            ops::contiguous(ops::transpose(ops::sum(a, {0}), 0, 1)).to_vector<float>());
  EXPECT_EQ(ops::sum(from_vector<int32_t>({1, 2, 3}, {3})).dtype(), DType::i64);
  EXPECT_THROW(ops::sum(a, {3}), IndexError);
  EXPECT_THROW(ops::sum(a, {1, 1}), ValueError);
}

TEST(Reduce, VarMaxArgmax) {
  Tensor a = from_vector<float>({1, 7, 3, 7, 2, 0}, {2, 3});
  EXPECT_TRUE(all_close(ops::var(a, {1}), from_vector<float>({9.333333f, 13.0f}, {2}), 1e-5));
  EXPECT_TRUE(all_close(ops::var(a, {1}, false), from_vector<float>({6.222222f, 8.666667f}, {2}), 1e-5));
  auto [v, i] = ops::max_dim(a, 1);
  EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{7, 7}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(ops::argmin(a, 0).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(ops::argmax(a, 0, true).shape(), (Shape{1, 3}));
}

TEST(Reduce, LongSumIsAccurateAndDeterministic) {
  Tensor a = full({3000000}, 0.1);
  double s = ops::sum(a).item<double>();
  EXPECT_NEAR(s, 300000.0, 1.0);  // naive f32 accumulation drifts by thousands
  // The work split never depends on the thread count: same bits with 1 and 2 threads.
  Tensor r = randn({1000003});
  set_num_threads(1);
  double one = ops::sum(r).item<double>();
  set_num_threads(2);
  EXPECT_EQ(ops::sum(r).item<double>(), one);
}

TEST(Reduce, SumToUndoesBroadcast) {
  Tensor g = ones({4, 2, 3});
  EXPECT_EQ(ops::sum_to(g, {2, 1}).to_vector<float>(), (std::vector<float>{12, 12}));
  EXPECT_EQ(ops::sum_to(g, {3}).to_vector<float>(), (std::vector<float>{8, 8, 8}));
  EXPECT_THROW(ops::sum_to(g, {5}), ValueError);
}

}  // namespace
