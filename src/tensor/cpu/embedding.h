// CPU embedding kernels: weight [V, D] and grad contiguous, indices
// contiguous i32/i64 (validated against V inside, raising IndexError).
#pragma once

#include "qk/tensor/tensor.h"

namespace qk::cpu {

Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx);

}  // namespace qk::cpu
