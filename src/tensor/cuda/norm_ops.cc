// Batch norm on CUDA, composed of the backend's own kernels (reductions with
// f64 accumulation, broadcast elementwise ops) in f32 (f64 for f64), with the
// CPU's formulas (src/tensor/cpu/norm_batch.cc):
//   training: statistics of the batch, running = (1 - m) running + m batch
//             (the variance unbiased); eval: the running statistics;
//   dx = w invstd (dy - sum(dy)/M - (x - mean) invstd^2 sum(dy (x - mean))/M)
// (eval: w invstd dy), dw = invstd sum(dy (x - mean)), db = sum(dy).
// Several launches per call where a fused kernel would take one or two: a
// first version to be checked against the CPU on a GPU, not a tuned one.
#include "op_kernel_tables.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace qk::cuda {

namespace {

using ops::binary;
using ops::binary_scalar;

DType acc_dtype(const Tensor& x) { return x.dtype() == DType::f64 ? DType::f64 : DType::f32; }

// The dims reduced over: all but 1 (the channels).
Shape stat_dims(const Tensor& x) {
  Shape d{0};
  for (int64_t i = 2; i < x.dim(); ++i) d.push_back(i);
  return d;
}

// [C] -> [1, C, 1, ...] to broadcast against x.
Tensor per_channel(const Tensor& v, const Tensor& x) {
  Shape s(x.dim(), 1);
  s[1] = x.size(1);
  return ops::reshape(v, s);
}

Tensor as(const Tensor& t, DType d) { return ops::cast(t, d); }

ops::BatchNormResult batch_norm_on_device(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& running_mean, const Tensor& running_var, bool training,
                                     double momentum, double eps) {
  const DType a = acc_dtype(x);
  const Shape dims = stat_dims(x);
  Tensor xa = as(x, a);
  Tensor mean, var;
  if (training) {
    mean = ops::mean(xa, dims, false);
    Tensor xc = binary(BinaryOp::sub, xa, per_channel(mean, x));
    var = ops::mean(binary(BinaryOp::mul, xc, xc), dims, false);
  } else {
    QK_CHECK(running_mean.defined() && running_var.defined(),
             "batch_norm: evaluation needs the running mean and variance");
    // Copies: a later update of the running statistics must not change
    // what backward reads.
    mean = ops::clone(as(running_mean, a));
    var = as(running_var, a);
  }
  Tensor invstd = ops::unary(UnaryOp::rsqrt, binary_scalar(BinaryOp::add, var, eps));
  Tensor scale = weight.defined() ? binary(BinaryOp::mul, invstd, as(weight, a)) : invstd;
  Tensor shift = binary(BinaryOp::mul, mean, scale);
  shift = bias.defined() ? binary(BinaryOp::sub, as(bias, a), shift) : ops::unary(UnaryOp::neg, shift);
  Tensor out = binary(BinaryOp::add, binary(BinaryOp::mul, xa, per_channel(scale, x)), per_channel(shift, x));
  if (training) {
    const double M = static_cast<double>(x.numel() / x.size(1));
    if (running_mean.defined()) {
      Tensor next = binary(BinaryOp::add, binary_scalar(BinaryOp::mul, as(running_mean, a), 1 - momentum),
                           binary_scalar(BinaryOp::mul, mean, momentum));
      ops::copy_(running_mean, next);
    }
    if (running_var.defined()) {
      Tensor unbiased = binary_scalar(BinaryOp::mul, var, M / (M - 1));
      Tensor next = binary(BinaryOp::add, binary_scalar(BinaryOp::mul, as(running_var, a), 1 - momentum),
                           binary_scalar(BinaryOp::mul, unbiased, momentum));
      ops::copy_(running_var, next);
    }
  }
  return {as(out, x.dtype()), mean, invstd};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward_on_device(const Tensor& gy, const Tensor& x,
                                                                 const Tensor& weight, const Tensor& save_mean,
                                                                 const Tensor& save_invstd, bool training) {
  const DType a = acc_dtype(x);
  const Shape dims = stat_dims(x);
  const double M = static_cast<double>(x.numel() / x.size(1));
  Tensor ga = as(gy, a), xa = as(x, a);
  Tensor mean = as(save_mean, a), invstd = as(save_invstd, a);
  Tensor xc = binary(BinaryOp::sub, xa, per_channel(mean, x));
  Tensor sdy = ops::sum(ga, dims, false);
  Tensor sdyx = ops::sum(binary(BinaryOp::mul, ga, xc), dims, false);
  Tensor k1 = weight.defined() ? binary(BinaryOp::mul, invstd, as(weight, a)) : invstd;
  Tensor dx = binary(BinaryOp::mul, ga, per_channel(k1, x));
  if (training) {
    // - k1 invstd^2 sdyx / M per (x - mean), - k1 sdy / M per element.
    Tensor k2 = binary_scalar(BinaryOp::mul, binary(BinaryOp::mul, k1, binary(BinaryOp::mul, invstd, binary(BinaryOp::mul, invstd, sdyx))), -1.0 / M);
    Tensor k3 = binary_scalar(BinaryOp::mul, binary(BinaryOp::mul, k1, sdy), -1.0 / M);
    dx = binary(BinaryOp::add, dx, binary(BinaryOp::mul, xc, per_channel(k2, x)));
    dx = binary(BinaryOp::add, dx, per_channel(k3, x));
  }
  const DType pdt = weight.defined() ? weight.dtype() : x.dtype();
  Tensor dweight;
  if (weight.defined()) dweight = as(binary(BinaryOp::mul, sdyx, invstd), pdt);
  return {as(dx, x.dtype()), dweight, as(sdy, pdt)};
}

[[maybe_unused]] const bool registered = [] {
  ops::batch_norm_kernel.set(DeviceType::cuda, &batch_norm_on_device);
  ops::batch_norm_backward_kernel.set(DeviceType::cuda, &batch_norm_backward_on_device);
  return true;
}();

}  // namespace

}  // namespace qk::cuda
