// Raw normalisation kernels with their backward.
#pragma once

#include <tuple>

#include "qk/tensor/tensor.h"

namespace qk::ops {

struct BatchNormResult {
  Tensor out;
  Tensor save_mean;    // [C] batch mean (training) or running mean (eval)
  Tensor save_invstd;  // [C] 1/sqrt(var + eps)
};
// x [N,C,...]; weight/bias [C] or undefined; in training, running stats (if
// defined) are updated in place with `momentum` and the unbiased variance, as PyTorch.
BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Tensor& running_mean, const Tensor& running_var, bool training,
                           double momentum, double eps);
// Returns (dx, dweight, dbias).
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& x,
                                                       const Tensor& weight,
                                                       const Tensor& save_mean,
                                                       const Tensor& save_invstd, bool training);

// Normalises over the trailing dims of `normalized_shape`. Returns (out, mean, rstd).
std::tuple<Tensor, Tensor, Tensor> layer_norm(const Tensor& x, const Shape& normalized_shape,
                                              const Tensor& weight, const Tensor& bias, double eps);
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_out, const Tensor& x,
                                                       const Shape& normalized_shape,
                                                       const Tensor& mean, const Tensor& rstd,
                                                       const Tensor& weight);
// x * rsqrt(mean(x^2) + eps) * weight. Returns (out, rstd).
std::pair<Tensor, Tensor> rms_norm(const Tensor& x, const Shape& normalized_shape,
                                   const Tensor& weight, double eps);
// Returns (dx, dweight).
std::pair<Tensor, Tensor> rms_norm_backward(const Tensor& grad_out, const Tensor& x,
                                            const Shape& normalized_shape, const Tensor& rstd,
                                            const Tensor& weight);

}  // namespace qk::ops
