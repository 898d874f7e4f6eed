// cat, stack, split, chunk, index_select, index_add, gather, scatter_add,
// topk and one_hot raw ops: hand-computed values (PyTorch's documented
// semantics), strided inputs, all dtypes where byte copies apply, bad input.
#include "qk/tensor/ops/index.h"

#include <gtest/gtest.h>

#include <string>

#include "common/fixtures.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

using test::all_close;

Tensor iota(const Shape& s, DType dt = DType::f32) {
  return ops::cast(ops::reshape(arange(shape_numel(s)), s), dt);
}
Tensor vals(std::vector<double> v, const Shape& s, DType dt = DType::f32) {
  return from_vector<double>(v, s, dt);
}
Tensor idx(std::vector<int64_t> v, const Shape& s) { return from_vector<int64_t>(v, s); }

TEST(Cat, JoinsAlongAnyDim) {
  Tensor a = iota({2, 2}), b = vals({10, 11}, {1, 2});
  EXPECT_TRUE(all_close(ops::cat({a, b}, 0), vals({0, 1, 2, 3, 10, 11}, {3, 2})));
  Tensor c = vals({7, 8}, {2, 1});
  EXPECT_TRUE(all_close(ops::cat({a, c}, -1), vals({0, 1, 7, 2, 3, 8}, {2, 3})));
  // Empty pieces and a strided (transposed) piece.
  Tensor e = zeros({2, 0});
  EXPECT_TRUE(all_close(ops::cat({e, ops::transpose(a, 0, 1), e}, 1), vals({0, 2, 1, 3}, {2, 2})));
  // Byte copies work for every dtype.
  for (DType dt : {DType::i64, DType::u8, DType::bf16, DType::f64}) {
    Tensor x = ops::cast(iota({2, 3}), dt);
    EXPECT_EQ(ops::cat({x, x}, 1).to_vector<double>(),
              (std::vector<double>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}))
        << dtype_name(dt);
  }
}

TEST(Cat, StackAddsADim) {
  Tensor a = vals({1, 2}, {2}), b = vals({3, 4}, {2});
  EXPECT_TRUE(all_close(ops::stack({a, b}, 0), vals({1, 2, 3, 4}, {2, 2})));
  EXPECT_TRUE(all_close(ops::stack({a, b}, -1), vals({1, 3, 2, 4}, {2, 2})));
}

TEST(Cat, BadInputRaisesNamedErrors) {
  try {
    ops::cat({zeros({2, 3}), zeros({2, 4})}, 0);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cat"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::cat({zeros({2}), zeros({2}, DType::f64)}, 0), TypeError);
  EXPECT_THROW(ops::cat({}, 0), ValueError);
  EXPECT_THROW(ops::cat({zeros({2})}, 1), IndexError);
  EXPECT_THROW(ops::stack({zeros({2}), zeros({3})}, 0), ValueError);
  EXPECT_THROW(ops::stack({zeros({2})}, 3), IndexError);
}

TEST(Split, ViewsOfPieces) {
  Tensor a = iota({5, 2});
  auto p = ops::split(a, 2, 0);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[2].shape(), (Shape{1, 2}));
  EXPECT_TRUE(all_close(p[1], vals({4, 5, 6, 7}, {2, 2})));
  EXPECT_EQ(p[1].storage().get(), a.storage().get());  // a view, no copy
  auto q = ops::split_with_sizes(a, {1, 4}, 0);
  EXPECT_TRUE(all_close(q[0], vals({0, 1}, {1, 2})));
  // chunk: pieces of ceil(5 / 3) = 2, as PyTorch.
  auto c = ops::chunk(a, 3, 0);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].size(0), 2);
  EXPECT_EQ(ops::chunk(a, 2, 1).size(), 2u);
  EXPECT_THROW(ops::split_with_sizes(a, {1, 2}, 0), ValueError);
  EXPECT_THROW(ops::split(a, 0, 0), ValueError);
  EXPECT_THROW(ops::chunk(a, 0, 0), ValueError);
}

TEST(IndexSelect, PicksRowsAndColumns) {
  Tensor a = iota({3, 4});
  EXPECT_TRUE(all_close(ops::index_select(a, 0, idx({2, 0, 2}, {3})),
                        vals({8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}, {3, 4})));
  EXPECT_TRUE(all_close(ops::index_select(a, 1, ops::cast(idx({3, 1}, {2}), DType::i32)),
                        vals({3, 1, 7, 5, 11, 9}, {3, 2})));
  EXPECT_TRUE(all_close(ops::index_select(ops::transpose(a, 0, 1), 0, idx({1}, {1})),
                        vals({1, 5, 9}, {1, 3})));
  EXPECT_THROW(ops::index_select(a, 0, idx({3}, {1})), IndexError);
  EXPECT_THROW(ops::index_select(a, 0, idx({0, 1}, {1, 2})), ValueError);
  EXPECT_THROW(ops::index_select(a, 0, zeros({1})), TypeError);
}

