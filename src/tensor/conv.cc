// conv2d front: validation, reduced-float handling, dispatch to kernels.
#include "qk/tensor/ops/conv.h"

#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/view.h"
#include "cpu/conv.h"

namespace qk::ops {

QK_DEFINE_KERNEL(conv2d_fwd_kernel, Conv2dFwdFn);
QK_DEFINE_KERNEL(conv2d_bwd_kernel, Conv2dBwdFn);
QK_REGISTER_KERNEL(conv2d_fwd_kernel, cpu, cpu::conv2d_forward);
QK_REGISTER_KERNEL(conv2d_bwd_kernel, cpu, cpu::conv2d_backward);

namespace {

void check_operand(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  QK_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
  QK_CHECK_TYPE(t.dtype() == x.dtype(), op, ": ", what, " is ", dtype_name(t.dtype()), " ",
                shape_str(t.shape()), " but x is ", dtype_name(x.dtype()), " ",
                shape_str(x.shape()), "; convert with .to(dtype)");
  QK_CHECK_DEVICE(t.device() == x.device(), op, ": ", what, " is on ", t.device().str(),
                  " but x is on ", x.device().str());
}

std::string params_str(const Conv2dParams& p) {
  return detail::str_cat("stride [", p.stride[0], ", ", p.stride[1], "], padding [", p.padding[0],
                         ", ", p.padding[1], "], dilation [", p.dilation[0], ", ",
                         p.dilation[1], "], groups ", p.groups);
}

// Validates x, w (and b) and returns the output shape [N,O,Ho,Wo].
Shape check_conv(const char* op, const Tensor& x, const Tensor& w, const Tensor& b,
                 const Conv2dParams& p) {
  QK_CHECK(x.defined(), op, ": x is an undefined tensor");
  QK_CHECK_TYPE(is_floating(x.dtype()), op, ": expected a floating-point x, got ",
                dtype_name(x.dtype()), " ", shape_str(x.shape()));
  check_operand(op, "weight", w, x);
  if (b.defined()) check_operand(op, "bias", b, x);
  QK_CHECK(x.dim() == 4, op, ": expected x [N, C, H, W], got ", shape_str(x.shape()),
           " (add a batch dim with unsqueeze(0) for a single image)");
  QK_CHECK(w.dim() == 4, op, ": expected weight [O, C/groups, kh, kw], got ",
           shape_str(w.shape()));
  for (int i = 0; i < 2; ++i) {
    QK_CHECK(p.stride[i] >= 1 && p.padding[i] >= 0 && p.dilation[i] >= 1, op,
             ": stride and dilation must be >= 1 and padding >= 0, got ", params_str(p));
  }
  const int64_t c = x.size(1), o = w.size(0), g = p.groups;
  QK_CHECK(g >= 1 && c % g == 0 && o % g == 0, op, ": groups = ", g,
           " must divide both the input channels (", c, ", x ", shape_str(x.shape()),
           ") and the output channels (", o, ", weight ", shape_str(w.shape()), ")");
  QK_CHECK(w.size(1) * g == c, op, ": weight ", shape_str(w.shape()), " expects ", w.size(1) * g,
           " input channels with groups = ", g, ", but x ", shape_str(x.shape()), " has ", c);
  if (b.defined())
    QK_CHECK(b.dim() == 1 && b.size(0) == o, op, ": bias must be [", o, "] for weight ",
             shape_str(w.shape()), ", got ", shape_str(b.shape()));
  Shape out{x.size(0), o, 0, 0};
  for (int i = 0; i < 2; ++i) {
    const int64_t in = x.size(2 + i) + 2 * p.padding[i];
    const int64_t span = p.dilation[i] * (w.size(2 + i) - 1) + 1;
    QK_CHECK(w.size(2 + i) >= 1 && span <= in, op, ": kernel ", shape_str(w.shape()),
             " (dilated extent ", span, ") does not fit in the padded input ",
             shape_str(x.shape()), " with ", params_str(p));
    out[2 + i] = (in - span) / p.stride[i] + 1;
  }
  return out;
}

// The kernels take x (and grad_out) contiguous or channels last, and give
// results in x's format; w and b are contiguous (memory_format.h).
Tensor input_in_format(const Tensor& x) { return is_channels_last(x) ? x : contiguous(x); }

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  check_conv("conv2d", x, w, b, p);
  // Backends take f16/bf16 as they are: each decides whether it has native
  // kernels or computes in f32 (the CPU one does both, see cpu/conv.cc).
  auto& kernel = *conv2d_fwd_kernel.get(x.device());
  return kernel(input_in_format(x), contiguous(w), contiguous(b), p);
}

Tensor conv2d_fused(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                    const Tensor& scale, const Tensor& shift, const Tensor& residual, bool relu) {
  Shape out = check_conv("conv2d_fused", x, w, b, p);
  QK_CHECK(scale.defined() == shift.defined(),
           "conv2d_fused: give both scale and shift, or neither");
  for (const Tensor* t : {&scale, &shift}) {
    if (!t->defined()) continue;
    check_operand("conv2d_fused", t == &scale ? "scale" : "shift", *t, x);
    QK_CHECK(t->dim() == 1 && t->size(0) == out[1], "conv2d_fused: ",
             t == &scale ? "scale" : "shift", " must be [", out[1], "] (one per output channel), got ",
             shape_str(t->shape()));
  }
  if (residual.defined()) {
    check_operand("conv2d_fused", "residual", residual, x);
    QK_CHECK(residual.shape() == out, "conv2d_fused: residual must be ", shape_str(out),
             " (the conv2d output), got ", shape_str(residual.shape()));
  }
  // Channels last: op by op below (each op keeps the format).
  if (x.device().type == DeviceType::cpu && !is_channels_last(x))
    return cpu::conv2d_fused(contiguous(x), contiguous(w), contiguous(b), p, contiguous(scale), contiguous(shift),
                             contiguous(residual), relu);
  // Other devices: the same, op by op.
  Tensor y = conv2d(x, w, b, p);
  if (scale.defined()) {
    y = mul(y, reshape(scale, {1, out[1], 1, 1}));
    y = add(y, reshape(shift, {1, out[1], 1, 1}));
  }
  if (residual.defined()) y = add(y, residual);
  return relu ? unary(UnaryOp::relu, y) : y;
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_out, const Tensor& x,
                                                   const Tensor& w, const Conv2dParams& p,
                                                   bool need_dx, bool need_dw, bool need_db) {
  Shape out = check_conv("conv2d_backward", x, w, Tensor(), p);
  check_operand("conv2d_backward", "grad_out", grad_out, x);
  QK_CHECK(grad_out.shape() == out, "conv2d_backward: grad_out must be ", shape_str(out),
           " (the conv2d output for x ", shape_str(x.shape()), ", weight ", shape_str(w.shape()),
           "), got ", shape_str(grad_out.shape()));
  auto& kernel = *conv2d_bwd_kernel.get(x.device());
  const MemoryFormat f = suggest_memory_format(x);
  return kernel(contiguous(grad_out, f), input_in_format(x), contiguous(w), p, need_dx, need_dw, need_db);
}

}  // namespace qk::ops
