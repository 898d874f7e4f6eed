// The split of a device reduction (src/tensor/reduce_plan.h): which reduced
// dims are read in place, and how many parts each output is reduced in.
#include "reduce_plan.h"

#include <gtest/gtest.h>

namespace qk {
namespace {

void expect_shape(const std::optional<ReduceShape>& got, int64_t outer, int64_t n, int64_t inner) {
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->outer, outer);
  EXPECT_EQ(got->n, n);
  EXPECT_EQ(got->inner, inner);
}

TEST(ReducePlan, AdjacentReducedDimsAreTheMiddleOfThreeDims) {
  expect_shape(reduce_as_middle({4, 5, 6}, {2}), 20, 6, 1);        // last dim: rows
  expect_shape(reduce_as_middle({4, 5, 6}, {0}), 1, 4, 30);        // first dim: columns (a bias gradient)
  expect_shape(reduce_as_middle({4, 5, 6}, {1}), 4, 5, 6);         // a middle dim
  expect_shape(reduce_as_middle({4, 5, 6}, {0, 1}), 1, 20, 6);     // leading dims together
  expect_shape(reduce_as_middle({4, 5, 6}, {2, 1}), 4, 30, 1);     // in any order
  expect_shape(reduce_as_middle({4, 5, 6}, {0, 1, 2}), 1, 120, 1);  // everything
}

TEST(ReducePlan, DimsOfSizeOneMaySitAnywhere) {
  expect_shape(reduce_as_middle({4, 1, 6}, {0, 2}), 1, 24, 1);  // the kept size-1 dim is no gap
  expect_shape(reduce_as_middle({4, 1, 6}, {1}), 24, 1, 1);     // only a size-1 dim: n is 1
  expect_shape(reduce_as_middle({}, {}), 1, 1, 1);              // a scalar
}

TEST(ReducePlan, KeptDimsBetweenReducedOnesNeedACopy) {
  EXPECT_FALSE(reduce_as_middle({4, 5, 6}, {0, 2}).has_value());
  EXPECT_FALSE(reduce_as_middle({2, 3, 4, 5}, {1, 3}).has_value());
}

TEST(ReducePlan, EmptyReductionsAndOutputs) {
  expect_shape(reduce_as_middle({4, 0, 6}, {1}), 4, 0, 6);
  const ReducePlan p = plan_reduce({4, 0, 6}, 132);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.span, 0);
  EXPECT_EQ(p.blocks, 4);  // each writes its outputs' identity (0, or NaN for a mean)
  EXPECT_EQ(plan_reduce({0, 100, 1}, 132).blocks, 0);
}

// Every element belongs to exactly one part, no part is empty.
void expect_parts_cover(const ReduceShape& s, const ReducePlan& p) {
  ASSERT_GE(p.splits, 1);
  EXPECT_GE(p.splits * p.span, s.n);
  if (s.n > 0) {
    EXPECT_LT((p.splits - 1) * p.span, s.n);
  }
}

TEST(ReducePlan, FewLongRowsAreSplitToFillTheDevice) {
  const ReduceShape whole{1, 50'000'000, 1};  // a norm over all of a large parameter
  const ReducePlan p = plan_reduce(whole, 132);
  expect_parts_cover(whole, p);
  EXPECT_GE(p.blocks, 4 * 132);  // about four blocks per multiprocessor
  EXPECT_LE(p.blocks, 4 * 132 + 1);
  EXPECT_EQ(p.blocks, p.splits);
}

TEST(ReducePlan, ManyRowsOrShortRowsAreNotSplit) {
  EXPECT_EQ(plan_reduce({100'000, 768, 1}, 132).splits, 1);  // rows enough for the device
  EXPECT_EQ(plan_reduce({1, 4096, 1}, 132).splits, 1);       // 16 elements a thread at most
  const ReducePlan p = plan_reduce({1, 8192, 1}, 132);        // 32 a thread: two parts of 16
  EXPECT_EQ(p.splits, 2);
  expect_parts_cover({1, 8192, 1}, p);
}

TEST(ReducePlan, ColumnsAreSplitAlongTheReducedDim) {
  const ReduceShape bias_grad{1, 16 * 1024, 768};  // sum over B*T tokens of [B*T, 768]
  const ReducePlan p = plan_reduce(bias_grad, 132);
  expect_parts_cover(bias_grad, p);
  const int64_t tiles = (768 + kReduceTileCols - 1) / kReduceTileCols;
  EXPECT_EQ(p.blocks, tiles * p.splits);
  EXPECT_GT(p.splits, 1);
  EXPECT_GE(p.span, 16 * kReduceTileRows);  // at least 16 rows per thread
}

TEST(ReducePlan, AtMost1024PartsAndOneBlockWithoutMultiprocessors) {
  EXPECT_LE(plan_reduce({1, int64_t(1) << 40, 1}, 100'000).splits, 1024);
  const ReducePlan p = plan_reduce({1, 1'000'000, 1}, 0);  // an unknown device counts as one
  EXPECT_EQ(p.blocks, 4);
}

}  // namespace
}  // namespace qk
