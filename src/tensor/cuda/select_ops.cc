// The CUDA backend's clamp, clamp_backward, where and max/min-along-a-dim
// kernel-table entries: a loop layout (elementwise_layout.h) or an
// [outer, n, inner] view, then one launch (select.cu) on the device's
// current stream. Dtypes are refused with the CPU kernels' errors.
#include <cmath>
#include <type_traits>

#include "cuda_check.h"
#include "elementwise_layout.h"
#include "index_kernels.h"
#include "op_kernel_tables.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"
#include "stream_handle.h"

namespace qk::cuda {

namespace {

void clamp_on_device(const Tensor& out, const Tensor& a, std::optional<double> lo, std::optional<double> hi) {
  ClampBounds b;
  b.has_lo = lo.has_value();
  b.has_hi = hi.has_value();
  // The bounds converted as the CPU converts them: static_cast to the compute type.
  qk::dispatch_numeric(a.dtype(), "clamp", [&](auto tag) {
    using C = compute_t<decltype(tag)>;
    if constexpr (std::is_floating_point_v<C>) {
      b.lo_f = lo ? static_cast<double>(static_cast<C>(*lo)) : 0.0;
      b.hi_f = hi ? static_cast<double>(static_cast<C>(*hi)) : 0.0;
    } else {
      b.lo_i = lo ? static_cast<int64_t>(static_cast<C>(*lo)) : 0;
      b.hi_i = hi ? static_cast<int64_t>(static_cast<C>(*hi)) : 0;
    }
  });
  DeviceStream ds(out.device().index);
  ElementwiseLayout l = make_layout({&out, &a}, "clamp");
  launch_clamp(out.raw_data(), a.raw_data(), int(a.dtype()), b, l, ds.stream());
}

void clamp_backward_on_device(const Tensor& dx, const Tensor& grad, const Tensor& x, std::optional<double> lo,
                              std::optional<double> hi) {
  qk::dispatch_floating(dx.dtype(), "clamp_backward", [](auto) {});
  DeviceStream ds(dx.device().index);
  ElementwiseLayout l = make_layout({&dx, &grad, &x}, "clamp_backward");
  launch_clamp_backward(dx.raw_data(), grad.raw_data(), x.raw_data(), int(dx.dtype()), int(x.dtype()),
                        lo.value_or(-INFINITY), hi.value_or(INFINITY), l, ds.stream());
}

void where_on_device(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  DeviceStream ds(out.device().index);
  ElementwiseLayout l = make_layout({&out, &cond, &a, &b}, "where");
  launch_where(out.raw_data(), cond.raw_data(), a.raw_data(), b.raw_data(), out.itemsize(), l, ds.stream());
}

void max_min_dim_on_device(bool is_max, const Tensor& values, const Tensor& indices, const Tensor& a, int64_t dim) {
  qk::dispatch_numeric(a.dtype(), is_max ? "max" : "min", [](auto) {});
  DeviceStream ds(a.device().index);
  Tensor x = a.is_contiguous() ? a : ops::contiguous(a);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t n = x.size(dim);
  // Few long columns: one thread each would walk them alone, so `dim` goes
  // last (one copy, the others keep their order: values' order) and rows
  // are split across threads. Thresholds not measured.
  if (inner > 1 && outer * inner < 1024 && n >= 1024) {
    Shape perm;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (d != dim) perm.push_back(d);
    perm.push_back(dim);
    x = ops::contiguous(ops::permute(x, perm));
    outer *= inner;
    inner = 1;
  }
  launch_max_min_dim(is_max, values.raw_data(), indices.data_ptr<int64_t>(), x.raw_data(), int(x.dtype()), outer, n,
                     inner, ds.stream());
}

[[maybe_unused]] const bool registered = [] {
  ops::clamp_kernel.set(DeviceType::cuda, &clamp_on_device);
  ops::clamp_backward_kernel.set(DeviceType::cuda, &clamp_backward_on_device);
  ops::where_kernel.set(DeviceType::cuda, &where_on_device);
  ops::max_min_dim_kernel.set(DeviceType::cuda, &max_min_dim_on_device);
  return true;
}();

}  // namespace

}  // namespace qk::cuda
