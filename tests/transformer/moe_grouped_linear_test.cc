// grouped_linear (one grouped GEMM over every expert) against a loop of
// per-expert linear calls: forward, the gradients of x, every weight and
// bias, empty groups, bf16 (oneDNN's fixed-shape tiles and zero-padded
// tails), f64 finite differences, and the errors.
#include <gtest/gtest.h>

#include "moe_testing.h"
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {
namespace {

using moe_test::rel_diff;
using moe_test::seeded_randn;

struct Problem {
  Tensor x, dy;
  std::vector<Tensor> w, b;
};

// Leaves that require grad: x [M, K], per group w [N, K] and b [N].
Problem make_problem(const std::vector<int64_t>& rows, int64_t k, int64_t n, DType dt, bool bias) {
  int64_t m = 0;
  for (int64_t r : rows) m += r;
  Problem p;
  p.x = seeded_randn({m, k}, 1, dt).requires_grad_();
  p.dy = seeded_randn({m, n}, 2, dt);
  for (size_t g = 0; g < rows.size(); ++g) {
    p.w.push_back(seeded_randn({n, k}, 10 + g, dt).requires_grad_());
    if (bias) p.b.push_back(seeded_randn({n}, 100 + g, dt).requires_grad_());
  }
  return p;
}

// The same problem on fresh leaves (separate gradients).
Problem clone_leaves(const Problem& p) {
  Problem q;
  q.x = p.x.detach().clone().requires_grad_();
  q.dy = p.dy;
  for (const Tensor& w : p.w) q.w.push_back(w.detach().clone().requires_grad_());
  for (const Tensor& b : p.b) q.b.push_back(b.detach().clone().requires_grad_());
  return q;
}

// Reference: one linear per group on its rows, concatenated.
Tensor loop_of_linears(const Problem& p, const std::vector<int64_t>& rows) {
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    parts.push_back(linear(p.x.narrow(0, at, rows[g]), p.w[g], p.b.empty() ? Tensor() : p.b[g]));
    at += rows[g];
  }
  return cat(parts, 0);
}

// Forward and every gradient of grouped_linear within tol of the loop (the
// loop in f32 when the problem is bf16).
void expect_matches_loop(const std::vector<int64_t>& rows, int64_t k, int64_t n, DType dt, bool bias, double tol) {
  const Problem got = make_problem(rows, k, n, dt, bias);
  Problem want = clone_leaves(got);
  if (dt != DType::f32) {  // the reference in f32 on the same (rounded) values
    want.x = want.x.detach().to(DType::f32).requires_grad_();
    want.dy = want.dy.to(DType::f32);
    for (Tensor& w : want.w) w = w.detach().to(DType::f32).requires_grad_();
    for (Tensor& b : want.b) b = b.detach().to(DType::f32).requires_grad_();
  }
  const Tensor y = grouped_linear(got.x, rows, got.w, got.b);
  const Tensor y_ref = loop_of_linears(want, rows);
  ASSERT_EQ(y.dtype(), dt);
  EXPECT_LE(rel_diff(y, y_ref), tol) << "forward";
  y.backward(got.dy);
  y_ref.backward(want.dy);
  EXPECT_LE(rel_diff(got.x.grad(), want.x.grad()), tol) << "dx";
  for (size_t g = 0; g < rows.size(); ++g) {
    ASSERT_TRUE(got.w[g].grad().defined()) << "group " << g;
    if (rows[g] == 0) {
      EXPECT_EQ(rel_diff(got.w[g].grad(), zeros({n, k})), 0.0) << "empty group " << g << " has a weight gradient";
    } else {
      EXPECT_LE(rel_diff(got.w[g].grad(), want.w[g].grad()), tol) << "dW of group " << g;
    }
    if (bias) {
      EXPECT_LE(rel_diff(got.b[g].grad(), rows[g] ? want.b[g].grad() : zeros({n})), tol) << "db " << g;
    }
  }
}

TEST(MoEGroupedLinear, EqualsPerExpertLinearInF32) {
  expect_matches_loop({5, 0, 17, 3}, 24, 40, DType::f32, false, 1e-6);
  expect_matches_loop({130, 1, 0, 260}, 16, 20, DType::f32, true, 1e-6);  // more than one row tile
  expect_matches_loop({3, 5}, 8, 200, DType::f32, true, 1e-6);  // few rows: column tiles too
}

TEST(MoEGroupedLinear, EmptyGroupsAndNoRows) {
  expect_matches_loop({0, 7, 0}, 8, 12, DType::f32, true, 1e-6);
  const Problem p = make_problem({0, 0}, 8, 12, DType::f32, false);
  const Tensor y = grouped_linear(p.x, {0, 0}, p.w);
  EXPECT_EQ(y.shape(), (Shape{0, 12}));
  y.sum().backward();
  EXPECT_EQ(rel_diff(p.w[1].grad(), zeros({12, 8})), 0.0);
}

TEST(MoEGroupedLinear, Bf16WithinRoundingOfTheF32Loop) {
  // Row counts around the 64-row bf16 tiles and the 256-row reduction
  // chunks: whole tiles, padded tails, an empty group, a single row.
  expect_matches_loop({64, 1, 0, 100, 300}, 32, 48, DType::bf16, true, 2e-2);
  expect_matches_loop({63, 129}, 40, 24, DType::bf16, false, 2e-2);
  expect_matches_loop({3, 5}, 8, 200, DType::bf16, true, 2e-2);  // column tiles
}

TEST(MoEGroupedLinear, UnderAutocastRunsInBf16WithF32Gradients) {
  const std::vector<int64_t> rows{3, 9};
  const Problem p = make_problem(rows, 16, 8, DType::f32, false);
  Tensor y;
  {
    autocast::Guard amp(DType::bf16);
    y = grouped_linear(p.x, rows, p.w);
  }
  EXPECT_EQ(y.dtype(), DType::bf16);
  y.to(DType::f32).sum().backward();
  EXPECT_EQ(p.w[0].grad().dtype(), DType::f32);
  EXPECT_EQ(p.x.grad().dtype(), DType::f32);
}

TEST(MoEGroupedLinear, GradientsMatchFiniteDifferences) {
  const std::vector<int64_t> rows{2, 0, 3};
  std::vector<Tensor> in{seeded_randn({5, 4}, 1, DType::f64).requires_grad_()};
  for (int g = 0; g < 3; ++g) in.push_back(seeded_randn({3, 4}, 20 + g, DType::f64).requires_grad_());
  for (int g = 0; g < 3; ++g) in.push_back(seeded_randn({3}, 30 + g, DType::f64).requires_grad_());
  const Tensor mix = seeded_randn({5, 3}, 3, DType::f64);
  auto f = [&](const std::vector<Tensor>& v) {
    return (grouped_linear(v[0], rows, {v[1], v[2], v[3]}, {v[4], v[5], v[6]}) * mix).sum();
  };
  const auto r = autograd::gradcheck(f, in);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(MoEGroupedLinear, RejectsMismatchedGroups) {
  const Tensor x = zeros({5, 4});
  const std::vector<Tensor> w{zeros({3, 4}), zeros({3, 4})};
  EXPECT_THROW(grouped_linear(x, {2, 2}, w), ValueError);        // rows add up to 4, x has 5
  EXPECT_THROW(grouped_linear(x, {5}, w), ValueError);           // one count, two weights
  EXPECT_THROW(grouped_linear(x, {6, -1}, w), ValueError);       // negative count
  EXPECT_THROW(grouped_linear(x, {2, 3}, {zeros({3, 4}), zeros({2, 4})}), ValueError);  // shapes differ
  EXPECT_THROW(grouped_linear(x, {2, 3}, {zeros({3, 5}), zeros({3, 5})}), ValueError);  // K differs
  EXPECT_THROW(grouped_linear(x, {2, 3}, w, {zeros({4}), zeros({4})}), ValueError);     // bias size
}

}  // namespace
}  // namespace qk::transformer
