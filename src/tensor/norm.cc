// Raw normalisation ops: validation, then the device's kernel.
#include "qk/tensor/ops/norm.h"

#include <algorithm>

#include "qk/tensor/dispatch.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/view.h"
#include "batch_norm_channels_last.h"
#include "op_kernel_tables.h"
#include "cpu/norm.h"

namespace qk::ops {

QK_DEFINE_KERNEL(batch_norm_kernel, BatchNormFn);
QK_DEFINE_KERNEL(batch_norm_backward_kernel, BatchNormBwdFn);
QK_DEFINE_KERNEL(batch_norm_channels_last_kernel, BatchNormFn);
QK_DEFINE_KERNEL(batch_norm_channels_last_backward_kernel, BatchNormBwdFn);
QK_DEFINE_KERNEL(layer_norm_kernel, LayerNormFn);
QK_DEFINE_KERNEL(layer_norm_backward_kernel, LayerNormBwdFn);
QK_DEFINE_KERNEL(rms_norm_kernel, RmsNormFn);
QK_DEFINE_KERNEL(rms_norm_backward_kernel, RmsNormBwdFn);

namespace {

QK_REGISTER_KERNEL(batch_norm_kernel, cpu, cpu::batch_norm);
QK_REGISTER_KERNEL(batch_norm_backward_kernel, cpu, cpu::batch_norm_backward);
QK_REGISTER_KERNEL(layer_norm_kernel, cpu, cpu::layer_norm);
QK_REGISTER_KERNEL(layer_norm_backward_kernel, cpu, cpu::layer_norm_backward);
QK_REGISTER_KERNEL(rms_norm_kernel, cpu, cpu::rms_norm);
QK_REGISTER_KERNEL(rms_norm_backward_kernel, cpu, cpu::rms_norm_backward);


// A per-channel (or per-feature) parameter: undefined, or floating of `shape`
// on x's device.
void check_param(const char* op, const char* name, const Tensor& p, const Tensor& x,
                 const Shape& shape) {
  if (!p.defined()) return;
  QK_CHECK_TYPE(is_floating(p.dtype()), op, ": ", name, " must be floating point, got ",
                dtype_name(p.dtype()));
  QK_CHECK_DEVICE(p.device() == x.device(), op, ": ", name, " is on ", p.device().str(),
                  " but the input is on ", x.device().str());
  QK_CHECK(p.shape() == shape, op, ": expected ", name, " of shape ", shape_str(shape),
           " for input ", shape_str(x.shape()), ", got ", shape_str(p.shape()));
}

void check_grad(const char* op, const Tensor& grad, const Tensor& x) {
  QK_CHECK(grad.shape() == x.shape(), op, ": grad_out shape ", shape_str(grad.shape()),
           " does not match the input shape ", shape_str(x.shape()));
  QK_CHECK_TYPE(grad.dtype() == x.dtype(), op, ": grad_out is ", dtype_name(grad.dtype()),
                " but the input is ", dtype_name(x.dtype()));
  QK_CHECK_DEVICE(grad.device() == x.device(), op, ": grad_out is on ", grad.device().str(),
                  " but the input is on ", x.device().str());
}

// normalized_shape must be the trailing dims of x.
void check_normalized(const char* op, const Tensor& x, const Shape& nshape) {
  QK_CHECK_TYPE(is_floating(x.dtype()), op, ": expected a floating-point input, got ",
                dtype_name(x.dtype()));
  const auto nd = static_cast<int64_t>(nshape.size());
  bool ok = nd >= 1 && nd <= x.dim();
  for (int64_t i = 0; ok && i < nd; ++i) ok = x.size(x.dim() - nd + i) == nshape[i];
  QK_CHECK(ok, op, ": normalized_shape ", shape_str(nshape),
           " must be non-empty and equal the trailing dims of the input ", shape_str(x.shape()));
}

DType stat_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

}  // namespace

BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Tensor& running_mean, const Tensor& running_var, bool training,
                           double momentum, double eps) {
  QK_CHECK(x.dim() >= 2, "batch_norm: expected an input [N, C, ...] with at least 2 dims, got ",
           shape_str(x.shape()));
  QK_CHECK_TYPE(is_floating(x.dtype()), "batch_norm: expected a floating-point input, got ",
                dtype_name(x.dtype()));
  const Shape c_shape{x.size(1)};
  check_param("batch_norm", "weight", weight, x, c_shape);
  check_param("batch_norm", "bias", bias, x, c_shape);
  check_param("batch_norm", "running_mean", running_mean, x, c_shape);
  check_param("batch_norm", "running_var", running_var, x, c_shape);
  QK_CHECK(running_mean.defined() == running_var.defined(),
           "batch_norm: running_mean and running_var must both be given or both be undefined");
  QK_CHECK(training || running_mean.defined(),
           "batch_norm: evaluation mode needs running_mean and running_var (input ",
           shape_str(x.shape()), ")");
  QK_CHECK(eps > 0, "batch_norm: eps must be > 0, got ", eps);
  if (training) {
    QK_CHECK(x.numel() / std::max<int64_t>(1, x.size(1)) > 1,
             "batch_norm: expected more than 1 value per channel when training, got input ",
             shape_str(x.shape()));
  }
  // Channels last (memory_format.h): the device's kernels for it, else from
  // column reductions; in that format either way.
  BatchNormResult r;
  if (!is_channels_last(x))
    r = batch_norm_kernel.get(x.device())(contiguous(x), weight, bias, running_mean, running_var, training, momentum,
                                          eps);
  else if (batch_norm_channels_last_kernel.supports(x.device().type))
    r = batch_norm_channels_last_kernel.get(x.device())(x, weight, bias, running_mean, running_var, training,
                                                        momentum, eps);
  else
    r = batch_norm_channels_last(x, weight, bias, running_mean, running_var, training, momentum, eps);
  if (training && running_mean.defined()) {
    running_mean.bump_version();
    running_var.bump_version();
  }
  return r;
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& x,
                                                       const Tensor& weight,
                                                       const Tensor& save_mean,
                                                       const Tensor& save_invstd, bool training) {
  QK_CHECK(x.dim() >= 2, "batch_norm_backward: expected an input [N, C, ...], got ",
           shape_str(x.shape()));
  check_grad("batch_norm_backward", grad_out, x);
  const Shape c_shape{x.size(1)};
  check_param("batch_norm_backward", "weight", weight, x, c_shape);
  check_param("batch_norm_backward", "save_mean", save_mean, x, c_shape);
  check_param("batch_norm_backward", "save_invstd", save_invstd, x, c_shape);
  QK_CHECK(save_mean.defined() && save_invstd.defined(),
           "batch_norm_backward: save_mean and save_invstd are required");
  if (is_channels_last(x)) {
    if (batch_norm_channels_last_backward_kernel.supports(x.device().type))
      return batch_norm_channels_last_backward_kernel.get(x.device())(
          contiguous(grad_out, MemoryFormat::channels_last), x, weight, save_mean, save_invstd, training);
    return batch_norm_channels_last_backward(grad_out, x, weight, save_mean, save_invstd, training);
  }
  return batch_norm_backward_kernel.get(x.device())(contiguous(grad_out), contiguous(x), weight, save_mean,
                                                    save_invstd, training);
}

