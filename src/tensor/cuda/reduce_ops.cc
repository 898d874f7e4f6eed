// The CUDA backend's reduction and softmax kernel-table entries: the reduced
// dimension(s) are moved last and made contiguous (one copy), then one block
// per row reduces (reduce.cu).
#include <algorithm>
#include <limits>

#include "cuda_check.h"
#include "kernels.h"
#include "stream_handle.h"
#include "op_kernel_tables.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"

namespace qk::cuda {

namespace {

void check_rows(int64_t rows, const char* op) {
  QK_CHECK_DEVICE(rows <= std::numeric_limits<int32_t>::max(), op, " on CUDA: ", rows,
                  " rows, more than one launch takes (2^31 - 1)");
}

void reduce_on_device(cpu::ReduceOp op, const Tensor& out, const Tensor& a, const Shape& dims) {
  DeviceStream ds(a.device().index);
  // Kept dimensions first, in order, then the reduced ones: out's order.
  Shape perm;
  int64_t n = 1;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d);
  for (int64_t d : dims) {
    perm.push_back(d);
    n *= a.size(d);
  }
  Tensor rows_major = ops::contiguous(ops::permute(a, perm));
  const int64_t rows = out.numel();
  check_rows(rows, "reduce");
  launch_reduce_rows(static_cast<int>(op), out.raw_data(), rows_major.raw_data(), static_cast<int>(a.dtype()), rows,
                     n, ds.stream());
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
  check_rows(rows, "softmax");
  launch_softmax_rows(y.raw_data(), xl.raw_data(), static_cast<int>(x.dtype()), rows, n, log, ds.stream());
  return dim_back(y, dim);
}

Tensor softmax_backward_on_device(const Tensor& grad, const Tensor& out, int64_t dim, bool log) {
  DeviceStream ds(out.device().index);
  Tensor gl = dim_last(grad, dim), yl = dim_last(out, dim);
  Tensor dx = empty(yl.shape(), TensorOptions().dtype(out.dtype()).device(out.device()));
  const int64_t n = out.size(dim), rows = n == 0 ? 0 : out.numel() / n;
  check_rows(rows, "softmax_backward");
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

}  // namespace qk::cuda
