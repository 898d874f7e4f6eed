// The flash-attention CPU kernel's pieces below the op (src/tensor/cpu/flash_attention_*):
// the op itself is tested through autograd in tests/autograd/flash_attention_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/flash_attention_simd.h"
#include "qk/tensor/ops/attention.h"

namespace qk {
namespace {

TEST(FlashAttention, SoftmaxExpIsAccurate) {
  // The softmax step's exp2 (a polynomial, vectorised): a tile whose first key
  // scores 0 and second x <= 0 leaves 2^x as the second probability.
  const int64_t n = 4096;
  std::vector<float> s(2 * n), m(n, -INFINITY), l(n, 0.0f);
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) {
    const double x = -30.0 * static_cast<double>(i) / n - 1e-3 * (i % 7);
    s[i] = 0;
    s[n + i] = static_cast<float>(x);
    want[i] = std::exp2(static_cast<double>(static_cast<float>(x)));
  }
  for (const cpu::flash::Leaves* lv : cpu::flash::available_leaves()) {
    std::vector<float> tile = s, mm = m, ll = l;
    lv->softmax_update(tile.data(), 1.0f, 2, n, cpu::flash::TileMask{}, mm.data(), ll.data(),
                       nullptr, 0);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(tile[n + i] / want[i] - 1));
    EXPECT_LT(worst, 1.5e-7) << lv->isa;  // measured 6.8e-8
    EXPECT_EQ(tile[0], 1.0f) << lv->isa;
  }
}

TEST(FlashAttention, VariantsCanBeChosenByName) {
  const std::vector<std::string> names = ops::flash_attention_cpu_variants();
  ASSERT_FALSE(names.empty());
  for (const std::string& n : names) {
    ops::set_flash_attention_cpu_variant(n);
    EXPECT_EQ(cpu::flash::leaves().isa, n);
  }
  ops::set_flash_attention_cpu_variant("");
  EXPECT_EQ(cpu::flash::leaves().isa, names.front());
  EXPECT_THROW(ops::set_flash_attention_cpu_variant("sse2"), ValueError);
}

}  // namespace
}  // namespace qk
