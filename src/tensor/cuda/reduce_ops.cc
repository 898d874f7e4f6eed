// The CUDA backend's reduction and softmax kernel-table entries: reductions
// read the reduced dimensions where they are when they are adjacent in a
// contiguous tensor (else move them last in one copy) and reduce them in as
// many parts as fill the device (reduce_plan.h, reduce.cu).
#include <algorithm>
#include <limits>

#include "cuda_check.h"
#include "kernels.h"
#include "multiprocessors.h"
#include "reduce_ops.h"
#include "stream_handle.h"
#include "op_kernel_tables.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"

namespace qk::cuda {

namespace {

// One thread block per row (softmax) or per part (reductions): one launch
// takes at most 2^31 - 1.
void check_blocks(int64_t blocks, const char* op) {
  QK_CHECK_DEVICE(blocks <= std::numeric_limits<int32_t>::max(), op, " on CUDA: ", blocks,
                  " thread blocks, more than one launch takes (2^31 - 1)");
}

// The dtype the kernels accumulate `t` in, and so of the parts (reduce.cu's ReduceAcc).
DType partial_dtype(DType t) {
  if (!is_floating(t)) return DType::i64;
  return t == DType::f64 ? DType::f64 : DType::f32;
}

// out = op over the middle of contiguous `a` seen as [outer, n, inner].
void reduce_middle(int op, const Tensor& out, const Tensor& a, const ReduceShape& shape) {
  DeviceStream ds(a.device().index);
  const ReducePlan plan = plan_reduce(shape, multiprocessors(a.device().index));
  check_blocks(plan.blocks, "reduce");
  Tensor partial;  // from the caching allocator: no cudaMalloc once warm
  if (plan.splits > 1)
    partial = empty({shape.outer * shape.inner * plan.splits},
                    TensorOptions().dtype(partial_dtype(a.dtype())).device(a.device()));
  launch_reduce(op, out.raw_data(), a.raw_data(), static_cast<int>(a.dtype()), shape, plan,
                partial.defined() ? partial.raw_data() : nullptr, ds.stream());
}

void reduce_on_device(cpu::ReduceOp op, const Tensor& out, const Tensor& a, const Shape& dims) {
  // Reduced dims next to each other in a contiguous tensor are read where
  // they are (a bias gradient's sum over the tokens, a whole-tensor norm);
  // otherwise the kept dimensions go first, in order, then the reduced ones
  // (out's order), in one copy.
  if (a.is_contiguous()) {
    if (auto shape = reduce_as_middle(a.shape(), dims)) return reduce_middle(static_cast<int>(op), out, a, *shape);
  }
  Shape perm;
  int64_t n = 1;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d);
  for (int64_t d : dims) {
    perm.push_back(d);
    n *= a.size(d);
  }
  Tensor rows_major = ops::contiguous(ops::permute(a, perm));
  reduce_middle(static_cast<int>(op), out, rows_major, ReduceShape{out.numel(), n, 1});
}

// x with `dim` last, contiguous (a copy unless it already is last).
Tensor dim_last(const Tensor& x, int64_t dim) {
  return dim == x.dim() - 1 ? x : ops::contiguous(ops::transpose(x, dim, x.dim() - 1));
}
Tensor dim_back(const Tensor& y, int64_t dim) {
  return dim == y.dim() - 1 ? y : ops::contiguous(ops::transpose(y, dim, y.dim() - 1));
}

Tensor softmax_on_device(const Tensor& x, int64_t dim, bool log) {
  DeviceStream ds(x.device().index);
  Tensor xl = dim_last(x, dim);
  Tensor y = empty(xl.shape(), TensorOptions().dtype(x.dtype()).device(x.device()));
  const int64_t n = x.size(dim), rows = n == 0 ? 0 : x.numel() / n;
  check_blocks(rows, "softmax");
  launch_softmax_rows(y.raw_data(), xl.raw_data(), static_cast<int>(x.dtype()), rows, n, log, ds.stream());
  return dim_back(y, dim);
}

Tensor softmax_backward_on_device(const Tensor& grad, const Tensor& out, int64_t dim, bool log) {
  DeviceStream ds(out.device().index);
  Tensor gl = dim_last(grad, dim), yl = dim_last(out, dim);
  Tensor dx = empty(yl.shape(), TensorOptions().dtype(out.dtype()).device(out.device()));
  const int64_t n = out.size(dim), rows = n == 0 ? 0 : out.numel() / n;
  check_blocks(rows, "softmax_backward");
  launch_softmax_backward_rows(dx.raw_data(), gl.raw_data(), yl.raw_data(), static_cast<int>(out.dtype()), rows, n,
                               log, ds.stream());
  return dim_back(dx, dim);
}

[[maybe_unused]] const bool registered = [] {
  ops::reduce_kernel.set(DeviceType::cuda, &reduce_on_device);
  ops::softmax_kernel.set(DeviceType::cuda, &softmax_on_device);
  ops::softmax_backward_kernel.set(DeviceType::cuda, &softmax_backward_on_device);
  return true;
}();

}  // namespace

void reduce_rows_on_device(int op, const Tensor& out, const Tensor& a, int64_t rows, int64_t n) {
  reduce_middle(op, out, a, ReduceShape{rows, n, 1});
}

}  // namespace qk::cuda