std::tuple<Tensor, Tensor, Tensor> layer_norm(const Tensor& x, const Shape& normalized_shape,
                                              const Tensor& weight, const Tensor& bias,
                                              double eps) {
  check_normalized("layer_norm", x, normalized_shape);
  check_param("layer_norm", "weight", weight, x, normalized_shape);
  check_param("layer_norm", "bias", bias, x, normalized_shape);
  QK_CHECK(eps > 0, "layer_norm: eps must be > 0, got ", eps);
  return layer_norm_kernel.get(x.device())(contiguous(x), normalized_shape, weight, bias, eps);
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_out, const Tensor& x,
                                                       const Shape& normalized_shape,
                                                       const Tensor& mean, const Tensor& rstd,
                                                       const Tensor& weight) {
  check_normalized("layer_norm_backward", x, normalized_shape);
  check_grad("layer_norm_backward", grad_out, x);
  check_param("layer_norm_backward", "weight", weight, x, normalized_shape);
  const int64_t rows = x.numel() / std::max<int64_t>(1, shape_numel(normalized_shape));
  QK_CHECK(mean.defined() && rstd.defined() && mean.numel() == rows && rstd.numel() == rows,
           "layer_norm_backward: expected mean and rstd with ", rows, " values for input ",
           shape_str(x.shape()));
  const DType sd = stat_dtype(x.dtype());
  return layer_norm_backward_kernel.get(x.device())(contiguous(grad_out), contiguous(x), normalized_shape,
                                                    cast(mean, sd), cast(rstd, sd), weight);
}

std::pair<Tensor, Tensor> rms_norm(const Tensor& x, const Shape& normalized_shape,
                                   const Tensor& weight, double eps) {
  check_normalized("rms_norm", x, normalized_shape);
  check_param("rms_norm", "weight", weight, x, normalized_shape);
  QK_CHECK(eps > 0, "rms_norm: eps must be > 0, got ", eps);
  return rms_norm_kernel.get(x.device())(contiguous(x), normalized_shape, weight, eps);
}

std::pair<Tensor, Tensor> rms_norm_backward(const Tensor& grad_out, const Tensor& x,
                                            const Shape& normalized_shape, const Tensor& rstd,
                                            const Tensor& weight) {
  check_normalized("rms_norm_backward", x, normalized_shape);
  check_grad("rms_norm_backward", grad_out, x);
  check_param("rms_norm_backward", "weight", weight, x, normalized_shape);
  const int64_t rows = x.numel() / std::max<int64_t>(1, shape_numel(normalized_shape));
  QK_CHECK(rstd.defined() && rstd.numel() == rows, "rms_norm_backward: expected rstd with ", rows,
           " values for input ", shape_str(x.shape()));
  return rms_norm_backward_kernel.get(x.device())(contiguous(grad_out), contiguous(x), normalized_shape,
                                                  cast(rstd, stat_dtype(x.dtype())), weight);
}

}  // namespace qk::ops
