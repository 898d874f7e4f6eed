// Reductions: dim normalisation, output shapes, dispatch.
#include "qk/tensor/ops/reduce.h"

#include <algorithm>
#include <cmath>

#include "qk/tensor/dispatch.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/view.h"
#include "cpu/kernels.h"
#include "op_kernel_tables.h"

namespace qk::ops {

QK_DEFINE_KERNEL(reduce_kernel, ReduceFn);
QK_DEFINE_KERNEL(max_min_dim_kernel, MaxMinDimFn);
QK_REGISTER_KERNEL(reduce_kernel, cpu, cpu::reduce);
QK_REGISTER_KERNEL(max_min_dim_kernel, cpu, cpu::max_min_dim);

namespace {

// Sorted, unique, non-negative dims; empty input = all dims.
Shape normalize_dims(const Tensor& a, const Shape& dims, const char* op) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < a.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(a.wrap_dim(d, op));
  std::sort(out.begin(), out.end());
  QK_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": dim repeated in ",
           shape_str(dims));
  return out;
}

Shape keepdim_shape(const Tensor& a, const Shape& dims) {
  Shape s = a.shape();
  for (int64_t d : dims) s[d] = 1;
  return s;
}

Tensor finish_shape(const Tensor& out_keep, const Tensor& a, const Shape& dims, bool keepdim) {
  if (keepdim) return out_keep;
  Shape s;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) s.push_back(a.shape()[d]);
  return view(out_keep, s);
}

Tensor reduce(cpu::ReduceOp op, const char* name, const Tensor& a, const Shape& dims, bool keepdim) {
  QK_CHECK_TYPE(a.dtype() != DType::boolean, name, ": not defined for bool tensors");
  Shape nd = normalize_dims(a, dims, name);
  bool integer_sum = !is_floating(a.dtype()) && op == cpu::ReduceOp::sum;
  QK_CHECK_TYPE(op != cpu::ReduceOp::mean || is_floating(a.dtype()), name,
                ": expected a floating-point tensor, got ", dtype_name(a.dtype()));
  if (op == cpu::ReduceOp::amax || op == cpu::ReduceOp::amin) {
    for (int64_t d : nd)
      QK_CHECK(a.shape()[d] > 0, name, ": cannot reduce an empty dim ", d, " of shape ",
               shape_str(a.shape()));
  }
  if (is_channels_last(a)) {
    // Over the [N, H, W, C] storage as a contiguous tensor: a batch norm's or
    // a bias gradient's sum over {0, 2, 3} is then one column reduction, not
    // a copy to [N, C, H, W] first.
    static constexpr int64_t kNhwcPosition[4] = {0, 3, 1, 2};
    Shape md;
    for (int64_t d : nd) md.push_back(kNhwcPosition[d]);
    Tensor r = reduce(op, name, permute(a, {0, 2, 3, 1}), md, /*keepdim=*/true);
    Tensor back = permute(r, {0, 3, 1, 2});
    if (keepdim) return back;
    Shape s;
    for (int64_t d = 0; d < a.dim(); ++d)
      if (std::find(nd.begin(), nd.end(), d) == nd.end()) s.push_back(a.shape()[d]);
    return reshape(back, s);
  }
  // Integer sums are computed and returned in i64 (as PyTorch).
  Tensor src = integer_sum ? cast(a, DType::i64) : a;
  Tensor out = empty(keepdim_shape(a, nd), TensorOptions().dtype(src.dtype()).device(a.device()));
  if (out.numel() > 0) {
    if (a.numel() == 0) fill_(out, 0.0);  // sum/mean of nothing (mean: NaN below)
    else reduce_kernel.get(a.device())(op, out, src, nd);
    if (a.numel() == 0 && op == cpu::ReduceOp::mean) fill_(out, NAN);
  }
  return finish_shape(out, a, nd, keepdim);
}

}  // namespace

Tensor sum(const Tensor& a, const Shape& dims, bool keepdim) {
  return reduce(cpu::ReduceOp::sum, "sum", a, dims, keepdim);
}
Tensor mean(const Tensor& a, const Shape& dims, bool keepdim) {
  return reduce(cpu::ReduceOp::mean, "mean", a, dims, keepdim);
}
Tensor amax(const Tensor& a, const Shape& dims, bool keepdim) {
  return reduce(cpu::ReduceOp::amax, "amax", a, dims, keepdim);
}
Tensor amin(const Tensor& a, const Shape& dims, bool keepdim) {
  return reduce(cpu::ReduceOp::amin, "amin", a, dims, keepdim);
}

Tensor var(const Tensor& a, const Shape& dims, bool unbiased, bool keepdim) {
  QK_CHECK_TYPE(is_floating(a.dtype()), "var: expected a floating-point tensor, got ",
                dtype_name(a.dtype()));
  Shape nd = normalize_dims(a, dims, "var");
  int64_t n = 1;
  for (int64_t d : nd) n *= a.shape()[d];
  Tensor centered = sub(a, mean(a, nd, /*keepdim=*/true));
  Tensor ss = sum(mul(centered, centered), nd, keepdim);
  double denom = static_cast<double>(unbiased ? n - 1 : n);
  return binary_scalar(BinaryOp::div, ss, denom);
}

namespace {
std::pair<Tensor, Tensor> extreme_dim(bool is_max, const Tensor& a, int64_t dim, bool keepdim) {
  const char* name = is_max ? "max" : "min";
  dim = a.wrap_dim(dim, name);
  QK_CHECK(a.dim() == 0 || a.shape()[dim] > 0, name, ": cannot reduce empty dim ", dim,
           " of shape ", shape_str(a.shape()));
  QK_CHECK_TYPE(a.dtype() != DType::boolean, name, ": not defined for bool tensors");
  Shape ks = a.dim() == 0 ? Shape{} : keepdim_shape(a, {dim});
  Tensor vals = empty(ks, TensorOptions().dtype(a.dtype()).device(a.device()));
  Tensor idx = empty(ks, TensorOptions().dtype(DType::i64).device(a.device()));
  Tensor src = a.dim() == 0 ? reshape(a, {1}) : a;
  max_min_dim_kernel.get(a.device())(is_max, vals, idx, src, a.dim() == 0 ? 0 : dim);
  if (a.dim() == 0) return {vals, idx};
  return {finish_shape(vals, a, {dim}, keepdim), finish_shape(idx, a, {dim}, keepdim)};
}
}  // namespace

std::pair<Tensor, Tensor> max_dim(const Tensor& a, int64_t dim, bool keepdim) {
  return extreme_dim(true, a, dim, keepdim);
}
std::pair<Tensor, Tensor> min_dim(const Tensor& a, int64_t dim, bool keepdim) {
  return extreme_dim(false, a, dim, keepdim);
}

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) { return max_dim(a, dim, keepdim).second; }
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim) { return min_dim(a, dim, keepdim).second; }

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  int64_t lead = a.dim() - static_cast<int64_t>(shape.size());
  QK_CHECK(lead >= 0, "sum_to: cannot sum shape ", shape_str(a.shape()), " to larger shape ",
           shape_str(shape));
  Shape dims;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[d - lead] == 1 && a.shape()[d] != 1) {
      dims.push_back(d);
    } else {
      QK_CHECK(shape[d - lead] == a.shape()[d], "sum_to: shape ", shape_str(a.shape()),
               " does not broadcast from ", shape_str(shape));
    }
  }
  Tensor r = dims.empty() ? a : sum(a, dims, /*keepdim=*/true);
  return view(contiguous(r), shape);
}

}  // namespace qk::ops
