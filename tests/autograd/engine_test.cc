// The backward engine, grad mode, hooks, and the gradients of the core ops.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "common/fixtures.h"
#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/tensor/ops/elementwise.h"

namespace {
using namespace qk;
using autograd::gradcheck;
using test::all_close;
using V = std::vector<Tensor>;

Tensor rnd(const Shape& s, DType dt = DType::f64) {
  static Generator g(7);
  return randn(s, dt, g);
}

TEST(Autograd, SimpleChainRule) {
  Tensor x = from_vector<float>({1, 2, 3}, {3}).requires_grad_();
  Tensor y = (x * x + x * 2.0).sum();  // dy/dx = 2x + 2
  y.backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{4, 6, 8}));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn()->name(), "SumBackward");
}

TEST(Autograd, GradientsAccumulate) {
  Tensor x = ones({2}).requires_grad_();
  (x * 3.0).sum().backward();
  (x * 3.0).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{6, 6}));
}

TEST(Autograd, SharedGradientIsNotAliased) {
  // a + b passes one gradient tensor to both leaves; accumulating into one
  // must not change the other.
  Tensor a = ones({2}).requires_grad_();
  Tensor b = ones({2}).requires_grad_();
  (a + b).sum().backward();
  (a * 5.0).sum().backward();
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{6, 6}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{1, 1}));
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = ones({2}).requires_grad_();
  Tensor y;
  {
    NoGradGuard g;
    y = x * 2.0;
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(y.sum().backward(), ValueError);
}

TEST(Autograd, NonScalarNeedsGradient) {
  Tensor x = ones({2, 2}).requires_grad_();
  Tensor y = x * 2.0;
  try {
    y.backward();
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(e.message().find("[2, 2]"), std::string::npos) << e.message();
  }
  y.backward(ones({2, 2}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
  EXPECT_THROW(y.backward(ones({3})), ValueError);
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  Tensor x = ones({2}).requires_grad_();
  Tensor y = (x * x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{4, 4}));
  EXPECT_THROW(y.backward(), ValueError);
}

TEST(Autograd, HooksFireInReverseOrderOfUse) {
  Tensor w1 = ones({3}).requires_grad_();
  Tensor w2 = ones({3}).requires_grad_();
  Tensor w3 = ones({3}).requires_grad_();
  std::vector<int> order;
  w1.register_post_accumulate_grad_hook([&](const Tensor& t) {
    order.push_back(1);
    EXPECT_TRUE(t.grad().defined());
  });
  w2.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back(2); });
  w3.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back(3); });
  Tensor x = ones({3});
  Tensor h = tanh(x * w1);
  h = tanh(h * w2);
  h = tanh(h * w3);
  h.sum().backward();
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1}));
}

TEST(Autograd, GradFunctionDoesNotTouchDotGrad) {
  Tensor x = from_vector<double>({1, 2}, {2}, DType::f64).requires_grad_();
  Tensor y = (x * x * x).sum();
  auto g = autograd::grad({y}, {x});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{3, 12}));
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, DetachAndRequiresGradChecks) {
  Tensor x = ones({2}).requires_grad_();
  Tensor d = (x * 2.0).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_THROW(zeros({2}, DType::i64).requires_grad_(), ValueError);
  Tensor y = x * 2.0;
  EXPECT_THROW(y.requires_grad_(false), ValueError);
}

TEST(Autograd, DtypeCastPassesGradientBack) {
  Tensor x = from_vector<double>({1, 2}, {2}, DType::f64).requires_grad_();
  (x.to(DType::bf16) * 3.0).to(DType::f32).sum().backward();
  EXPECT_EQ(x.grad().dtype(), DType::f64);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 3}));
}

// A graph whose backward never runs (a forward in grad mode, then dropped)
// must free itself: a backward closure that saved its own output (not a
// detached view of it) kept that output's grad_fn alive, a cycle. Found by
// the op harness under LeakSanitizer (div, pow, amax/amin).
TEST(Autograd, AGraphWithoutBackwardIsFreed) {
  using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<const char*, Fn>> fns = {
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(abs(a), b); }},
      {"amax", [](const Tensor& a, const Tensor&) { return amax(a, {1}); }},
      {"amin", [](const Tensor& a, const Tensor&) { return amin(a); }},
      {"exp", [](const Tensor& a, const Tensor&) { return exp(a); }},
      {"softmax", [](const Tensor& a, const Tensor&) { return softmax(a, 1); }},
  };
  for (const auto& [name, f] : fns) {
    std::weak_ptr<TensorImpl> out;
    {
      Tensor a = rnd({3, 4}).requires_grad_();
      Tensor b = rnd({3, 4}).requires_grad_();
      Tensor y = f(a, b);
      ASSERT_TRUE(y.requires_grad()) << name;
      out = y.impl_ptr();
    }
    EXPECT_TRUE(out.expired()) << name << ": the output outlived every handle to it";
  }
}

TEST(Gradcheck, CatchesAWrongGradient) {
  // A function whose recorded backward is deliberately wrong must fail.
  auto bad = [](const V& in) {
    Tensor out = ops::unary(UnaryOp::exp, in[0]);
    autograd::record("BadBackward", {in[0]}, {out}, [](const V& g) -> V { return {g[0]}; });
    return sum(out);
  };
  auto r = gradcheck(bad, {rnd({3}).requires_grad_()});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("analytic"), std::string::npos);
}

// Every core differentiable op, f64 (tight) and f32 (loose).
struct OpCase {
  const char* name;
  std::function<Tensor(const V&)> f;
  std::vector<Shape> shapes;
  bool positive = false;  // inputs must be > 0 (log, sqrt, pow)
};

