// clip_grad_norm_ against torch.nn.utils.clip_grad_norm_ (fixture from
// tests/fixtures/gen_optim.py), and its non-finite behaviour.
#include <gtest/gtest.h>

#include <cmath>

#include "common/fixtures.h"
#include "qk/nn/clip_grad.h"

namespace {

using namespace qk;
using qk::test::all_close;
namespace utils = qk::nn::utils;

TEST(ClipGradNorm, MatchesPyTorchForEachNormType) {
  auto fx = qk::test::load_fixture("nn_clip_grad.json");
  const std::pair<const char*, double> cases[] = {
      {"l2", 2.0}, {"l1", 1.0}, {"inf", utils::kInfNorm}, {"l3", 3.0}};
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    for (const auto& [tag, p] : cases) {
      std::vector<Tensor> params;
      for (const char* g : {"g0", "g1"}) {
        Tensor t = zeros_like(fx.tensor(g).to(dt)).requires_grad_();
        t.set_grad(fx.tensor(g).to(dt));
        params.push_back(t);
      }
      params.push_back(zeros({2}).requires_grad_());  // no grad: skipped
      double norm = utils::clip_grad_norm_(params, fx.scalar("max_norm"), p);
      std::string t = tag;
      EXPECT_NEAR(norm, fx.scalar("norm_" + t), tol * fx.scalar("norm_" + t)) << t;
      EXPECT_TRUE(all_close(params[0].grad(), fx.tensor("clipped0_" + t).to(dt), tol, tol)) << t;
      EXPECT_TRUE(all_close(params[1].grad(), fx.tensor("clipped1_" + t).to(dt), tol, tol)) << t;
    }
  }
}

TEST(ClipGradNorm, SmallGradientsAreUntouched) {
  Tensor p = zeros({2}).requires_grad_();
  p.set_grad(from_vector<float>({0.3f, 0.4f}, {2}));
  EXPECT_NEAR(utils::clip_grad_norm_({p}, 1.0), 0.5, 1e-7);
  EXPECT_EQ(p.grad().to_vector<float>(), (std::vector<float>{0.3f, 0.4f}));
  EXPECT_EQ(utils::clip_grad_norm_({zeros({1}).requires_grad_()}, 1.0), 0.0);  // no grads at all
}

TEST(ClipGradNorm, NonFiniteLikePyTorch) {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({1}).requires_grad_();
  a.set_grad(from_vector<float>({1, INFINITY}, {2}));
  b.set_grad(from_vector<float>({2}, {1}));
  double n = utils::clip_grad_norm_({a, b}, 1.0);
  EXPECT_TRUE(std::isinf(n));
  // Scaled by 0: finite entries become 0, inf becomes nan (inf * 0).
  EXPECT_EQ(b.grad().to_vector<float>()[0], 0.0f);
  EXPECT_TRUE(std::isnan(a.grad().to_vector<float>()[1]));
  a.set_grad(from_vector<float>({1, NAN}, {2}));
  EXPECT_TRUE(std::isnan(utils::clip_grad_norm_({a}, 1.0)));
  EXPECT_TRUE(std::isnan(a.grad().to_vector<float>()[0]));
  a.set_grad(from_vector<float>({1, NAN}, {2}));
  try {
    utils::clip_grad_norm_({a}, 1.0, 2.0, /*error_if_nonfinite=*/true);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("nan"), std::string::npos) << e.what();
  }
  EXPECT_THROW(utils::clip_grad_norm_({a}, 1.0, -1.0), ValueError);
}

TEST(ClipGradValue, Clamps) {
  Tensor a = zeros({3}).requires_grad_();
  a.set_grad(from_vector<float>({-5, 0.5f, 5}, {3}));
  utils::clip_grad_value_({a}, 1.0);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{-1, 0.5f, 1}));
}

}  // namespace
