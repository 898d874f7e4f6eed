// CPU softmax / log_softmax kernels (contiguous input, dim already wrapped);
// the vectorizable exp they share with the loss kernels is in vec_math.h.
#pragma once

#include "qk/base/vec_math.h"
#include "qk/tensor/tensor.h"

namespace qk::cpu {

// out = softmax(x, dim), or log_softmax when `log`.
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log);
// dx from dy and the forward's output y.
Tensor softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim, bool log);

}  // namespace qk::cpu
