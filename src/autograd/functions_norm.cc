// Differentiable normalisation: batch_norm, layer_norm, rms_norm. Each saves
// its input and the forward's statistics; the backward is one fused raw op.
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/norm.h"

namespace qk {

using autograd::record;
using V = std::vector<Tensor>;

// x [N, C, ...]; running stats are buffers: updated in place, never differentiated.
// Under autocast a bf16/f16 x stays in its dtype, as in PyTorch's CPU autocast:
// the kernel accumulates in f32 and keeps the parameters and statistics in
// theirs, so a conv -> BN -> ReLU chain stays bf16 with no cast passes.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps) {
  auto r = ops::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
  if (autograd::needs_grad({x, weight, bias})) {
    Tensor mean = r.save_mean, invstd = r.save_invstd;
    const bool has_bias = bias.defined();
    record("BatchNormBackward", {x, weight, bias}, {r.out},
           [x, weight, mean, invstd, training, has_bias](const V& g) -> V {
             auto [dx, dweight, dbias] =
                 ops::batch_norm_backward(g[0], x, weight, mean, invstd, training);
             return {dx, dweight, has_bias ? dbias : Tensor()};
           });
  }
  return r.out;
}

// x [..., *normalized_shape]; mean/rstd [..., 1, ...] saved for the backward.
Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const Tensor x = autocast::to_f32(x_in);
  auto [out, mean, rstd] = ops::layer_norm(x, normalized_shape, weight, bias, eps);
  if (autograd::needs_grad({x, weight, bias})) {
    const bool has_bias = bias.defined();
    record("LayerNormBackward", {x, weight, bias}, {out},
           [x, normalized_shape, weight, mean, rstd, has_bias](const V& g) -> V {
             auto [dx, dweight, dbias] =
                 ops::layer_norm_backward(g[0], x, normalized_shape, mean, rstd, weight);
             return {dx, dweight, has_bias ? dbias : Tensor()};
           });
  }
  return out;
}

Tensor rms_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight, double eps) {
  const Tensor x = autocast::to_f32(x_in);
  auto [out, rstd] = ops::rms_norm(x, normalized_shape, weight, eps);
  if (autograd::needs_grad({x, weight})) {
    record("RmsNormBackward", {x, weight}, {out},
           [x, normalized_shape, weight, rstd](const V& g) -> V {
             auto [dx, dweight] = ops::rms_norm_backward(g[0], x, normalized_shape, rstd, weight);
             return {dx, dweight};
           });
  }
  return out;
}

}  // namespace qk
