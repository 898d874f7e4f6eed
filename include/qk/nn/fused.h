// Conv2d followed by BatchNorm2d, then optionally a residual sum and a ReLU,
// as one call:
//
//   y = conv_bn(*conv, *bn, x, /*relu=*/true, residual);
//   // == relu(bn(conv(x)) + residual), residual optional
//
// In inference (bn in eval mode with running stats, nothing needing a
// gradient, autocast off) it runs as one fused convolution (ops::conv2d_fused:
// the batch norm folded into a per-channel scale and shift, applied with the
// sum and the ReLU on the convolution's output) instead of three or four
// passes over the activation. Otherwise, and whenever the fusion does not
// apply, it is exactly the modules' own forward calls, so training and
// gradients are unchanged.
#pragma once

#include "qk/nn/batchnorm.h"
#include "qk/nn/conv.h"

namespace qk::nn {

Tensor conv_bn(Conv2dImpl& conv, BatchNorm2dImpl& bn, const Tensor& x, bool relu,
               const Tensor& residual = Tensor());

}  // namespace qk::nn
