// softmax, log_softmax, cross_entropy, mse_loss, dropout and embedding
// through autograd: finite-difference checks in f64 and f32, and the
// dropout/embedding gradients against their closed forms.
#include <gtest/gtest.h>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/tensor/generator.h"

namespace qk {
namespace {

using autograd::gradcheck;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// gradcheck of sum(f(inputs) * probe); `scale` spreads the inputs.
void check(const std::vector<Shape>& shapes, const Fn& f, DType dt, double scale = 1.0) {
  Generator g(7);
  std::vector<Tensor> in;
  for (const auto& s : shapes) {
    Tensor t;
    {
      NoGradGuard ng;
      t = mul(randn(s, TensorOptions(dt), g), scale);
    }
    in.push_back(t.requires_grad_());
  }
  Tensor probe;
  {
    NoGradGuard ng;
    probe = randn(f(in).shape(), TensorOptions(dt), g);
  }
  auto loss = [&](const std::vector<Tensor>& v) { return sum(mul(f(v), probe)); };
  const double eps = dt == DType::f64 ? 1e-6 : 1e-2;
  const double tol = dt == DType::f64 ? 1e-7 : 3e-2;
  auto r = gradcheck(loss, in, eps, tol, tol);
  EXPECT_TRUE(r.ok) << dtype_name(dt) << ": " << r.message;
}

class NnGrad : public ::testing::TestWithParam<DType> {};

TEST_P(NnGrad, Softmax) {
  for (int64_t dim : {-1, 0, 1}) {
    SCOPED_TRACE(dim);
    check(
        {{3, 4, 2}}, [dim](const std::vector<Tensor>& v) { return softmax(v[0], dim); }, GetParam(),
        2.0);
  }
}

TEST_P(NnGrad, LogSoftmax) {
  for (int64_t dim : {-1, 0, 1}) {
    SCOPED_TRACE(dim);
    check(
        {{3, 4, 2}}, [dim](const std::vector<Tensor>& v) { return log_softmax(v[0], dim); },
        GetParam(), 2.0);
  }
}

TEST_P(NnGrad, CrossEntropy) {
  Tensor t = from_vector<int64_t>({0, 3, -100, 1, 2}, {5});
  for (double ls : {0.0, 0.2}) {
    for (auto red : {ops::Reduction::mean, ops::Reduction::sum, ops::Reduction::none}) {
      SCOPED_TRACE(ls);
      check(
          {{5, 4}},
          [&](const std::vector<Tensor>& v) { return cross_entropy(v[0], t, -100, ls, red); },
          GetParam(), 2.0);
    }
  }
}

TEST_P(NnGrad, CrossEntropySpatial) {
  Tensor t = from_vector<int64_t>({0, 2, 1, 1, 2, 0, 1, 0}, {2, 2, 2});
  check(
      {{2, 3, 2, 2}},
      [&](const std::vector<Tensor>& v) {
        return cross_entropy(v[0], t, 1, 0.1, ops::Reduction::mean);
      },
      GetParam(), 2.0);
}

TEST_P(NnGrad, MseLoss) {
  for (auto red : {ops::Reduction::mean, ops::Reduction::sum, ops::Reduction::none}) {
    check(
        {{3, 4}, {3, 4}}, [red](const std::vector<Tensor>& v) { return mse_loss(v[0], v[1], red); },
        GetParam());
  }
}

TEST_P(NnGrad, Embedding) {
  Tensor idx = from_vector<int64_t>({1, 3, 1, 0, 2, 3}, {2, 3});
  check(
      {{4, 3}}, [&](const std::vector<Tensor>& v) { return embedding(v[0], idx); }, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NnGrad, ::testing::Values(DType::f64, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CrossEntropyAutograd, MatchesTorchThroughBackward) {
  auto fx = test::load_fixture("cross_entropy_smooth.json");
  Tensor x = fx.tensor("logits").to(DType::f64).requires_grad_();
  Tensor loss =
      cross_entropy(x, fx.tensor("target"), static_cast<int64_t>(fx.scalar("ignore_index")),
                    fx.scalar("label_smoothing"));
  EXPECT_TRUE(test::all_close(loss, fx.tensor("loss").to(DType::f64), 1e-12, 1e-12));
  loss.backward(fx.tensor("dy").to(DType::f64));
  EXPECT_TRUE(test::all_close(x.grad(), fx.tensor("dx").to(DType::f64), 1e-10, 1e-12));
}

TEST(DropoutAutograd, GradientIsTheMask) {
  Generator g(3);
  Tensor x = add(randn({200}, DType::f64, g), 5.0).detach().requires_grad_();
  Tensor y = dropout(x, 0.4, true, g);
  Tensor probe = randn({200}, DType::f64, g);
  y.backward(probe);
  auto xv = x.to_vector<double>(), yv = y.to_vector<double>(), gv = x.grad().to_vector<double>();
  auto pv = probe.to_vector<double>();
  int zeros = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double m = yv[i] / xv[i];  // 0 or 1/(1-p)
    ASSERT_TRUE(std::fabs(m) < 1e-12 || std::fabs(m - 1 / 0.6) < 1e-9) << m;
    EXPECT_NEAR(gv[i], pv[i] * m, 1e-12);
    zeros += m == 0;
  }
  EXPECT_GT(zeros, 40);
  EXPECT_LT(zeros, 120);
  // Evaluation mode and p = 0 are the identity.
  EXPECT_TRUE(dropout(x, 0.4, false, g).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0, true, g).is_same(x));
}

TEST(EmbeddingAutograd, PaddingRowGetsNoGradient) {
  Tensor w = randn({4, 2}, DType::f64).requires_grad_();
  Tensor idx = from_vector<int64_t>({0, 2, 2, 3}, {4});
  sum(embedding(w, idx, /*padding_idx=*/2)).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{1, 1, 0, 0, 0, 0, 1, 1}));
  EXPECT_THROW(embedding(w, idx, 4), ValueError);
}

}  // namespace
}  // namespace qk
