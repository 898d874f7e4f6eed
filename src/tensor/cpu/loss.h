// CPU loss kernels. Called by src/tensor/nn.cc after validation: logits and
// log_probs are contiguous [N, C, S...], target contiguous i32/i64 [N, S...].
#pragma once

#include "qk/tensor/ops/nn.h"

namespace qk::cpu {

ops::CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& target,
                                      int64_t ignore_index, double label_smoothing,
                                      ops::Reduction reduction);
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& log_probs,
                              const Tensor& target, int64_t ignore_index, double label_smoothing,
                              ops::Reduction reduction);

}  // namespace qk::cpu
