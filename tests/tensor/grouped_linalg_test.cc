// Grouped products (qk/tensor/ops/grouped_linalg.h) against one plain
// product per group: both right-operand layouts, biases, empty groups, row
// counts around the tile sizes, the weight-gradient form, bf16 (the tests
// named Bf16Matmul.* also run with QK_GEMM_BF16=f32, the fallback path), and
// the errors.
//
// Tolerance: f32/f64 the same products cut into tiles, 1e-6 of each result's
// largest entry (f64: 1e-12); bf16 accumulates in f32 and rounds once, 2^-7.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "qk/autograd/functions.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/grouped_linalg.h"
#include "qk/tensor/ops/index.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

// max |a - b| / max |b|, in f64.
double rel_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  const Tensor x = ops::contiguous(ops::cast(a, DType::f64)), y = ops::contiguous(ops::cast(b, DType::f64));
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    num = std::max(num, std::abs(x.data_ptr<double>()[i] - y.data_ptr<double>()[i]));
    den = std::max(den, std::abs(y.data_ptr<double>()[i]));
  }
  return den > 0 ? num / den : num;
}

Tensor random(const Shape& s, uint64_t seed, DType dt) {
  Generator g(seed);
  return ops::cast(randn(s, {}, g), dt);
}

int64_t total(const std::vector<int64_t>& rows) {
  int64_t m = 0;
  for (int64_t r : rows) m += r;
  return m;
}

// One product per group, in f64, of the same values.
Tensor per_group(const Tensor& a, const std::vector<int64_t>& rows, const std::vector<Tensor>& b, bool trans_b,
                 const std::vector<Tensor>& bias) {
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    const Tensor bg = ops::cast(trans_b ? ops::transpose(b[g], 0, 1) : b[g], DType::f64);
    Tensor y = ops::mm(ops::cast(ops::narrow(a, 0, at, rows[g]), DType::f64), bg);
    if (!bias.empty()) y = add(y, ops::cast(bias[g], DType::f64));
    parts.push_back(y);
    at += rows[g];
  }
  return ops::cat(parts, 0);
}

void expect_grouped_mm(const std::vector<int64_t>& rows, int64_t k, int64_t n, bool trans_b, bool bias, DType dt,
                       double tol) {
  const Tensor a = random({total(rows), k}, 1, dt);
  std::vector<Tensor> b, bs;
  for (size_t g = 0; g < rows.size(); ++g) {
    b.push_back(random(trans_b ? Shape{n, k} : Shape{k, n}, 10 + g, dt));
    if (bias) bs.push_back(random({n}, 50 + g, dt));
  }
  const Tensor y = ops::grouped_mm(a, rows, b, trans_b, bs);
  EXPECT_EQ(y.dtype(), dt);
  EXPECT_LE(rel_diff(y, per_group(a, rows, b, trans_b, bs)), tol)
      << dtype_name(dt) << " k " << k << " n " << n << (trans_b ? " trans_b" : "") << (bias ? " bias" : "");
}

void expect_grouped_mm_tn(const std::vector<int64_t>& rows, int64_t p, int64_t q, DType dt, double tol) {
  const Tensor a = random({total(rows), p}, 2, dt), b = random({total(rows), q}, 3, dt);
  const std::vector<Tensor> out = ops::grouped_mm_tn(a, b, rows);
  ASSERT_EQ(out.size(), rows.size());
  int64_t at = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    const Tensor want = ops::mm(ops::cast(ops::transpose(ops::narrow(a, 0, at, rows[g]), 0, 1), DType::f64),
                                ops::cast(ops::narrow(b, 0, at, rows[g]), DType::f64));
    EXPECT_EQ(out[g].dtype(), dt);
    EXPECT_LE(rel_diff(out[g], want), rows[g] ? tol : 0.0) << dtype_name(dt) << " group " << g << " of " << rows[g];
    at += rows[g];
  }
}

