// Fused, differentiable ops for transformer language models (issue 15).
// Each has a forward and a backward kernel, takes f32 or bf16 inputs (bf16
// math accumulates in f32) and is tested against the unfused composition.
#pragma once

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
// never repeated in memory. Softmax always in f32; bf16 in gives bf16 out.
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
// Returns out [B, T, Hq, D], contiguous, in q's dtype (f32, bf16 or f16).
// With dropout the generator advances by B * Hq * T * ceil(S / 4) Philox
// counters; the mask follows ops::FlashAttentionParams (qk/tensor/ops/attention.h).
Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionOptions& o = {});

}  // namespace qk
