// Optimizer behaviour beyond the PyTorch fixtures: parameter groups,
// zero_grad, skipped parameters, state dict validation, bad input, and the
// multi-threaded kernels on a large parameter against a direct formula.
#include <gtest/gtest.h>

#include <cmath>

#include "qk/autograd/functions.h"
#include "qk/base/thread_pool.h"
#include "qk/optim/optim.h"

namespace {

using namespace qk;

TEST(Optimizer, ParamGroupsHaveTheirOwnOptions) {
  Tensor a = ones({3}).requires_grad_(), b = ones({2}).requires_grad_();
  optim::SGD opt({{{a}, optim::SGDOptions(0.1)}, {{b}, optim::SGDOptions(0.5)}});
  ASSERT_EQ(opt.num_param_groups(), 2u);
  (qk::sum(a) + qk::sum(b)).backward();
  opt.step();
  EXPECT_DOUBLE_EQ(a.to_vector<float>()[0], 0.9f);
  EXPECT_DOUBLE_EQ(b.to_vector<float>()[0], 0.5f);
  opt.set_lr(1, 0.25);
  EXPECT_EQ(opt.options(1).lr(), 0.25);
}

TEST(Optimizer, ZeroGradAndParamsWithoutGradAreSkipped) {
  Tensor a = ones({3}).requires_grad_(), b = ones({2}).requires_grad_();
  optim::Adam opt({a, b}, optim::AdamOptions(0.1));
  qk::sum(a * 2.0).backward();  // b gets no gradient
  opt.step();
  EXPECT_NE(a.to_vector<float>()[0], 1.0f);
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(2, 1.0f));
  auto st = opt.state_dict();
  EXPECT_TRUE(st.tensors.count("state.0.exp_avg"));
  EXPECT_FALSE(st.tensors.count("state.1.exp_avg"));
  EXPECT_EQ(st.scalars.at("state.0.step"), 1.0);
  opt.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(a.grad().defined());
  EXPECT_EQ(a.grad().to_vector<float>(), std::vector<float>(3, 0.0f));
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(Optimizer, RejectsBadParametersAndOptions) {
  Tensor a = ones({3}).requires_grad_();
  EXPECT_THROW(optim::SGD({a, a}, optim::SGDOptions(0.1)), ValueError);
  EXPECT_THROW(optim::SGD({a * 2.0}, optim::SGDOptions(0.1)), ValueError);  // not a leaf
  EXPECT_THROW(optim::SGD({ones({2}, DType::i64)}, optim::SGDOptions(0.1)), TypeError);
  EXPECT_THROW(optim::SGD({a}, optim::SGDOptions(-1.0)), ValueError);
  EXPECT_THROW(optim::SGD({a}, optim::SGDOptions(0.1).nesterov(true)), ValueError);
  EXPECT_THROW(optim::Adam({a}, optim::AdamOptions(0.1).betas({1.0, 0.9})), ValueError);
  try {
    optim::SGD({a}, optim::SGDOptions(0.1).momentum(0.9).dampening(0.5).nesterov(true));
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Nesterov"), std::string::npos) << e.what();
  }
}

TEST(Optimizer, LoadStateDictChecksStructure) {
  Tensor a = ones({3}).requires_grad_(), b = ones({2}).requires_grad_();
  optim::SGD opt({a, b}, optim::SGDOptions(0.1).momentum(0.9));
  (qk::sum(a) + qk::sum(b)).backward();
  opt.step();
  auto st = opt.state_dict();
  EXPECT_EQ(st.tensors.at("state.1.momentum_buffer").shape(), (Shape{2}));

  Tensor c = ones({3}).requires_grad_();
  optim::SGD one_param({c}, optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_THROW(one_param.load_state_dict(st), ValueError);  // group sizes differ

  Tensor d = ones({3}).requires_grad_(), e = ones({5}).requires_grad_();
  optim::SGD wrong_shape({d, e}, optim::SGDOptions(0.1).momentum(0.9));
  try {
    wrong_shape.load_state_dict(st);
    FAIL() << "expected ValueError";
  } catch (const ValueError& err) {
    std::string m = err.what();
    EXPECT_NE(m.find("state.1.momentum_buffer"), std::string::npos) << m;
    EXPECT_NE(m.find("[2]"), std::string::npos) << m;
    EXPECT_NE(m.find("[5]"), std::string::npos) << m;
  }

  Tensor f = ones({3}).requires_grad_(), g = ones({2}).requires_grad_();
  optim::Adam adam({f, g}, optim::AdamOptions(0.1));
  EXPECT_THROW(adam.load_state_dict(st), ValueError);  // SGD hyperparameters lack beta1

  // A good load restores the hyperparameters and the buffers (as copies).
  optim::SGD same({d, ones({2}).requires_grad_()}, optim::SGDOptions(0.5));
  same.load_state_dict(st);
  EXPECT_EQ(same.options(0).lr(), 0.1);
  EXPECT_EQ(same.options(0).momentum(), 0.9);
  auto st2 = same.state_dict();
  EXPECT_FALSE(st2.tensors.at("state.0.momentum_buffer").storage() ==
               st.tensors.at("state.0.momentum_buffer").storage());
}

TEST(Optimizer, GradientShapeAndDtypeAreChecked) {
  Tensor a = ones({3}).requires_grad_();
  optim::SGD opt({a}, optim::SGDOptions(0.1));
  a.set_grad(ones({3}, DType::f64));  // converted to the parameter's dtype
  opt.step();
  EXPECT_FLOAT_EQ(a.to_vector<float>()[0], 0.9f);
  Tensor h = ones({3}, DType::f16).requires_grad_();
  optim::SGD half({h}, optim::SGDOptions(0.1));
  h.set_grad(ones({3}, DType::f16));
  EXPECT_THROW(half.step(), TypeError);  // fused kernels need f32/f64 master weights
}

// A parameter large enough to be split across threads; compared with the
// update written out with raw formulas in f64.
TEST(Optimizer, FusedKernelsMatchFormulaOnLargeParameter) {
  const int64_t n = 200003;  // odd, several grains
  Tensor p0 = randn({n}), g = randn({n});
  Tensor p = p0.clone().requires_grad_();
  optim::AdamW opt({p}, optim::AdamWOptions(0.01).betas({0.9, 0.99}).weight_decay(0.1));
  for (int s = 0; s < 3; ++s) {
    p.set_grad(g.clone());
    opt.step();
  }
  auto pv = p0.to_vector<double>(), gv = g.to_vector<double>(), got = p.to_vector<double>();
  for (int64_t i = 0; i < n; i += 997) {
    double x = pv[i], m = 0, v = 0;
    for (int s = 1; s <= 3; ++s) {
      x *= 1 - 0.01 * 0.1;
      m = 0.9 * m + 0.1 * gv[i];
      v = 0.99 * v + 0.01 * gv[i] * gv[i];
      double mh = m / (1 - std::pow(0.9, s)), vh = v / (1 - std::pow(0.99, s));
      x -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
    }
    ASSERT_NEAR(got[i], x, 1e-5 + 1e-5 * std::fabs(x)) << "element " << i;
  }
}

}  // namespace
