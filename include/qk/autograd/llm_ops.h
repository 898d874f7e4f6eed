// Differentiable fused ops of LLM layers (the contracts in the issue-15
// notes shared by the model, attention and kernel work).
//
//   using namespace qk;
//   Tensor q = rotary_embedding(q_raw, cos, sin);           // [B,T,H,D]
//   Tensor h = linear(swiglu(linear(x, w_fc1)), w_fc2);      // w_fc1 [2F, C]
//   Tensor loss = linear_cross_entropy(hidden.reshape({-1, C}), w_out, labels.reshape({-1}),
//                                      loss_mask / sum(loss_mask));
//   loss.backward();
//
// Each takes f32 or bf16 inputs (bf16 math accumulates in f32) and equals the
// unfused composition of qk/autograd/functions.h, forward and backward.
#pragma once

#include <cstdint>

#include "qk/tensor/tensor.h"

namespace qk {

// ---- rotary embedding, SwiGLU, output layer + cross entropy (functions_llm.cc) ----

// Rotary embedding, Megatron's non-interleaved ("rotate_half") form on the
// first R dims of D (R even, R <= D; dims R..D pass through). x: [B, T, H, D]
// (last dim contiguous; other strides free, e.g. a slice of a fused QKV
// projection); cos, sin: [T, R] f32, row t holding position t's angles in
// Megatron's cat(freqs, freqs) layout. Returns a contiguous [B, T, H, D] in
// x's dtype. cos and sin are constants: they must not require grad.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin);

// SwiGLU as Megatron: x [..., 2F] -> silu(x[..., :F]) * x[..., F:]  -> [..., F].
Tensor swiglu(const Tensor& x);

// The output layer and cross entropy without materialising the [N, V]
// logits more than one chunk of rows at a time. hidden [N, C], weight [V, C]
// (the output layer or tied embedding), target [N] i64 (ignore_index entries
// contribute nothing), token_weight [N] floating or undefined (all ones).
// Returns the f32 scalar
//   sum_i token_weight[i] * (logsumexp(logits_i) - logits_i[target_i]),
// logits = hidden . weight^T. Gradients flow to hidden and weight; they are
// computed with the loss (the loss is the end of the graph), so backward only
// scales them. token_weight is a constant (it must not require grad).
// Megatron's loss = sum(loss * loss_mask) / sum(loss_mask) is
// linear_cross_entropy(h, w, t, loss_mask / sum(loss_mask)).
Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& target,
                            const Tensor& token_weight = Tensor(), int64_t ignore_index = -100);

// ---- end of rotary embedding, SwiGLU, output layer + cross entropy ----

}  // namespace qk
