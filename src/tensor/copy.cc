// Copies: strided to contiguous, dtype casts, fills, device transfers.
#include "qk/tensor/backend.h"
#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/view.h"
#include "cpu/kernels.h"

namespace qk::ops {

QK_DEFINE_KERNEL(copy_kernel, CopyFn);
QK_DEFINE_KERNEL(fill_kernel, FillFn);
QK_REGISTER_KERNEL(copy_kernel, cpu, cpu::copy);
QK_REGISTER_KERNEL(fill_kernel, cpu, cpu::fill);

void copy_(const Tensor& dst, const Tensor& src, bool non_blocking) {
  Shape bs = broadcast_shapes(dst.shape(), src.shape(), "copy_");
  QK_CHECK(bs == dst.shape(), "copy_: source of shape ", shape_str(src.shape()),
           " cannot be broadcast to destination shape ", shape_str(dst.shape()));
  if (dst.numel() == 0) return;
  dst.bump_version();
  if (dst.device() == src.device()) {
    copy_kernel.get(dst.device())(dst, src);
    return;
  }
  // Across devices: make the source contiguous in dst's dtype and shape on its
  // own device, move the bytes, and copy into dst's layout there.
  Tensor s = contiguous(cast(expand(src, dst.shape()), dst.dtype()));
  if (dst.is_contiguous()) {
    Device other = dst.device().is_cpu() ? src.device() : dst.device();
    const Tensor& host = dst.device().is_cpu() ? dst : s;
    Backend& b = backend(other.type);
    if (non_blocking && host.storage()->pinned())
      b.copy_async(dst.raw_data(), dst.device(), s.raw_data(), s.device(), s.nbytes());
    else
      b.copy(dst.raw_data(), dst.device(), s.raw_data(), s.device(), s.nbytes());
    return;
  }
  Tensor staged = empty(dst.shape(), TensorOptions().dtype(dst.dtype()).device(dst.device()));
  copy_(staged, s);
  copy_kernel.get(dst.device())(dst, staged);
}

void fill_(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  dst.bump_version();
  fill_kernel.get(dst.device())(dst, value);
}

Tensor contiguous(const Tensor& a) {
  if (!a.defined() || a.is_contiguous()) return a;
  Tensor out = empty(a.shape(), TensorOptions().dtype(a.dtype()).device(a.device()));
  copy_(out, a);
  return out;
}

Tensor clone(const Tensor& a) {
  Tensor out = empty(a.shape(), TensorOptions().dtype(a.dtype()).device(a.device()), suggest_memory_format(a));
  copy_(out, a);
  return out;
}

Tensor cast(const Tensor& a, DType t) {
  if (a.dtype() == t) return a;
  Tensor out = empty(a.shape(), TensorOptions().dtype(t).device(a.device()), suggest_memory_format(a));
  copy_(out, a);
  return out;
}

Tensor to_device(const Tensor& a, Device d, bool non_blocking) {
  if (a.device() == d) return a;
  if (non_blocking && d.is_cpu() && a.is_contiguous()) {
    // Into pinned memory, so the copy may run on while the caller goes on.
    Tensor out = empty_pinned(a.shape(), a.dtype(), a.device().type);
    copy_(out, a, true);
    return out;
  }
  Tensor out = empty(a.shape(), TensorOptions().dtype(a.dtype()).device(d));
  copy_(out, a, non_blocking);
  return out;
}

}  // namespace qk::ops
