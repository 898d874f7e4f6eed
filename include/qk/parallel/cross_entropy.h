// Cross entropy over logits split by vocabulary across the tensor-parallel
// group (Megatron's vocab_parallel_cross_entropy): the [N, V] logits are
// never gathered. Each rank holds columns [rank * V/tp, (rank+1) * V/tp);
// the row max and the sum of exponentials are all-reduced, and the target's
// logit comes from the rank that owns it. Backward is local (softmax minus
// the one-hot of the target, on this rank's columns).
//
//   Tensor logits = linear(copy_to_tensor_model_parallel_region(h, tp), w_shard);   // [N, V/tp]
//   Tensor loss = vocab_parallel_cross_entropy(logits, labels, tp);                // [N] f32
//   Tensor mean = sum(loss * loss_mask) / sum(loss_mask);                          // Megatron's
//
// logits: [..., V/tp] f32 (bf16/f16 are computed in f32); target: [...] i64
// in [0, V) or ignore_index (those tokens have loss 0 and no gradient).
// Returns the per-token loss [...] f32, the same on every rank of the group.
// Every rank of the group must call it with the same target (collective).
#pragma once

#include <cstdint>

#include "qk/dist/process_group.h"
#include "qk/tensor/tensor.h"

namespace qk::parallel {

Tensor vocab_parallel_cross_entropy(const Tensor& vocab_parallel_logits, const Tensor& target, dist::ProcessGroup& tp,
                                    int64_t ignore_index = -100);

}  // namespace qk::parallel
