// The CUDA kernels' loop layout (src/tensor/cuda/elementwise_layout.h), on
// the CPU: for broadcast, transposed, sliced, expanded and size-1 operands,
// walking the layout as the kernels do (elementwise.cu's offsets()) reaches
// every element's true offset in every operand, and contiguous operands
// collapse to one flat dimension.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/elementwise_layout.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"

namespace qk::cuda {
namespace {

// Operand k's offset of element i, as the kernels compute it.
std::vector<int64_t> kernel_offsets(const ElementwiseLayout& l, int64_t i, int operands) {
  std::vector<int64_t> off(operands, 0);
  for (int d = l.ndim - 1; d >= 0; --d) {
    const int64_t c = i % l.sizes[d];
    i /= l.sizes[d];
    for (int k = 0; k < operands; ++k) off[k] += c * l.strides[k][d];
  }
  return off;
}

// Operand t's offset (from its first element) of the out-shaped index `idx`,
// broadcasting from the right.
int64_t true_offset(const Tensor& t, const Shape& out_shape, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  const int64_t lead = static_cast<int64_t>(out_shape.size()) - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) != 1) off += idx[lead + d] * t.stride(d);
  return off;
}

void expect_walks_every_element(std::initializer_list<const Tensor*> ops_list) {
  ElementwiseLayout l = make_layout(ops_list, "test");
  const Shape& shape = (*ops_list.begin())->shape();
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  ASSERT_EQ(l.numel, numel);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < numel; ++i) {
    std::vector<int64_t> got = kernel_offsets(l, i, static_cast<int>(ops_list.size()));
    int k = 0;
    for (const Tensor* t : ops_list) {
      ASSERT_EQ(got[k], true_offset(*t, shape, idx)) << "element " << i << ", operand " << k;
      ++k;
    }
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0 && ++idx[d] == shape[d]; --d) idx[d] = 0;
  }
}

TEST(CudaElementwiseLayout, WalksEveryElementOfEveryOperand) {
  Tensor out = zeros({4, 3, 5});
  Tensor same = zeros({4, 3, 5});
  Tensor row = zeros({5});                                   // broadcast from the right
  Tensor col = zeros({4, 1, 1});                             // size-1 dims broadcast
  Tensor tr = ops::transpose(zeros({5, 3, 4}), 0, 2);        // [4, 3, 5], strided
  Tensor sl = ops::slice(zeros({4, 3, 10}), 2, 1, 10, 2);    // every other element
  Tensor ex = ops::expand(zeros({1, 3, 1}), {4, 3, 5});      // stride 0
  expect_walks_every_element({&out, &same, &row});
  expect_walks_every_element({&out, &col, &tr});
  expect_walks_every_element({&out, &sl, &ex});
  Tensor scalar = zeros({});
  expect_walks_every_element({&out, &scalar});
  expect_walks_every_element({&scalar, &scalar});
}

TEST(CudaElementwiseLayout, ContiguousOperandsCollapseToOneDimension) {
  Tensor a = zeros({4, 3, 5}), b = zeros({4, 3, 5});
  ElementwiseLayout l = make_layout({&a, &b}, "test");
  EXPECT_EQ(l.ndim, 1);
  EXPECT_EQ(l.sizes[0], 60);
  EXPECT_EQ(l.strides[1][0], 1);
  Tensor row = zeros({5});  // the broadcast keeps two: [12 rows] x [5]
  l = make_layout({&a, &row}, "test");
  EXPECT_EQ(l.ndim, 2);
  EXPECT_EQ(l.sizes[0], 12);
  EXPECT_EQ(l.strides[1][0], 0);
}

TEST(CudaElementwiseLayout, TooManyUnmergeableDimensionsAreRefused) {
  // Nine dimensions of size 2, every other one reversed by a transpose: none merge.
  Shape nine(9, 2);
  Tensor base = zeros(nine);
  Tensor t = ops::permute(base, {8, 7, 6, 5, 4, 3, 2, 1, 0});
  Tensor out = zeros(nine);
  EXPECT_THROW(make_layout({&out, &t}, "copy"), DeviceError);
}

}  // namespace
}  // namespace qk::cuda
