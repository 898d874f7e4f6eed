// CPU normalisation kernels. Called by src/tensor/norm.cc after validation:
// x and grad_out are contiguous; parameters are 1-D (any floating dtype).
#pragma once

#include <tuple>

#include "qk/tensor/ops/norm.h"

namespace qk::cpu {

// x viewed as [N, C, S] (S = product of the dims after C).
ops::BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                const Tensor& running_mean, const Tensor& running_var,
                                bool training, double momentum, double eps);
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& x,
                                                       const Tensor& weight,
                                                       const Tensor& save_mean,
                                                       const Tensor& save_invstd, bool training);

// x viewed as [M, D] (D = product of normalized_shape).
std::tuple<Tensor, Tensor, Tensor> layer_norm(const Tensor& x, const Shape& normalized_shape,
                                              const Tensor& weight, const Tensor& bias, double eps);
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_out, const Tensor& x,
                                                       const Shape& normalized_shape,
                                                       const Tensor& mean, const Tensor& rstd,
                                                       const Tensor& weight);
std::pair<Tensor, Tensor> rms_norm(const Tensor& x, const Shape& normalized_shape,
                                   const Tensor& weight, double eps);
std::pair<Tensor, Tensor> rms_norm_backward(const Tensor& grad_out, const Tensor& x,
                                            const Shape& normalized_shape, const Tensor& rstd,
                                            const Tensor& weight);

}  // namespace qk::cpu
