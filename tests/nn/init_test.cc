// nn::init: gains, fans, bounds and the spread of each initialiser.
#include <gtest/gtest.h>

#include <cmath>

#include "qk/nn/init.h"

namespace {

using namespace qk;
namespace init = qk::nn::init;

struct Stats {
  double mean = 0, std = 0, max_abs = 0;
};
Stats stats(const Tensor& t) {
  auto v = t.to_vector<double>();
  Stats s;
  for (double x : v) s.mean += x, s.max_abs = std::max(s.max_abs, std::fabs(x));
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / static_cast<double>(v.size()));
  return s;
}

TEST(Init, GainsAndFans) {
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::relu), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::leaky_relu, std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::linear), 1.0);
  auto [in, out] = init::calculate_fan_in_and_fan_out(empty({16, 8, 3, 5}));
  EXPECT_EQ(in, 8 * 15);
  EXPECT_EQ(out, 16 * 15);
  EXPECT_THROW(init::calculate_fan_in_and_fan_out(empty({7})), ValueError);
}

TEST(Init, KaimingAndXavierSpread) {
  Tensor w = empty({256, 64, 3, 3});  // fan_in 576, fan_out 2304
  init::kaiming_uniform_(w, 0.0, init::FanMode::fan_in, init::Nonlinearity::relu);
  double b = std::sqrt(2.0) * std::sqrt(3.0 / 576);
  Stats s = stats(w);
  EXPECT_LE(s.max_abs, b);
  EXPECT_NEAR(s.std, b / std::sqrt(3.0), 0.02 * b);
  init::kaiming_normal_(w, 0.0, init::FanMode::fan_out, init::Nonlinearity::relu);
  s = stats(w);
  EXPECT_NEAR(s.std, std::sqrt(2.0 / 2304), 0.02 * std::sqrt(2.0 / 2304));
  EXPECT_NEAR(s.mean, 0.0, 0.01 * s.std);
  init::xavier_uniform_(w, 2.0);
  EXPECT_LE(stats(w).max_abs, 2.0 * std::sqrt(6.0 / (576 + 2304)));
  init::xavier_normal_(w);
  EXPECT_NEAR(stats(w).std, std::sqrt(2.0 / (576 + 2304)), 0.02 * std::sqrt(2.0 / (576 + 2304)));
}

TEST(Init, SimpleFillsAndDeterminism) {
  Tensor t = empty({1000}, DType::f64);
  init::normal_(t, 3.0, 0.5);
  Stats s = stats(t);
  EXPECT_NEAR(s.mean, 3.0, 0.1);
  EXPECT_NEAR(s.std, 0.5, 0.05);
  init::uniform_(t, -2, -1);
  for (double v : t.to_vector<double>()) ASSERT_TRUE(v >= -2 && v <= -1);
  init::constant_(t, 0.25);
  EXPECT_EQ(stats(t).max_abs, 0.25);
  init::zeros_(t);
  EXPECT_EQ(stats(t).max_abs, 0.0);
  init::ones_(t);
  EXPECT_EQ(stats(t).mean, 1.0);
  Generator g1(11), g2(11);
  Tensor a = empty({50}), b = empty({50});
  init::kaiming_uniform_(a.view({5, 10}), 0.0, init::FanMode::fan_in, init::Nonlinearity::relu, g1);
  init::kaiming_uniform_(b.view({5, 10}), 0.0, init::FanMode::fan_in, init::Nonlinearity::relu, g2);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_THROW(init::normal_(empty({2}, DType::i64)), TypeError);
  EXPECT_THROW(init::uniform_(t, 1, 0), ValueError);
}

}  // namespace
