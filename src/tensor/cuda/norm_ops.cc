// Batch norm on CUDA, composed of the backend's own kernels (reductions with
// f64 accumulation, broadcast elementwise ops) in f32 (f64 for f64), with the
// CPU's formulas (src/tensor/cpu/norm_batch.cc):
//   training: statistics of the batch, running = (1 - m) running + m batch
//             (the variance unbiased); eval: the running statistics;
//   dx = w invstd (dy - sum(dy)/M - (x - mean) invstd^2 sum(dy (x - mean))/M)
// (eval: w invstd dy), dw = invstd sum(dy (x - mean)), db = sum(dy).
// The common case, contiguous f32/f16/bf16 input with f32 per-channel
// tensors, runs the fused kernels of batch_norm.cu (one or two launches a
// call); the composed form below, about twenty small launches, takes the rest.
// Channels-last input has its own kernels (three launches each way), with
// the front's composed form (batch_norm_channels_last.h) for the rest.
#include "batch_norm_channels_last.h"
#include "batch_norm_kernels.h"
#include "multiprocessors.h"
#include "op_kernel_tables.h"
#include "reduce_plan.h"
#include "stream_handle.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/memory_format.h"
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

// Whether the fused kernels take x (and dy): contiguous f32/f16/bf16, with
// every per-channel tensor f32 and contiguous (or absent where `optional`).
bool fused_input(const Tensor& x) {
  return x.dim() >= 2 && x.is_contiguous() &&
         (x.dtype() == DType::f32 || x.dtype() == DType::f16 || x.dtype() == DType::bf16);
}
bool fused_channel(const Tensor& t, bool optional) {
  return t.defined() ? t.dtype() == DType::f32 && t.is_contiguous() : optional;
}

BatchNormShape shape_of(const Tensor& x, double momentum, double eps) {
  BatchNormShape s;
  s.N = x.size(0);
  s.C = x.size(1);
  for (int64_t i = 2; i < x.dim(); ++i) s.S *= x.size(i);
  const double M = static_cast<double>(s.N * s.S);
  s.eps_f32 = static_cast<float>(eps);
  s.momentum = static_cast<float>(momentum);
  s.one_minus_momentum = static_cast<float>(1 - momentum);
  s.unbias = static_cast<float>(M / (M - 1));
  s.minus_inv_m = static_cast<float>(-1.0 / M);
  return s;
}