std::vector<OpCase> op_cases() {
  return {
      {"add_broadcast", [](const V& v) { return sum(v[0] + v[1]); }, {{2, 3}, {3}}},
      {"sub_broadcast", [](const V& v) { return sum(mul(v[0] - v[1], v[0])); }, {{2, 3}, {2, 1}}},
      {"mul_broadcast", [](const V& v) { return sum(v[0] * v[1]); }, {{2, 3}, {1, 3}}},
      {"div", [](const V& v) { return sum(v[0] / v[1]); }, {{2, 3}, {2, 3}}, true},
      {"pow_tensor", [](const V& v) { return sum(pow(v[0], v[1])); }, {{4}, {4}}, true},
      {"pow_scalar", [](const V& v) { return sum(pow(v[0], 3.0)); }, {{4}}},
      {"maximum", [](const V& v) { return sum(maximum(v[0], v[1])); }, {{5}, {5}}},
      {"minimum", [](const V& v) { return sum(minimum(v[0], v[1]) * v[0]); }, {{5}, {5}}},
      {"scalar_ops", [](const V& v) { return sum((2.0 - v[0]) * 3.0 / 4.0 + 1.0); }, {{3}}},
      {"rdiv", [](const V& v) { return sum(1.0 / v[0]); }, {{3}}, true},
      {"neg", [](const V& v) { return sum(-v[0] * v[0]); }, {{3}}},
      {"exp", [](const V& v) { return sum(exp(v[0])); }, {{3}}},
      {"log", [](const V& v) { return sum(log(v[0])); }, {{3}}, true},
      {"sqrt", [](const V& v) { return sum(sqrt(v[0])); }, {{3}}, true},
      {"rsqrt", [](const V& v) { return sum(rsqrt(v[0])); }, {{3}}, true},
      {"square", [](const V& v) { return sum(square(v[0])); }, {{3}}},
      {"abs", [](const V& v) { return sum(abs(v[0]) * v[0]); }, {{3}}},
      {"relu", [](const V& v) { return sum(relu(v[0]) * v[0]); }, {{6}}},
      {"gelu", [](const V& v) { return sum(gelu(v[0])); }, {{6}}},
      {"gelu_tanh", [](const V& v) { return sum(gelu(v[0], "tanh")); }, {{6}}},
      {"silu", [](const V& v) { return sum(silu(v[0])); }, {{6}}},
      {"tanh", [](const V& v) { return sum(tanh(v[0])); }, {{6}}},
      {"sigmoid", [](const V& v) { return sum(sigmoid(v[0])); }, {{6}}},
      {"clamp", [](const V& v) { return sum(clamp(v[0], -0.5, 0.5) * v[0]); }, {{6}}},
      {"where", [](const V& v) { return sum(where(gt(v[0], v[1]), v[0] * 2.0, v[1])); }, {{6}, {6}}},
      {"masked_fill", [](const V& v) { return sum(masked_fill(v[0], gt(v[0], v[1]), 1.0) * v[0]); }, {{6}, {6}}},
      {"sum_dims", [](const V& v) { return sum(square(sum(v[0], {0, 2}, true))); }, {{2, 3, 4}}},
      {"mean_dims", [](const V& v) { return sum(square(mean(v[0], {1}))); }, {{2, 3, 4}}},
      {"var", [](const V& v) { return sum(var(v[0], {1})); }, {{3, 5}}},
      {"amax", [](const V& v) { return sum(amax(v[0], {1}) * 2.0); }, {{3, 5}}},
      {"amin", [](const V& v) { return sum(amin(v[0])); }, {{3, 5}}},
      {"max_dim", [](const V& v) { return sum(max(v[0], 1).first * 3.0); }, {{3, 5}}},
      {"min_dim_keep", [](const V& v) { return sum(min(v[0], 0, true).first); }, {{3, 5}}},
      {"views", [](const V& v) {
         Tensor t = v[0].view({2, 6}).transpose(0, 1).reshape({3, 4}).permute({1, 0});
         return sum(square(t.unsqueeze(0).squeeze(0).flatten()) * arange(0, 12, 1, DType::f64).to(v[0].dtype()));
       }, {{3, 4}}},
      {"slice_select_narrow", [](const V& v) {
         return sum(square(v[0].slice(1, 0, 4, 2))) + sum(v[0].select(0, 1) * 3.0) + sum(v[0].narrow(1, 1, 2));
       }, {{3, 4}}},
      {"expand", [](const V& v) { return sum(square(v[0].expand({4, 3}))); }, {{1, 3}}},
      {"contiguous_clone", [](const V& v) { return sum(square(v[0].t().contiguous().clone())); }, {{2, 3}}},
  };
}

class CoreOpGrad : public ::testing::TestWithParam<OpCase> {};

TEST_P(CoreOpGrad, F64MatchesFiniteDifferences) {
  const OpCase& c = GetParam();
  V in;
  for (const auto& s : c.shapes) {
    Tensor t = rnd(s);
    if (c.positive) t = ops::binary_scalar(BinaryOp::add, ops::unary(UnaryOp::abs, t), 0.5);
    in.push_back(t.requires_grad_());
  }
  auto r = gradcheck(c.f, in, 1e-6, 1e-6, 1e-4);
  EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
}

TEST_P(CoreOpGrad, F32MatchesFiniteDifferences) {
  const OpCase& c = GetParam();
  V in;
  for (const auto& s : c.shapes) {
    Tensor t = rnd(s);
    if (c.positive) t = ops::binary_scalar(BinaryOp::add, ops::unary(UnaryOp::abs, t), 0.5);
    in.push_back(t.to(DType::f32).requires_grad_());
  }
  auto r = gradcheck(c.f, in, 1e-2, 2e-2, 2e-2);
  EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
}

INSTANTIATE_TEST_SUITE_P(Ops, CoreOpGrad, ::testing::ValuesIn(op_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
