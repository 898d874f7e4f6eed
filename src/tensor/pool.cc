// Pooling fronts: validation, output sizes (PyTorch's rules), dispatch.
#include "qk/tensor/dispatch.h"
#include "qk/tensor/ops/conv.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/view.h"
#include "cpu/pool.h"
#include "op_kernel_tables.h"

namespace qk::ops {

QK_DEFINE_KERNEL(max_pool2d_kernel, MaxPoolFn);
QK_DEFINE_KERNEL(max_pool2d_backward_kernel, MaxPoolBwdFn);
QK_DEFINE_KERNEL(avg_pool2d_kernel, AvgPoolFn);
QK_DEFINE_KERNEL(avg_pool2d_backward_kernel, AvgPoolBwdFn);
QK_DEFINE_KERNEL(adaptive_avg_pool2d_kernel, AdaptivePoolFn);
QK_DEFINE_KERNEL(adaptive_avg_pool2d_backward_kernel, AdaptivePoolBwdFn);
QK_REGISTER_KERNEL(max_pool2d_kernel, cpu, cpu::max_pool2d);
QK_REGISTER_KERNEL(max_pool2d_backward_kernel, cpu, cpu::max_pool2d_backward);
QK_REGISTER_KERNEL(avg_pool2d_kernel, cpu, cpu::avg_pool2d);
QK_REGISTER_KERNEL(avg_pool2d_backward_kernel, cpu, cpu::avg_pool2d_backward);
QK_REGISTER_KERNEL(adaptive_avg_pool2d_kernel, cpu, cpu::adaptive_avg_pool2d);
QK_REGISTER_KERNEL(adaptive_avg_pool2d_backward_kernel, cpu, cpu::adaptive_avg_pool2d_backward);
QK_DEFINE_KERNEL(max_pool2d_channels_last_kernel, MaxPoolFn);
QK_DEFINE_KERNEL(max_pool2d_channels_last_backward_kernel, MaxPoolBwdFn);
QK_DEFINE_KERNEL(avg_pool2d_channels_last_kernel, AvgPoolFn);
QK_DEFINE_KERNEL(avg_pool2d_channels_last_backward_kernel, AvgPoolBwdFn);
QK_REGISTER_KERNEL(max_pool2d_channels_last_kernel, cpu, cpu::max_pool2d_nhwc);
QK_REGISTER_KERNEL(max_pool2d_channels_last_backward_kernel, cpu, cpu::max_pool2d_backward_nhwc);
QK_REGISTER_KERNEL(avg_pool2d_channels_last_kernel, cpu, cpu::avg_pool2d_nhwc);
QK_REGISTER_KERNEL(avg_pool2d_channels_last_backward_kernel, cpu, cpu::avg_pool2d_backward_nhwc);

namespace {


void check_input(const char* op, const Tensor& x) {
  QK_CHECK(x.defined(), op, ": x is an undefined tensor");
  QK_CHECK_TYPE(is_floating(x.dtype()), op, ": expected a floating-point x, got ",
                dtype_name(x.dtype()), " ", shape_str(x.shape()));
  QK_CHECK(x.dim() == 4, op, ": expected x [N, C, H, W], got ", shape_str(x.shape()),
           " (add a batch dim with unsqueeze(0) for a single image)");
}

std::string params_str(const Pool2dParams& p) {
  return detail::str_cat("kernel [", p.kernel[0], ", ", p.kernel[1], "], stride [", p.stride[0],
                         ", ", p.stride[1], "], padding [", p.padding[0], ", ", p.padding[1],
                         "], dilation [", p.dilation[0], ", ", p.dilation[1],
                         "], ceil_mode ", p.ceil_mode);
}

// PyTorch's pooling_output_shape: floor or ceil division, and with ceil_mode
// the last window must start inside the input or its left padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation,
                    bool ceil_mode) {
  int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// Validates the parameters against x and returns {Ho, Wo}.
std::array<int64_t, 2> check_pool(const char* op, const Tensor& x, const Pool2dParams& p,
                                  bool uses_dilation) {
  check_input(op, x);
  std::array<int64_t, 2> out{};
  for (int i = 0; i < 2; ++i) {
    QK_CHECK(p.kernel[i] >= 1 && p.stride[i] >= 1 && p.padding[i] >= 0 && p.dilation[i] >= 1,
             op, ": kernel, stride and dilation must be >= 1 and padding >= 0, got ",
             params_str(p));
    QK_CHECK(uses_dilation || p.dilation[i] == 1, op, ": dilation is not supported, got ",
             params_str(p));
    QK_CHECK(p.padding[i] <= p.kernel[i] / 2, op,
             ": padding must be at most half the kernel size, got ", params_str(p));
    out[i] = pooled_size(x.size(2 + i), p.kernel[i], p.padding[i], p.stride[i], p.dilation[i],
                         p.ceil_mode);
    QK_CHECK(out[i] >= 1, op, ": input ", shape_str(x.shape()),
             " is too small for ", params_str(p), " (output size ", out[i], ")");
  }
  return out;
}

void check_grad(const char* op, const Tensor& grad_out, const Tensor& x, const Shape& expected) {
  QK_CHECK(grad_out.defined(), op, ": grad_out is an undefined tensor");
  QK_CHECK_TYPE(grad_out.dtype() == x.dtype(), op, ": grad_out is ", dtype_name(grad_out.dtype()),
                " but x is ", dtype_name(x.dtype()));
  QK_CHECK_DEVICE(grad_out.device() == x.device(), op, ": grad_out is on ",
                  grad_out.device().str(), " but x is on ", x.device().str());
  QK_CHECK(grad_out.shape() == expected, op, ": grad_out must be ", shape_str(expected),
           " for x ", shape_str(x.shape()), ", got ", shape_str(grad_out.shape()));
}

// A channels-last x (or grad_out) goes to the device's channels-last kernels
// where it has them (the CPU's: pool_nhwc.cc); elsewhere it is pooled
// through [N, C, H, W] planes and its results (y, dx) are given back
// channels last, as the ops around them expect (memory_format.h): two
// copies per call.
Tensor in_format_of(const Tensor& result, const Tensor& x) {
  return is_channels_last(x) ? contiguous(result, MemoryFormat::channels_last) : result;
}
template <typename Table>
bool channels_last_kernel(const Table& table, const Tensor& t, const Tensor& also = Tensor()) {
  return (is_channels_last(t) || is_channels_last(also)) && table.supports(t.device().type);
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const Pool2dParams& p) {
  auto [ho, wo] = check_pool("max_pool2d", x, p, true);
  if (channels_last_kernel(max_pool2d_channels_last_kernel, x))
    return max_pool2d_channels_last_kernel.get(x.device())(x, p, ho, wo);
  auto [y, indices] = max_pool2d_kernel.get(x.device())(contiguous(x), p, ho, wo);
  return {in_format_of(y, x), indices};
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& indices) {
  check_input("max_pool2d_backward", x);
  QK_CHECK(indices.defined() && indices.dtype() == DType::i64 && indices.dim() == 4 &&
               indices.size(0) == x.size(0) && indices.size(1) == x.size(1),
           "max_pool2d_backward: expected i64 indices [N, C, Ho, Wo] from max_pool2d of x ",
           shape_str(x.shape()), ", got ", indices.defined() ? dtype_name(indices.dtype()) : "none",
           " ", indices.defined() ? shape_str(indices.shape()) : "");
  check_grad("max_pool2d_backward", grad_out, x, indices.shape());
  if (channels_last_kernel(max_pool2d_channels_last_backward_kernel, grad_out, x))
    return max_pool2d_channels_last_backward_kernel.get(x.device())(grad_out, x, indices);
  return in_format_of(max_pool2d_backward_kernel.get(x.device())(contiguous(grad_out), x, contiguous(indices)), x);
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  auto [ho, wo] = check_pool("avg_pool2d", x, p, false);
  if (channels_last_kernel(avg_pool2d_channels_last_kernel, x))
    return avg_pool2d_channels_last_kernel.get(x.device())(x, p, ho, wo);
  return in_format_of(avg_pool2d_kernel.get(x.device())(contiguous(x), p, ho, wo), x);
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Tensor& x, const Pool2dParams& p) {
  auto [ho, wo] = check_pool("avg_pool2d_backward", x, p, false);
  check_grad("avg_pool2d_backward", grad_out, x, {x.size(0), x.size(1), ho, wo});
  if (channels_last_kernel(avg_pool2d_channels_last_backward_kernel, grad_out, x))
    return avg_pool2d_channels_last_backward_kernel.get(x.device())(grad_out, x, p);
  return in_format_of(avg_pool2d_backward_kernel.get(x.device())(contiguous(grad_out), x, p), x);
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> out_size) {
  check_input("adaptive_avg_pool2d", x);
  QK_CHECK(out_size[0] >= 1 && out_size[1] >= 1, "adaptive_avg_pool2d: output size must be "
           ">= 1, got [", out_size[0], ", ", out_size[1], "]");
  QK_CHECK(x.size(2) >= 1 && x.size(3) >= 1, "adaptive_avg_pool2d: input ", shape_str(x.shape()),
           " has an empty plane");
  return in_format_of(adaptive_avg_pool2d_kernel.get(x.device())(contiguous(x), out_size), x);
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Tensor& x) {
  check_input("adaptive_avg_pool2d_backward", x);
  QK_CHECK(grad_out.defined() && grad_out.dim() == 4, "adaptive_avg_pool2d_backward: expected "
           "grad_out [N, C, Ho, Wo], got ", grad_out.defined() ? shape_str(grad_out.shape()) : "none");
  check_grad("adaptive_avg_pool2d_backward", grad_out, x,
             {x.size(0), x.size(1), grad_out.size(2), grad_out.size(3)});
  QK_CHECK(grad_out.size(2) >= 1 && grad_out.size(3) >= 1, "adaptive_avg_pool2d_backward: empty "
           "output plane ", shape_str(grad_out.shape()));
  return in_format_of(adaptive_avg_pool2d_backward_kernel.get(x.device())(contiguous(grad_out), x), x);
}

}  // namespace qk::ops
