// Pooling: PyTorch parity (tests/fixtures/gen_conv.py -> conv_pool.json) for
// forward and backward, hand-computed values and indices, bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/fixtures.h"
#include "common/pool_params.h"
#include "qk/tensor/ops/conv.h"

namespace qk {
namespace {

using test::all_close;

using test::pool;

// Each fixture entry: the op applied to x, its output, a grad and dx.
void check_pool_parity(DType dt, double rtol, double atol) {
  auto fx = test::load_fixture("conv_pool.json");
  Tensor x = fx.tensor("x").to(dt);
  auto check = [&](const std::string& key, const Tensor& y, auto backward) {
    SCOPED_TRACE(key + " " + dtype_name(dt));
    EXPECT_TRUE(all_close(y.to(DType::f64), fx.tensor(key).to(DType::f64), rtol, atol));
    Tensor dx = backward(fx.tensor(key + "_dy").to(dt));
    EXPECT_EQ(dx.dtype(), dt);
    EXPECT_TRUE(all_close(dx.to(DType::f64), fx.tensor(key + "_dx").to(DType::f64), rtol, atol));
  };
  {
    auto p = pool({3, 3}, {2, 2}, {1, 1}, true);
    auto [y, idx] = ops::max_pool2d(x, p);
    check("max_ceil", y, [&](const Tensor& dy) { return ops::max_pool2d_backward(dy, x, idx); });
  }
  {
    auto p = pool({2, 3}, {1, 2}, {1, 1});
    p.dilation = {2, 1};
    auto [y, idx] = ops::max_pool2d(x, p);
    check("max_dil", y, [&](const Tensor& dy) { return ops::max_pool2d_backward(dy, x, idx); });
  }
  {
    auto p = pool({3, 3}, {2, 2}, {1, 1}, true);
    check("avg_pad", ops::avg_pool2d(x, p),
          [&](const Tensor& dy) { return ops::avg_pool2d_backward(dy, x, p); });
    p.count_include_pad = false;
    check("avg_nopad", ops::avg_pool2d(x, p),
          [&](const Tensor& dy) { return ops::avg_pool2d_backward(dy, x, p); });
  }
  {
    auto p = pool({2, 2}, {2, 2}, {0, 0});
    check("avg_2x2", ops::avg_pool2d(x, p),
          [&](const Tensor& dy) { return ops::avg_pool2d_backward(dy, x, p); });
  }
  check("adaptive_3x4", ops::adaptive_avg_pool2d(x, {3, 4}),
        [&](const Tensor& dy) { return ops::adaptive_avg_pool2d_backward(dy, x); });
  check("adaptive_1x1", ops::adaptive_avg_pool2d(x, {1, 1}),
        [&](const Tensor& dy) { return ops::adaptive_avg_pool2d_backward(dy, x); });
}

TEST(Pool2d, TorchParityF64) { check_pool_parity(DType::f64, 1e-12, 1e-12); }
TEST(Pool2d, TorchParityF32) { check_pool_parity(DType::f32, 1e-5, 1e-6); }
TEST(Pool2d, TorchParityBf16) { check_pool_parity(DType::bf16, 2e-2, 2e-2); }

TEST(Pool2d, MaxPoolValuesAndIndices) {
  // 4x4 plane 0..15, 2x2 windows: max at the bottom-right of each window.
  std::vector<float> xs(16);
  for (int i = 0; i < 16; ++i) xs[i] = static_cast<float>(i);
  Tensor x = from_vector<float>(xs, {1, 1, 4, 4});
  auto [y, idx] = ops::max_pool2d(x, pool({2, 2}, {2, 2}, {0, 0}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
  EXPECT_EQ(idx.dtype(), DType::i64);
  EXPECT_EQ(idx.to_vector<int64_t>(), (std::vector<int64_t>{5, 7, 13, 15}));
  Tensor dx = ops::max_pool2d_backward(ones({1, 1, 2, 2}), x, idx);
  auto d = dx.to_vector<float>();
  EXPECT_EQ(d[5] + d[7] + d[13] + d[15], 4.0f);
  EXPECT_EQ(d[0], 0.0f);
}

// The 2x2/stride-2 fast path picks what a sequential scan of the window
// picks: the first maximum on ties, the last NaN when there are NaNs (the
// general path, PyTorch's rule); for f32 and bf16.
TEST(Pool2d, TwoByTwoFastPathTiesAndNaNs) {
  const float nan = std::nanf("");
  // One 2x2 window per case, laid out as a 2 x (2*cases) plane.
  const std::vector<std::array<float, 4>> cases = {
      {1, 3, 3, 0}, {2, 2, 2, 2}, {0, 0, 5, 5}, {nan, 1, 2, 3}, {1, nan, nan, 0},
      {-1, -2, -3, -4}, {4, 1, nan, 9}, {-0.0f, 0.0f, 0.0f, -0.0f}};
  const int64_t n = static_cast<int64_t>(cases.size());
  std::vector<float> xs(4 * n);
  for (int64_t k = 0; k < n; ++k) {
    xs[2 * k] = cases[k][0], xs[2 * k + 1] = cases[k][1];
    xs[2 * n + 2 * k] = cases[k][2], xs[2 * n + 2 * k + 1] = cases[k][3];
  }
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor x = from_vector<float>(xs, {1, 1, 2, 2 * n}).to(dt);
    auto [y, idx] = ops::max_pool2d(x, pool({2, 2}, {2, 2}, {0, 0}));
    auto yv = y.to(DType::f32).to_vector<float>();
    auto iv = idx.to_vector<int64_t>();
    for (int64_t k = 0; k < n; ++k) {
      const int64_t taps[4] = {2 * k, 2 * k + 1, 2 * n + 2 * k, 2 * n + 2 * k + 1};
      float best = cases[k][0];
      int64_t best_i = taps[0];
      for (int t = 1; t < 4; ++t)
        if (cases[k][t] > best || std::isnan(cases[k][t])) best = cases[k][t], best_i = taps[t];
      EXPECT_EQ(iv[k], best_i) << "case " << k << " " << dtype_name(dt);
      if (std::isnan(best)) {
        EXPECT_TRUE(std::isnan(yv[k])) << "case " << k;
      } else {
        EXPECT_EQ(yv[k], best) << "case " << k;
      }
    }
  }
}

// The same cases at widths that exercise the vector paths (16 outputs at a
// time, masked tails) over several rows and planes, bf16 and f32 alike.
TEST(Pool2d, TwoByTwoFastPathAtEveryWidth) {
  const float nan = std::nanf("");
  const float pool_vals[] = {1, 3, 3, 0, 2, 2, 2, 2, 0, 0, 5, 5, nan, 1, 2, 3, 1, nan, nan, 0,
                             -1, -2, -3, -4, 4, 1, nan, 9, -0.0f, 0.0f, 7, -7};
  const int64_t nv = sizeof pool_vals / sizeof pool_vals[0];
  for (int64_t wo : {1, 3, 8, 15, 16, 17, 33}) {
    const int64_t c = 3, ho = 3, h = 2 * ho, w = 2 * wo;
    std::vector<float> xs(c * h * w);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = pool_vals[(i * 7 + i / w) % nv];
    for (DType dt : {DType::f32, DType::bf16}) {
      Tensor x = from_vector<float>(xs, {1, c, h, w}).to(dt);
      auto [y, idx] = ops::max_pool2d(x, pool({2, 2}, {2, 2}, {0, 0}));
      auto yv = y.to(DType::f32).to_vector<float>();
      auto iv = idx.to_vector<int64_t>();
      for (int64_t p = 0; p < c; ++p)
        for (int64_t oh = 0; oh < ho; ++oh)
          for (int64_t ow = 0; ow < wo; ++ow) {
            const int64_t taps[4] = {2 * oh * w + 2 * ow, 2 * oh * w + 2 * ow + 1,
                                     (2 * oh + 1) * w + 2 * ow, (2 * oh + 1) * w + 2 * ow + 1};
            float best = xs[p * h * w + taps[0]];
            int64_t best_i = taps[0];
            for (int t = 1; t < 4; ++t) {
              float v = xs[p * h * w + taps[t]];
              if (v > best || std::isnan(v)) best = v, best_i = taps[t];
            }
            const int64_t o = (p * ho + oh) * wo + ow;
            EXPECT_EQ(iv[o], best_i) << "wo " << wo << " output " << o << " " << dtype_name(dt);
            if (std::isnan(best)) {
              EXPECT_TRUE(std::isnan(yv[o])) << "wo " << wo << " output " << o;
            } else {
              EXPECT_EQ(yv[o], best) << "wo " << wo << " output " << o << " " << dtype_name(dt);
            }
          }
    }
  }
}

TEST(Pool2d, OverlappingWindowsAccumulate) {
  // Stride 1, kernel 2 on a plane whose max (the centre) is in all 4 windows.
  Tensor x = from_vector<double>({0, 0, 0, 0, 9, 0, 0, 0, 0}, {1, 1, 3, 3});
  auto [y, idx] = ops::max_pool2d(x, pool({2, 2}, {1, 1}, {0, 0}));
  Tensor dx = ops::max_pool2d_backward(ones({1, 1, 2, 2}, DType::f64), x, idx);
  EXPECT_EQ(dx.to_vector<double>()[4], 4.0);
}

TEST(Pool2d, AvgPoolCountIncludePad) {
  Tensor x = ones({1, 1, 2, 2});
  auto p = pool({2, 2}, {2, 2}, {1, 1});
  // Each 2x2 window holds one real element and three padding zeros.
  EXPECT_TRUE(all_close(ops::avg_pool2d(x, p), full({1, 1, 2, 2}, 0.25), 0, 0));
  p.count_include_pad = false;
  EXPECT_TRUE(all_close(ops::avg_pool2d(x, p), ones({1, 1, 2, 2}), 0, 0));
}

TEST(Pool2d, AdaptiveToOneIsTheMean) {
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {1, 1, 2, 3});
  EXPECT_TRUE(all_close(ops::adaptive_avg_pool2d(x, {1, 1}), full({1, 1, 1, 1}, 3.5), 0, 0));
}

template <typename E, typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

TEST(Pool2d, BadInputsRaiseNamedErrors) {
  expect_error<ValueError>([] { ops::max_pool2d(zeros({3, 4, 4}), pool({2, 2}, {2, 2}, {0, 0})); },
                           {"max_pool2d", "[3, 4, 4]"});
  expect_error<ValueError>([] { ops::max_pool2d(zeros({1, 1, 4, 4}), pool({2, 2}, {2, 2}, {2, 0})); },
                           {"max_pool2d", "half the kernel"});
  expect_error<ValueError>([] { ops::avg_pool2d(zeros({1, 1, 2, 2}), pool({3, 3}, {1, 1}, {0, 0})); },
                           {"avg_pool2d", "too small", "[1, 1, 2, 2]"});
  expect_error<TypeError>(
      [] { ops::avg_pool2d(zeros({1, 1, 4, 4}, DType::i64), pool({2, 2}, {2, 2}, {0, 0})); },
      {"avg_pool2d", "i64"});
  expect_error<ValueError>([] { ops::adaptive_avg_pool2d(zeros({1, 1, 4, 4}), {0, 2}); },
                           {"adaptive_avg_pool2d", "[0, 2]"});
  expect_error<ValueError>(
      [] {
        ops::avg_pool2d_backward(zeros({1, 1, 3, 3}), zeros({1, 1, 4, 4}),
                                 pool({2, 2}, {2, 2}, {0, 0}));
      },
      {"avg_pool2d_backward", "[1, 1, 2, 2]", "[1, 1, 3, 3]"});
  Tensor x = zeros({1, 1, 4, 4});
  auto [y, idx] = ops::max_pool2d(x, pool({2, 2}, {2, 2}, {0, 0}));
  Tensor bad = full({1, 1, 2, 2}, 99, DType::i64);
  expect_error<IndexError>([&] { ops::max_pool2d_backward(ones({1, 1, 2, 2}), x, bad); },
                           {"max_pool2d_backward", "99"});
}

}  // namespace
}  // namespace qk