float* f32_or_null(const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

ops::BatchNormResult batch_norm_on_device(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& running_mean, const Tensor& running_var, bool training,
                                     double momentum, double eps) {
  if (fused_input(x) && fused_channel(weight, true) && fused_channel(bias, true) &&
      fused_channel(running_mean, !training) && fused_channel(running_var, !training)) {
    const BatchNormShape s = shape_of(x, momentum, eps);
    const TensorOptions f32 = TensorOptions().dtype(DType::f32).device(x.device());
    Tensor out = empty(x.shape(), TensorOptions().dtype(x.dtype()).device(x.device()));
    Tensor mean = empty({s.C}, f32), invstd = empty({s.C}, f32);
    DeviceStream ds(x.device().index);
    if (training) {
      launch_batch_norm_train(s, static_cast<int>(x.dtype()), x.raw_data(), out.raw_data(), mean.data_ptr<float>(),
                              invstd.data_ptr<float>(), f32_or_null(running_mean),
                              f32_or_null(running_var), f32_or_null(weight), f32_or_null(bias), ds.stream());
      if (running_mean.defined()) running_mean.bump_version();
      if (running_var.defined()) running_var.bump_version();
    } else {
      Tensor scale = empty({s.C}, f32), shift = empty({s.C}, f32);
      launch_batch_norm_eval(s, static_cast<int>(x.dtype()), x.raw_data(), out.raw_data(),
                             running_mean.data_ptr<float>(), running_var.data_ptr<float>(), f32_or_null(weight),
                             f32_or_null(bias), mean.data_ptr<float>(), invstd.data_ptr<float>(),
                             scale.data_ptr<float>(), shift.data_ptr<float>(), ds.stream());
    }
    return {out, mean, invstd};
  }
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
  if (fused_input(x) && fused_input(gy) && gy.dtype() == x.dtype() && gy.shape() == x.shape() &&
      fused_channel(weight, false) && fused_channel(save_mean, false) && fused_channel(save_invstd, false)) {
    const BatchNormShape s = shape_of(x, 0.0, 0.0);
    const TensorOptions f32 = TensorOptions().dtype(DType::f32).device(x.device());
    Tensor dx = empty(x.shape(), TensorOptions().dtype(x.dtype()).device(x.device()));
    Tensor dweight = empty({s.C}, f32), dbias = empty({s.C}, f32);
    DeviceStream ds(x.device().index);
    launch_batch_norm_backward(s, static_cast<int>(x.dtype()), training, gy.raw_data(), x.raw_data(),
                               save_mean.data_ptr<float>(), save_invstd.data_ptr<float>(), weight.data_ptr<float>(),
                               dx.raw_data(), dweight.data_ptr<float>(), dbias.data_ptr<float>(), ds.stream());
    return {dx, dweight, dbias};
  }
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

// ---- channels last ----

bool nhwc_input(const Tensor& x) {
  return ops::is_channels_last(x) && (x.dtype() == DType::f32 || x.dtype() == DType::f16 || x.dtype() == DType::bf16);
}

// The sums' parts: reduce_plan.h's plan for the columns of [M, C].
NhwcPlan nhwc_plan(const BatchNormShape& s, int device) {
  const ReducePlan r = plan_reduce(ReduceShape{1, s.N * s.S, s.C}, multiprocessors(device));
  return NhwcPlan{r.splits, r.span};
}

ops::BatchNormResult batch_norm_nhwc_on_device(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                               const Tensor& running_mean, const Tensor& running_var, bool training,
                                               double momentum, double eps) {
  if (!(nhwc_input(x) && fused_channel(weight, true) && fused_channel(bias, true) &&
        fused_channel(running_mean, !training) && fused_channel(running_var, !training)))
    return ops::batch_norm_channels_last(x, weight, bias, running_mean, running_var, training, momentum, eps);
  const BatchNormShape s = shape_of(x, momentum, eps);
  const TensorOptions f32 = TensorOptions().dtype(DType::f32).device(x.device());
  Tensor out = ops::empty(x.shape(), TensorOptions().dtype(x.dtype()).device(x.device()),
                          ops::MemoryFormat::channels_last);
  Tensor mean = empty({s.C}, f32), invstd = empty({s.C}, f32);
  DeviceStream ds(x.device().index);
  if (training) {
    const NhwcPlan p = nhwc_plan(s, x.device().index);
    Tensor work = empty({nhwc_work_floats(s.C, p.splits)}, f32);  // the caching allocator's: no cudaMalloc once warm
    launch_batch_norm_nhwc_train(s, p, static_cast<int>(x.dtype()), x.raw_data(), out.raw_data(),
                                 mean.data_ptr<float>(), invstd.data_ptr<float>(), f32_or_null(running_mean),
                                 f32_or_null(running_var), f32_or_null(weight), f32_or_null(bias),
                                 work.data_ptr<float>(), ds.stream());
  } else {
    Tensor work = empty({nhwc_work_floats(s.C, 1)}, f32);
    launch_batch_norm_nhwc_eval(s, static_cast<int>(x.dtype()), x.raw_data(), out.raw_data(),
                                running_mean.data_ptr<float>(), running_var.data_ptr<float>(), f32_or_null(weight),
                                f32_or_null(bias), mean.data_ptr<float>(), invstd.data_ptr<float>(),
                                work.data_ptr<float>(), ds.stream());
  }
  return {out, mean, invstd};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_nhwc_backward_on_device(const Tensor& gy, const Tensor& x,
                                                                      const Tensor& weight, const Tensor& save_mean,
                                                                      const Tensor& save_invstd, bool training) {
  if (!(nhwc_input(x) && ops::is_channels_last(gy) && gy.dtype() == x.dtype() && fused_channel(weight, false) &&
        fused_channel(save_mean, false) && fused_channel(save_invstd, false)))
    return ops::batch_norm_channels_last_backward(gy, x, weight, save_mean, save_invstd, training);
  const BatchNormShape s = shape_of(x, 0.0, 0.0);
  const TensorOptions f32 = TensorOptions().dtype(DType::f32).device(x.device());
  Tensor dx = ops::empty(x.shape(), TensorOptions().dtype(x.dtype()).device(x.device()),
                         ops::MemoryFormat::channels_last);
  Tensor dweight = empty({s.C}, f32), dbias = empty({s.C}, f32);
  const NhwcPlan p = nhwc_plan(s, x.device().index);
  Tensor work = empty({nhwc_work_floats(s.C, p.splits)}, f32);
  DeviceStream ds(x.device().index);
  launch_batch_norm_nhwc_backward(s, p, static_cast<int>(x.dtype()), training, gy.raw_data(), x.raw_data(),
                                  save_mean.data_ptr<float>(), save_invstd.data_ptr<float>(),
                                  weight.data_ptr<float>(), dx.raw_data(), dweight.data_ptr<float>(),
                                  dbias.data_ptr<float>(), work.data_ptr<float>(), ds.stream());
  return {dx, dweight, dbias};
}

[[maybe_unused]] const bool registered = [] {
  ops::batch_norm_kernel.set(DeviceType::cuda, &batch_norm_on_device);
  ops::batch_norm_backward_kernel.set(DeviceType::cuda, &batch_norm_backward_on_device);
  ops::batch_norm_channels_last_kernel.set(DeviceType::cuda, &batch_norm_nhwc_on_device);
  ops::batch_norm_channels_last_backward_kernel.set(DeviceType::cuda, &batch_norm_nhwc_backward_on_device);
  return true;
}();

}  // namespace

}  // namespace qk::cuda
