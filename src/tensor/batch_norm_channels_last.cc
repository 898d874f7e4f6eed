#include "batch_norm_channels_last.h"

#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace qk::ops {

namespace {

DType stats_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// x's storage as rows [N*H*W, C] in the statistics' dtype (a view for f32/f64).
Tensor rows_of(const Tensor& x, DType adt) {
  const Tensor cl = contiguous(x, MemoryFormat::channels_last);
  return cast(reshape(permute(cl, {0, 2, 3, 1}), {-1, x.size(1)}), adt);
}

// rows [N*H*W, C] back to a channels-last [N, C, H, W] of `like`'s shape and `dt`.
Tensor from_rows(const Tensor& rows, const Tensor& like, DType dt) {
  const Tensor nhwc = view(cast(rows, dt), {like.size(0), like.size(2), like.size(3), like.size(1)});
  return contiguous(permute(nhwc, {0, 3, 1, 2}), MemoryFormat::channels_last);
}

Tensor param_or(const Tensor& p, double value, int64_t c, const Tensor& like) {
  return p.defined() ? cast(p, like.dtype()) : full({c}, value, TensorOptions().dtype(like.dtype()).device(like.device()));
}

}  // namespace

BatchNormResult batch_norm_channels_last(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                         const Tensor& running_mean, const Tensor& running_var,
                                         bool training, double momentum, double eps) {
  const int64_t c = x.size(1);
  const DType adt = stats_dtype(x.dtype());
  const Tensor rows = rows_of(x, adt);
  const int64_t m = rows.size(0);
  Tensor mean, var;
  if (training) {
    mean = ops::mean(rows, {0}, false);
    const Tensor centered = sub(rows, mean);  // two passes, as accurate as the planes' shifted sums
    var = ops::mean(mul(centered, centered), {0}, false);
  } else {
    mean = cast(running_mean, adt);
    var = cast(running_var, adt);
  }
  const Tensor invstd = unary(UnaryOp::rsqrt, binary_scalar(BinaryOp::add, var, eps));
  const Tensor scale = mul(invstd, param_or(weight, 1.0, c, rows));
  const Tensor shift = sub(param_or(bias, 0.0, c, rows), mul(mean, scale));
  const Tensor out = from_rows(add(mul(rows, scale), shift), x, x.dtype());
  // PyTorch's update, with the unbiased batch variance.
  if (training && running_mean.defined()) {
    const Tensor rm = add(binary_scalar(BinaryOp::mul, cast(running_mean, adt), 1 - momentum),
                          binary_scalar(BinaryOp::mul, mean, momentum));
    copy_(running_mean, rm);
  }
  if (training && running_var.defined()) {
    const double bessel = m > 1 ? static_cast<double>(m) / static_cast<double>(m - 1) : 1.0;
    const Tensor rv = add(binary_scalar(BinaryOp::mul, cast(running_var, adt), 1 - momentum),
                          binary_scalar(BinaryOp::mul, var, momentum * bessel));
    copy_(running_var, rv);
  }
  return {out, mean, invstd};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_channels_last_backward(const Tensor& grad_out, const Tensor& x,
                                                                     const Tensor& weight,
                                                                     const Tensor& save_mean,
                                                                     const Tensor& save_invstd, bool training) {
  const int64_t c = x.size(1);
  const DType adt = stats_dtype(x.dtype());
  const Tensor rows = rows_of(x, adt), g = rows_of(grad_out, adt);
  const double m = static_cast<double>(rows.size(0));
  const Tensor mean = cast(save_mean, adt), invstd = cast(save_invstd, adt);
  const Tensor xhat = mul(sub(rows, mean), invstd);
  const Tensor sdy = sum(g, {0}, false);
  const Tensor sdy_xhat = sum(mul(g, xhat), {0}, false);
  const Tensor k = mul(invstd, param_or(weight, 1.0, c, rows));  // w * invstd
  Tensor dx_rows;
  if (training) {
    // dx = w * invstd * (dy - sum(dy)/M - xhat * sum(dy * xhat)/M)
    const Tensor centered = sub(g, binary_scalar(BinaryOp::div, sdy, m));
    dx_rows = mul(sub(centered, mul(xhat, binary_scalar(BinaryOp::div, sdy_xhat, m))), k);
  } else {
    dx_rows = mul(g, k);
  }
  const DType pdt = weight.defined() ? weight.dtype() : x.dtype();
  Tensor dweight;
  if (weight.defined()) dweight = cast(sdy_xhat, pdt);
  return {from_rows(dx_rows, x, x.dtype()), dweight, cast(sdy, pdt)};
}

}  // namespace qk::ops
