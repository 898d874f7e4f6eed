// cat, stack, split, chunk, index_select, gather, scatter_add, index_add and topk
// through autograd: finite-difference checks in f64 and f32.
#include <gtest/gtest.h>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/tensor/generator.h"

namespace qk {
namespace {

using autograd::gradcheck;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

void check(const std::vector<Shape>& shapes, const Fn& f, DType dt) {
  Generator g(13);
  std::vector<Tensor> in;
  for (const auto& s : shapes) in.push_back(randn(s, TensorOptions(dt), g).requires_grad_());
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

Tensor idx(std::vector<int64_t> v, const Shape& s) { return from_vector<int64_t>(v, s); }

class IndexGrad : public ::testing::TestWithParam<DType> {};

TEST_P(IndexGrad, CatAndStack) {
  check(
      {{2, 3}, {2, 1}, {2, 2}}, [](const std::vector<Tensor>& v) { return cat(v, 1); }, GetParam());
  check(
      {{2, 3}, {2, 3}}, [](const std::vector<Tensor>& v) { return stack(v, 1); }, GetParam());
}

TEST_P(IndexGrad, SplitAndChunk) {
  // Uses only some pieces: the others' gradients are zeros.
  check(
      {{5, 2}},
      [](const std::vector<Tensor>& v) {
        auto p = split(v[0], 2, 0);
        return cat({mul(p[2], 3.0), p[0]}, 0);
      },
      GetParam());
  check(
      {{3, 6}},
      [](const std::vector<Tensor>& v) {
        auto p = chunk(v[0], 3, 1);
        return add(p[1], p[2]);
      },
      GetParam());
}

TEST_P(IndexGrad, IndexSelect) {
  check(
      {{4, 3}},
      [](const std::vector<Tensor>& v) {
        return index_select(v[0], 0, idx({3, 0, 3}, {3}));
      },
      GetParam());
  check(
      {{2, 4}},
      [](const std::vector<Tensor>& v) {
        return index_select(v[0], 1, idx({1, 1}, {2}));
      },
      GetParam());
}

TEST_P(IndexGrad, GatherAndScatterAdd) {
  check(
      {{3, 4}},
      [](const std::vector<Tensor>& v) {
        return gather(v[0], 1, idx({0, 3, 3, 1, 2, 2}, {3, 2}));
      },
      GetParam());
  check(
      {{3, 4}},
      [](const std::vector<Tensor>& v) {
        return gather(v[0], 0, idx({2, 0, 2, 1}, {1, 4}));
      },
      GetParam());
  check(
      {{2, 3}, {2, 3}},
      [](const std::vector<Tensor>& v) {
        return scatter_add(v[0], 1, idx({0, 0, 2, 1}, {2, 2}), v[1]);
      },
      GetParam());
  // Whole rows added at a repeated index (rows 0 and 2 of src both into row 1), and along dim 1.
  check(
      {{3, 2}, {4, 2}},
      [](const std::vector<Tensor>& v) { return index_add(v[0], 0, idx({1, 0, 1, 2}, {4}), v[1]); },
      GetParam());
  check(
      {{2, 3}, {2, 2}},
      [](const std::vector<Tensor>& v) { return index_add(v[0], 1, idx({2, 2}, {2}), v[1]); },
      GetParam());
}

TEST_P(IndexGrad, Topk) {
  check(
      {{3, 5}}, [](const std::vector<Tensor>& v) { return topk(v[0], 2, 1).first; }, GetParam());
  check(
      {{4, 2}}, [](const std::vector<Tensor>& v) { return topk(v[0], 3, 0, false).first; },
      GetParam());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, IndexGrad, ::testing::Values(DType::f64, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(IndexAutograd, TopkIndicesCarryNoGradient) {
  Tensor x = from_vector<double>({1, 4, 2}, {3}, DType::f64).requires_grad_();
  auto [v, i] = topk(x, 1);
  EXPECT_TRUE(v.requires_grad());
  EXPECT_FALSE(i.requires_grad());
  sum(v).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 0}));
}

}  // namespace
}  // namespace qk