TEST(IndexAdd, AccumulatesDuplicates) {
  Tensor a = ones({3, 2});
  Tensor src = vals({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_TRUE(
      all_close(ops::index_add(a, 0, idx({0, 2, 0}, {3}), src), vals({7, 9, 1, 1, 4, 5}, {3, 2})));
  EXPECT_TRUE(all_close(a, ones({3, 2})));  // out of place
  EXPECT_THROW(ops::index_add(a, 0, idx({0}, {1}), src), ValueError);
}

// Reduced floats sum in f32 and round once (Note [Reduced-float sums] in
// cpu/index.cc): in bf16, 1000 ones added one at a time stall at 256.
TEST(IndexAdd, ReducedFloatsAccumulateInF32) {
  const Tensor rows = ops::cast(zeros({1000}), DType::i64);
  for (DType t : {DType::bf16, DType::f16}) {
    Tensor added = ops::index_add(zeros({2, 3}, t), 0, rows, ones({1000, 3}, t));
    EXPECT_EQ(added.dtype(), t);
    EXPECT_EQ(ops::cast(added, DType::f64).to_vector<double>(),
              (std::vector<double>{1000, 1000, 1000, 0, 0, 0})) << dtype_name(t);
    Tensor scattered = ops::scatter_add(zeros({2, 3}, t), 0, ops::cast(zeros({1000, 3}), DType::i64),
                                        ones({1000, 3}, t));
    EXPECT_EQ(scattered.dtype(), t);
    EXPECT_EQ(ops::cast(scattered, DType::f64).to_vector<double>(),
              (std::vector<double>{1000, 1000, 1000, 0, 0, 0})) << dtype_name(t);
  }
}

TEST(Gather, PicksAlongDim) {
  // torch.gather([[1,2],[3,4]], 1, [[0,0],[1,0]]) = [[1,1],[4,3]]
  Tensor a = vals({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(all_close(ops::gather(a, 1, idx({0, 0, 1, 0}, {2, 2})), vals({1, 1, 4, 3}, {2, 2})));
  // dim 0, an index smaller than the input in the other dim.
  Tensor b = iota({3, 4});
  EXPECT_TRUE(all_close(ops::gather(b, 0, idx({2, 0, 1, 1}, {2, 2})), vals({8, 1, 4, 5}, {2, 2})));
  // 3-d, middle dim.
  Tensor c = iota({2, 3, 2});
  EXPECT_TRUE(
      all_close(ops::gather(c, 1, idx({2, 0, 1, 1}, {2, 1, 2})), vals({4, 1, 8, 9}, {2, 1, 2})));
  EXPECT_THROW(ops::gather(a, 1, idx({2, 0}, {2, 1})), IndexError);
  EXPECT_THROW(ops::gather(a, 1, idx({0, 0, 0}, {3})), ValueError);
}

TEST(ScatterAdd, AddsAtIndices) {
  // Along dim 1 (rows independent) and dim 0 (collisions across rows).
  Tensor z = zeros({2, 3});
  Tensor src = vals({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(all_close(ops::scatter_add(z, 1, idx({2, 2, 0, 1}, {2, 2}), src),
                        vals({0, 0, 3, 3, 4, 0}, {2, 3})));
  // (Index {1, 1, 1, 0} would do, but GCC 12.2 -march=native miscompiles that
  // literal into {1, 1, 1, 1}: see docs/nn_ops.md.)
  EXPECT_TRUE(all_close(ops::scatter_add(z, 0, idx({1, 0, 1, 1}, {2, 2}), src),
                        vals({0, 2, 0, 4, 4, 0}, {2, 3})));
  // src larger than index: only index's extent is used.
  Tensor big = vals({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(all_close(ops::scatter_add(zeros({2, 2}), 1, idx({1, 1}, {2, 1}), big),
                        vals({0, 1, 0, 4}, {2, 2})));
  // i64 values.
  EXPECT_EQ(ops::scatter_add(zeros({3}, DType::i64), 0, idx({0, 0, 2}, {3}), idx({5, 6, 7}, {3}))
                .to_vector<int64_t>(),
            (std::vector<int64_t>{11, 0, 7}));
  EXPECT_THROW(ops::scatter_add(z, 1, idx({3}, {1, 1}), src), IndexError);
  EXPECT_THROW(ops::scatter_add(z, 1, idx({0, 0, 0, 0, 0, 0}, {2, 3}), src), ValueError);
  EXPECT_THROW(ops::scatter_add(z, 1, idx({0}, {1, 1}), ops::cast(src, DType::f64)), TypeError);
}

TEST(Topk, LargestSmallestAndDims) {
  Tensor a = vals({1, 5, 3, 5, 0, 9, 2, 7}, {2, 4});
  auto [v, i] = ops::topk(a, 2, -1, true, true);
  EXPECT_TRUE(all_close(v, vals({5, 5, 9, 7}, {2, 2})));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 1, 3}));  // ties: lower index first
  auto [vs, is] = ops::topk(a, 1, 1, false, true);
  EXPECT_TRUE(all_close(vs, vals({1, 0}, {2, 1})));
  EXPECT_EQ(is.to_vector<int64_t>(), (std::vector<int64_t>{0, 0}));
  auto [v0, i0] = ops::topk(a, 1, 0, true, true);
  EXPECT_TRUE(all_close(v0, vals({1, 9, 3, 7}, {1, 4})));
  EXPECT_EQ(i0.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 1}));
  // NaN ranks as the largest, as PyTorch.
  Tensor n = vals({1, std::nan(""), 3}, {3});
  EXPECT_EQ(ops::topk(n, 1, 0, true, true).second.item<int64_t>(), 1);
  EXPECT_THROW(ops::topk(a, 5, -1, true, true), ValueError);
  EXPECT_THROW(ops::topk(a, 1, 2, true, true), IndexError);
}

TEST(OneHot, EncodesAndInfers) {
  Tensor i = idx({0, 2, 1}, {3});
  EXPECT_EQ(ops::one_hot(i, 3).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 0, 0, 0, 0, 1, 0, 1, 0}));
  EXPECT_EQ(ops::one_hot(i, -1).shape(), (Shape{3, 3}));
  EXPECT_THROW(ops::one_hot(i, 2), IndexError);
  EXPECT_THROW(ops::one_hot(zeros({2}), 2), TypeError);
}

}  // namespace
}  // namespace qk
