// The fused gradient passes (src/optim/grad_kernels.h): the sum of squares
// against a long-double reference over lengths that end inside a SIMD lane
// group and cross chunks, inf and NaN found wherever they sit (a lane, the
// tail), the unscale applied, and the same bits whatever the thread count.
#include "grad_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "qk/base/thread_pool.h"

namespace {

using qk::optim::kernels::Span;

std::vector<float> random_grads(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0, 1e-2f);
  std::vector<float> g(n);
  for (float& v : g) v = d(gen);
  return g;
}

TEST(GradKernels, SumOfSquaresMatchesALongDoubleSum) {
  for (int64_t n : {1, 15, 16, 17, 1000, (1 << 15) - 3, (1 << 15) + 37, 200000}) {
    std::vector<float> a = random_grads(n, 1), b = random_grads(n / 3 + 1, 2);
    long double want = 0;
    for (float v : a) want += static_cast<long double>(v) * v;
    for (float v : b) want += static_cast<long double>(v) * v;
    const auto r = qk::optim::kernels::unscale_check_and_norm({{a.data(), n}, {b.data(), n / 3 + 1}}, 1.0f);
    EXPECT_FALSE(r.found_inf) << n;
    EXPECT_NEAR(r.sum_squares, static_cast<double>(want), 1e-13 * static_cast<double>(want)) << n;
  }
}

TEST(GradKernels, UnscalesAndSumsTheUnscaledValues) {
  std::vector<float> g = random_grads(1037, 3);
  const std::vector<float> before = g;
  const auto r = qk::optim::kernels::unscale_check_and_norm({{g.data(), 1037}}, 0.25f);
  long double want = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(g[i], before[i] * 0.25f) << i;
    want += static_cast<long double>(g[i]) * g[i];
  }
  EXPECT_NEAR(r.sum_squares, static_cast<double>(want), 1e-13 * static_cast<double>(want));
}

TEST(GradKernels, FindsInfAndNanInLanesAndTails) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {inf, -inf, nan})
    for (int64_t at : {0, 7, 15, 16, 40, 1032, 1036}) {  // 1037 values: 1032-1036 are the tail past 64 groups
      std::vector<float> g = random_grads(1037, 4);
      g[at] = bad;
      EXPECT_TRUE(qk::optim::kernels::unscale_check_and_norm({{g.data(), 1037}}, 1.0f).found_inf) << at;
      EXPECT_TRUE(qk::optim::kernels::unscale_check_and_norm({{g.data(), 1037}}, 0.5f).found_inf) << at;
    }
  std::vector<float> big(64, 3e38f);  // finite, though its square overflows a float
  EXPECT_FALSE(qk::optim::kernels::unscale_check_and_norm({{big.data(), 64}}, 1.0f).found_inf);
}

TEST(GradKernels, TheSumIsTheSameOnAnyThreadCount) {
  std::vector<float> g = random_grads(300000, 5);
  const int threads = qk::num_threads();
  qk::set_num_threads(1);
  const double one = qk::optim::kernels::unscale_check_and_norm({{g.data(), 300000}}, 1.0f).sum_squares;
  qk::set_num_threads(2);
  const double two = qk::optim::kernels::unscale_check_and_norm({{g.data(), 300000}}, 1.0f).sum_squares;
  qk::set_num_threads(threads);
  EXPECT_EQ(one, two);
}

}  // namespace
