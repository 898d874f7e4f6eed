// CPU output layer fused with cross entropy, in chunks of rows of logits.
#pragma once

#include "qk/tensor/ops/llm.h"

namespace qk::cpu {

// hidden [N,C], weight [V,C] contiguous, one dtype (f32, f64, bf16); target
// [N] (i64/i32) and token_weight [N] (or undefined) contiguous; validated by
// the front (src/tensor/llm.cc) except the target range, checked here.
ops::LinearCrossEntropyResult linear_cross_entropy(const Tensor& hidden, const Tensor& weight,
                                                   const Tensor& target,
                                                   const Tensor& token_weight,
                                                   const ops::LinearCrossEntropyOptions& o);

}  // namespace qk::cpu
