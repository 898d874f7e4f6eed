// Raw fused kernels of LLM layers (the differentiable versions are in
// qk/autograd/llm_ops.h): rotary position embedding, SwiGLU, and the output
// layer fused with cross entropy.
//
//   Tensor y = qk::ops::rotary_embedding(x, cos, sin);          // x [B,T,H,D]
//   Tensor dx = qk::ops::rotary_embedding_backward(dy, cos, sin);
//   auto r = qk::ops::linear_cross_entropy(h, w, target, {}, {.grad_hidden = true});
//   // r.loss: scalar; r.grad_hidden: d loss / d h
#pragma once

#include "qk/tensor/tensor.h"

namespace qk::ops {

// Megatron's non-interleaved rotary embedding on the first R dims of D:
// x [B,T,H,D] (last dim contiguous, other strides free), cos/sin [T,R] f32
// (f64 allowed for an f64 x), R even, R <= D. Returns a contiguous
// [B,T,H,D] in x's dtype: y = x * cos + rotate_half(x) * sin on [0, R), x
// elsewhere.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin);
// The gradient w.r.t. x of rotary_embedding (the transposed rotation).
Tensor rotary_embedding_backward(const Tensor& grad, const Tensor& cos, const Tensor& sin);

// x [..., 2F] -> silu(x[..., :F]) * x[..., F:]   ([..., F], x's dtype).
Tensor swiglu(const Tensor& x);
// grad [..., F], x [..., 2F] -> dx [..., 2F].
Tensor swiglu_backward(const Tensor& grad, const Tensor& x);

struct LinearCrossEntropyOptions {
  int64_t ignore_index = -100;
  bool grad_hidden = false;  // also return d loss / d hidden
  bool grad_weight = false;  // also return d loss / d weight
  // Rows of logits computed at a time; 0 picks it from the vocabulary size
  // (64 MiB of f32 logits: Note [Chunk size] in linear_cross_entropy.cc). Tests set it
  // small to run several chunks.
  int64_t chunk_rows = 0;
};
struct LinearCrossEntropyResult {
  Tensor loss;         // scalar: f32 (f64 for f64 inputs)
  Tensor grad_hidden;  // [N,C] in hidden's dtype, when asked for
  Tensor grad_weight;  // [V,C] in weight's dtype, when asked for
};
// loss = sum_i token_weight[i] * (logsumexp(logits_i) - logits_i[target_i]),
// logits = hidden [N,C] . weight [V,C]^T, over the i whose target is not
// ignore_index, without ever holding more than one chunk of rows of logits.
// hidden and weight share one dtype (f32, bf16, f64; bf16 multiplies with f32
// accumulation and takes the softmax in f32); target [N] i64 or i32, each in
// [0, V) or ignore_index; token_weight [N] floating or undefined (ones).
// The gradients are computed in the same pass as the loss.
LinearCrossEntropyResult linear_cross_entropy(const Tensor& hidden, const Tensor& weight,
                                              const Tensor& target, const Tensor& token_weight,
                                              const LinearCrossEntropyOptions& o = {});

}  // namespace qk::ops
