// Batch normalisation of a channels-last input (memory_format.h) from the
// device's reductions and elementwise kernels, for devices whose batch-norm
// kernels take [N, C, H, W] planes: x seen as its [N*H*W, C] storage, the
// per-channel statistics are column reductions and the rest is broadcast
// arithmetic, in f32 (f64 for f64) as the kernels compute. The result and dx
// are channels last. Same contract as ops::batch_norm / batch_norm_backward
// (validated there).
#pragma once

#include <tuple>

#include "qk/tensor/ops/norm.h"

namespace qk::ops {

BatchNormResult batch_norm_channels_last(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                         const Tensor& running_mean, const Tensor& running_var,
                                         bool training, double momentum, double eps);

std::tuple<Tensor, Tensor, Tensor> batch_norm_channels_last_backward(const Tensor& grad_out, const Tensor& x,
                                                                     const Tensor& weight,
                                                                     const Tensor& save_mean,
                                                                     const Tensor& save_invstd, bool training);

}  // namespace qk::ops
