// The CUDA backend's pooling kernel-table entries: geometry from the fronts'
// checked sizes, then one launch (pool.cu) on the device's current stream.
#include "kernels.h"
#include "op_kernel_tables.h"
#include "qk/tensor/ops/view.h"
#include "stream_handle.h"

namespace qk::cuda {

namespace {

TensorOptions like(const Tensor& x, DType t) { return TensorOptions().dtype(t).device(x.device()); }

PoolGeometry geometry(const Tensor& x, int64_t ho, int64_t wo, const Pool2dParams* p) {
  PoolGeometry g{x.size(2), x.size(3), ho, wo};
  if (p) {
    g.kh = p->kernel[0], g.kw = p->kernel[1], g.sh = p->stride[0], g.sw = p->stride[1];
    g.ph = p->padding[0], g.pw = p->padding[1], g.dh = p->dilation[0], g.dw = p->dilation[1];
  }
  return g;
}

int64_t planes(const Tensor& x) { return x.size(0) * x.size(1); }

std::pair<Tensor, Tensor> max_pool(const Tensor& x, const Pool2dParams& p, int64_t ho, int64_t wo) {
  DeviceStream ds(x.device().index);
  Tensor y = empty({x.size(0), x.size(1), ho, wo}, like(x, x.dtype()));
  Tensor idx = empty(y.shape(), like(x, DType::i64));
  launch_pool(PoolKind::kMax, false, y.raw_data(), x.raw_data(), idx.raw_data(), int(x.dtype()), planes(x),
              geometry(x, ho, wo, &p), false, ds.stream());
  return {y, idx};
}

Tensor max_pool_backward(const Tensor& gy, const Tensor& x, const Tensor& idx) {
  DeviceStream ds(x.device().index);
  // Scattered into f32 (f64) zeros, then rounded to x's dtype.
  const DType acc_t = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor acc = zeros(x.shape(), like(x, acc_t));
  launch_pool(PoolKind::kMax, true, acc.raw_data(), gy.raw_data(), const_cast<void*>(idx.raw_data()), int(x.dtype()),
              planes(x), geometry(x, gy.size(2), gy.size(3), nullptr), false, ds.stream());
  return ops::cast(acc, x.dtype());
}

Tensor avg_pool(const Tensor& x, const Pool2dParams& p, int64_t ho, int64_t wo) {
  DeviceStream ds(x.device().index);
  Tensor y = empty({x.size(0), x.size(1), ho, wo}, like(x, x.dtype()));
  launch_pool(PoolKind::kAvg, false, y.raw_data(), x.raw_data(), nullptr, int(x.dtype()), planes(x),
              geometry(x, ho, wo, &p), p.count_include_pad, ds.stream());
  return y;
}

Tensor avg_pool_backward(const Tensor& gy, const Tensor& x, const Pool2dParams& p) {
  DeviceStream ds(x.device().index);
  Tensor dx = empty(x.shape(), like(x, x.dtype()));
  launch_pool(PoolKind::kAvg, true, dx.raw_data(), gy.raw_data(), nullptr, int(x.dtype()), planes(x),
              geometry(x, gy.size(2), gy.size(3), &p), p.count_include_pad, ds.stream());
  return dx;
}

Tensor adaptive_pool(const Tensor& x, std::array<int64_t, 2> out) {
  DeviceStream ds(x.device().index);
  Tensor y = empty({x.size(0), x.size(1), out[0], out[1]}, like(x, x.dtype()));
  launch_pool(PoolKind::kAdaptiveAvg, false, y.raw_data(), x.raw_data(), nullptr, int(x.dtype()), planes(x),
              geometry(x, out[0], out[1], nullptr), false, ds.stream());
  return y;
}

Tensor adaptive_pool_backward(const Tensor& gy, const Tensor& x) {
  DeviceStream ds(x.device().index);
  Tensor dx = empty(x.shape(), like(x, x.dtype()));
  launch_pool(PoolKind::kAdaptiveAvg, true, dx.raw_data(), gy.raw_data(), nullptr, int(x.dtype()), planes(x),
              geometry(x, gy.size(2), gy.size(3), nullptr), false, ds.stream());
  return dx;
}

[[maybe_unused]] const bool registered = [] {
  ops::max_pool2d_kernel.set(DeviceType::cuda, &max_pool);
  ops::max_pool2d_backward_kernel.set(DeviceType::cuda, &max_pool_backward);
  ops::avg_pool2d_kernel.set(DeviceType::cuda, &avg_pool);
  ops::avg_pool2d_backward_kernel.set(DeviceType::cuda, &avg_pool_backward);
  ops::adaptive_avg_pool2d_kernel.set(DeviceType::cuda, &adaptive_pool);
  ops::adaptive_avg_pool2d_backward_kernel.set(DeviceType::cuda, &adaptive_pool_backward);
  return true;
}();

}  // namespace

}  // namespace qk::cuda
