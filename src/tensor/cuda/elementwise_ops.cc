// The CUDA backend's elementwise kernel-table entries: copy (strides, dtype
// casts, broadcast sources), fill, binary and unary ops, each a loop layout
// (elementwise_layout.h) and a launch (elementwise.cu).
#include <cstring>

#include "cuda_check.h"
#include "elementwise_layout.h"
#include "kernels.h"
#include "stream_handle.h"
#include "op_kernel_tables.h"
#include "qk/base/error.h"
#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/tensor.h"

namespace qk::cuda {

static_assert(kF32 == int(DType::f32) && kF64 == int(DType::f64) && kF16 == int(DType::f16) &&
              kBF16 == int(DType::bf16) && kI32 == int(DType::i32) && kI64 == int(DType::i64) &&
              kU8 == int(DType::u8) && kBool == int(DType::boolean));
static_assert(int(BinaryOp::add) == 0 && int(BinaryOp::pow) == 4 && int(BinaryOp::eq) == 7 && int(BinaryOp::ge) == 12,
              "elementwise.cu numbers the binary ops as qk::BinaryOp does");
static_assert(int(UnaryOp::neg) == 0 && int(UnaryOp::gelu) == 6 && int(UnaryOp::abs) == 11 && int(UnaryOp::erf) == 17,
              "elementwise.cu numbers the unary ops as qk::UnaryOp does");

namespace {

// The stream kernels go to: the legacy default stream until streams come.
void copy_on_device(const Tensor& dst, const Tensor& src) {
  DeviceStream ds(dst.device().index);
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.shape() == src.shape() && dst.is_contiguous() && src.is_contiguous()) {
    QK_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToDevice, ds.stream()));
    return;
  }
  ElementwiseLayout l = make_layout({&dst, &src}, "copy");
  launch_copy(dst.raw_data(), int(dst.dtype()), src.raw_data(), int(src.dtype()), l, ds.stream());
}

uint64_t fill_bits(DType t, double v) {
  uint64_t bits = 0;
  auto put = [&](auto x) { std::memcpy(&bits, &x, sizeof x); };
  switch (t) {
    case DType::f32: put(static_cast<float>(v)); break;
    case DType::f64: put(v); break;
    case DType::f16: put(Half(static_cast<float>(v)).bits); break;
    case DType::bf16: put(BFloat16(static_cast<float>(v)).bits); break;
    case DType::i32: put(static_cast<int32_t>(v)); break;
    case DType::i64: put(static_cast<int64_t>(v)); break;
    case DType::u8: put(static_cast<uint8_t>(v)); break;
    case DType::boolean: put(static_cast<uint8_t>(v != 0)); break;
  }
  return bits;
}

void fill_on_device(const Tensor& dst, double value) {
  DeviceStream ds(dst.device().index);
  if (dst.numel() == 0) return;
  if (dst.is_contiguous()) {
    launch_fill(dst.raw_data(), dst.numel(), dst.itemsize(), fill_bits(dst.dtype(), value), ds.stream());
    return;
  }
  // Strided: fill a one-element tensor and copy it in, broadcast.
  Tensor one = empty({}, TensorOptions().dtype(dst.dtype()).device(dst.device()));
  launch_fill(one.raw_data(), 1, one.itemsize(), fill_bits(dst.dtype(), value), ds.stream());
  ElementwiseLayout l = make_layout({&dst, &one}, "fill");
  launch_copy(dst.raw_data(), int(dst.dtype()), one.raw_data(), int(one.dtype()), l, ds.stream());
}

void binary_on_device(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  DeviceStream ds(out.device().index);
  ElementwiseLayout l = make_layout({&out, &a, &b}, binary_op_name(op));
  launch_binary(int(op), out.raw_data(), a.raw_data(), b.raw_data(), int(a.dtype()), l, ds.stream());
}

void binary_scalar_on_device(BinaryOp op, const Tensor& out, const Tensor& a, double b) {
  DeviceStream ds(out.device().index);
  ElementwiseLayout l = make_layout({&out, &a}, binary_op_name(op));
  launch_binary_scalar(int(op), out.raw_data(), a.raw_data(), fill_bits(a.dtype(), b), int(a.dtype()), l,
                       ds.stream());
}

void unary_on_device(UnaryOp op, const Tensor& out, const Tensor& a) {
  DeviceStream ds(out.device().index);
  ElementwiseLayout l = make_layout({&out, &a}, unary_op_name(op));
  launch_unary(int(op), out.raw_data(), a.raw_data(), int(a.dtype()), l, ds.stream());
}

void unary_backward_on_device(UnaryOp op, const Tensor& dx, const Tensor& grad, const Tensor& x, const Tensor& y) {
  DeviceStream ds(dx.device().index);
  // As the CPU: whichever of x and y is given stands in for the other.
  const Tensor& xs = x.defined() ? x : y;
  const Tensor& ys = y.defined() ? y : x;
  ElementwiseLayout l = make_layout({&dx, &grad, &xs, &ys}, unary_op_name(op));
  launch_unary_backward(int(op), dx.raw_data(), grad.raw_data(), xs.raw_data(), ys.raw_data(), int(dx.dtype()), l,
                        ds.stream());
}

void add_inplace_on_device(const Tensor& self, const Tensor& other, double alpha) {
  QK_CHECK_TYPE(self.dtype() != DType::boolean, "add_: not defined for bool tensors");
  DeviceStream ds(self.device().index);
  ElementwiseLayout l = make_layout({&self, &other}, "add_");
  launch_add_inplace(self.raw_data(), other.raw_data(), int(self.dtype()), alpha, l, ds.stream());
}

[[maybe_unused]] const bool registered = [] {
  ops::unary_backward_kernel.set(DeviceType::cuda, &unary_backward_on_device);
  ops::add_inplace_kernel.set(DeviceType::cuda, &add_inplace_on_device);
  ops::copy_kernel.set(DeviceType::cuda, &copy_on_device);
  ops::fill_kernel.set(DeviceType::cuda, &fill_on_device);
  ops::binary_kernel.set(DeviceType::cuda, &binary_on_device);
  ops::binary_scalar_kernel.set(DeviceType::cuda, &binary_scalar_on_device);
  ops::unary_kernel.set(DeviceType::cuda, &unary_on_device);
  return true;
}();

}  // namespace

}  // namespace qk::cuda