TEST(GroupedMm, EqualsOneProductPerGroup) {
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 1e-6 : 1e-12;
    for (bool trans_b : {true, false}) {
      expect_grouped_mm({5, 0, 17, 3}, 24, 40, trans_b, false, dt, tol);
      expect_grouped_mm({130, 1, 0, 260}, 16, 20, trans_b, true, dt, tol);  // several row tiles
      expect_grouped_mm({3, 5}, 8, 200, trans_b, true, dt, tol);            // few rows: column tiles
    }
  }
}

TEST(GroupedMm, WeightGradientFormEqualsOneProductPerGroup) {
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 1e-6 : 1e-12;
    expect_grouped_mm_tn({5, 0, 17, 3}, 24, 40, dt, tol);
    expect_grouped_mm_tn({2, 3}, 300, 16, dt, tol);  // a wide result: split over threads
  }
}

TEST(GroupedMm, EmptyShapes) {
  const std::vector<Tensor> b{random({6, 4}, 1, DType::f32), random({6, 4}, 2, DType::f32)};
  EXPECT_EQ(ops::grouped_mm(zeros({0, 4}), {0, 0}, b, true).shape(), (Shape{0, 6}));
  // K = 0: the bias alone (an empty sum).
  const std::vector<Tensor> bias{full({3}, 1.5), full({3}, -2.0)};
  const Tensor y = ops::grouped_mm(zeros({3, 0}), {1, 2}, {zeros({3, 0}), zeros({3, 0})}, true, bias);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1.5, 1.5, 1.5, -2, -2, -2, -2, -2, -2}));
  const std::vector<Tensor> dw = ops::grouped_mm_tn(zeros({0, 3}), zeros({0, 2}), {0});
  EXPECT_EQ(dw[0].to_vector<float>(), (std::vector<float>(6, 0.0f)));
}

TEST(GroupedMm, RejectsInconsistentGroups) {
  const Tensor a = zeros({5, 4});
  const std::vector<Tensor> b{zeros({3, 4}), zeros({3, 4})};
  EXPECT_THROW(ops::grouped_mm(a, {2, 2}, b, true), ValueError);                           // 4 rows of 5
  EXPECT_THROW(ops::grouped_mm(a, {5}, b, true), ValueError);                              // 1 count, 2 matrices
  EXPECT_THROW(ops::grouped_mm(a, {6, -1}, b, true), ValueError);                          // negative
  EXPECT_THROW(ops::grouped_mm(a, {2, 3}, {zeros({3, 4}), zeros({2, 4})}, true), ValueError);  // shapes differ
  EXPECT_THROW(ops::grouped_mm(a, {2, 3}, b, false), ValueError);                          // K mismatch
  EXPECT_THROW(ops::grouped_mm(a, {2, 3}, {zeros({3, 4}, DType::f64), zeros({3, 4}, DType::f64)}, true),
               TypeError);
  EXPECT_THROW(ops::grouped_mm_tn(a, zeros({4, 2}), {5}), ValueError);  // rows differ
}

// Named Bf16Matmul.* so ctest also runs it on the f32 fallback (QK_GEMM_BF16=f32).
TEST(Bf16Matmul, GroupedProductsWithinRoundingOfF32) {
  constexpr double kTol = 1.0 / 128;
  // Around the 64-row tiles, their 16-row padded tails and the 256-row
  // reduction chunks: whole tiles, tails, an empty group, a single row.
  for (bool trans_b : {true, false}) {
    expect_grouped_mm({64, 1, 0, 100, 300}, 32, 48, trans_b, true, DType::bf16, kTol);
    expect_grouped_mm({3, 5}, 8, 200, trans_b, false, DType::bf16, kTol);
  }
  expect_grouped_mm_tn({64, 1, 0, 100, 300}, 32, 48, DType::bf16, kTol);
  expect_grouped_mm_tn({17, 257}, 200, 8, DType::bf16, kTol);
  // f16 runs in f32.
  expect_grouped_mm({7, 9}, 16, 8, true, true, DType::f16, 1.0 / 512);
}

}  // namespace
}  // namespace qk
