// Fused, differentiable ops for transformer language models.
//
//   using namespace qk;
//   Tensor q = rotary_embedding(q_raw, cos, sin);           // [B,T,H,D]
//   Tensor out = flash_attention(q, k, v, {.dropout_p = 0.1, .training = true});
//   Tensor h = linear(swiglu(linear(x, w_fc1)), w_fc2);      // w_fc1 [2F, C]
//   Tensor loss = linear_cross_entropy(hidden.reshape({-1, C}), w_out, labels.reshape({-1}),
//                                      loss_mask / sum(loss_mask));
//   loss.backward();
//
// Each has a forward and a backward kernel, takes f32 or bf16 inputs (bf16
// math accumulates in f32) and equals the unfused composition of
// qk/autograd/functions.h, forward and backward.
#pragma once

#include <cstdint>

#include "qk/autograd/autograd.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/tensor.h"

namespace qk {

// ---- attention (src/autograd/functions_attention.cc) ----
//
//   // q [B, T, Hq, D]; k, v [B, S, Hkv, D]; e.g. column slices of one fused
//   // QKV projection: qkv [B, T, (Hq + 2 Hkv) * D]
//   Tensor q = qkv.narrow(2, 0, Hq * D).view({B, T, Hq, D});   // strided views are fine
//   Tensor out = flash_attention(q, k, v, {.dropout_p = 0.1, .training = true});
//   Tensor y = out.view({B, T, Hq * D});                      // free: out is contiguous
//
// Memory-efficient exact attention (the flash-attention algorithm): tiled with
// an online softmax, never storing a T x S matrix; the forward saves only out
// and the per-row logsumexp, the backward recomputes the tiles. Grouped-query
// attention: Hq % Hkv == 0, query head h uses kv head h / (Hq / Hkv), K/V are
// never repeated in memory. v may have another head dim than q and k
// (v [B, S, Hkv, Dv]: multi-latent attention), the output then has Dv.
// Softmax always in f32; bf16 in gives bf16 out.
// Under autocast, q/k/v are cast to the low-precision dtype like the other
// matmul-bound ops (the softmax inside stays f32).
struct AttentionOptions {
  bool causal = true;          // bottom-right aligned: query i (of T) sees keys j <= i + (S - T)
                               // (so T=1 decode against an S-long KV cache sees all S keys;
                               // a query that sees no key, possible when T > S, outputs zeros)
  double scale = 0;            // 0: 1/sqrt(D)
  double dropout_p = 0;        // attention dropout (only when training)
  bool training = false;
  Generator* generator = nullptr;  // nullptr: default_generator(); dropout mask must be
                                   // reproducible in backward (counter-based, no T x S mask stored)
};

// q may also be given grouped, [B, T, Hkv, G, D] with Hq = Hkv * G: the view
// of Megatron's fused QKV output [B, T, Hkv, (G + 2) * D] (per kv group: its
// G query heads, then k, then v), which has no [B, T, Hq, D] form without a copy:
//   Tensor g = qkv.view({B, T, Hkv, G + 2, D});
//   Tensor out = flash_attention(g.narrow(3, 0, G), g.select(3, G), g.select(3, G + 1));
// Returns out [B, T, Hq, Dv], contiguous, in q's dtype (f32, bf16 or f16).
// With dropout the generator advances by B * Hq * T * ceil(S / 4) Philox
// counters; the mask follows ops::FlashAttentionParams (qk/tensor/ops/attention.h).
Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionOptions& o = {});

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
// f16 inputs run in f32 (the gradients come back in f16).
// Megatron's loss = sum(loss * loss_mask) / sum(loss_mask) is
// linear_cross_entropy(h, w, t, loss_mask / sum(loss_mask)).
Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& target,
                            const Tensor& token_weight = Tensor(), int64_t ignore_index = -100);

// ---- end of rotary embedding, SwiGLU, output layer + cross entropy ----

}  // namespace qk
