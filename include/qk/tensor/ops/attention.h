// Raw (non-differentiable) memory-efficient attention: the flash-attention
// algorithm (tiled, online softmax, the T x S score matrix never stored; the
// backward recomputes the tiles from the saved row logsumexp).
//
//   ops::FlashAttentionParams p;                  // causal, scale 1/sqrt(D)
//   auto [out, lse] = ops::flash_attention(q, k, v, p);
//   auto [dq, dk, dv] = ops::flash_attention_backward(dout, q, k, v, out, lse, p);
//
// q [B, T, Hq, D], k [B, S, Hkv, D] and v [B, S, Hkv, Dv], Hq % Hkv == 0
// (query head h reads kv head h / (Hq / Hkv)); the value head dim Dv may
// differ from D (multi-latent attention); any strides with the last dim contiguous (others
// are copied first). q may also come grouped as [B, T, Hkv, G, D] (Hq = Hkv G,
// query head hk * G + g), the view of Megatron's fused QKV projection output
// [B, T, Hkv, (G + 2) D] that has no [B, T, Hq, D] form without a copy. f32,
// bf16 or f16; reduced floats accumulate in f32 and the softmax is always
// f32. The differentiable form is qk::flash_attention (qk/autograd/llm_ops.h).
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "qk/tensor/dispatch.h"
#include "qk/tensor/tensor.h"

namespace qk::ops {

struct FlashAttentionParams {
  // Bottom-right aligned: query t (of T) sees keys s <= t + (S - T). A query
  // that sees no key (T > S) gets a zero output and zero gradients.
  bool causal = true;
  double scale = 0;      // 0: 1/sqrt(D)
  double dropout_p = 0;  // on the softmax probabilities; 0 disables
  // Dropout stream: element (b, h, t, s) of the [B, Hq, T, S] probabilities
  // is kept iff word s % 4 of philox4x32(seed, offset + (((b * Hq + h) * T + t)
  // * ceil(S / 4) + s / 4)), shifted right by 8, is below (1 - p) * 2^24; kept
  // elements are scaled by 1 / (1 - p). B * Hq * T * ceil(S / 4) counters.
  uint64_t seed = 0;
  uint64_t offset = 0;
  // Undefined, or an i64 [1] on the inputs' device whose value (read when
  // the kernel runs) is added to offset: a recorded graph's counters
  // (graph_rng_counter, qk/tensor/generator.h).
  Tensor offset_base;
};

// Hq of a [B, T, Hq, D] or [B, T, Hkv, G, D] query.
int64_t attention_query_heads(const Tensor& q);
// The number of Philox counters one call with these shapes uses.
uint64_t flash_attention_counters(int64_t B, int64_t Hq, int64_t T, int64_t S);

struct FlashAttentionResult {
  Tensor out;  // [B, T, Hq, Dv] contiguous, q's dtype
  Tensor lse;  // [B, Hq, T] f32: log sum_s exp(scale * q.k_s) over visible keys (-inf: none)
};

FlashAttentionResult flash_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const FlashAttentionParams& p);
// dout and out [B, T, Hq, Dv]. Returns (dq, dk, dv), contiguous, in the
// inputs' shapes (q's grouped form too) and dtype.
std::tuple<Tensor, Tensor, Tensor> flash_attention_backward(const Tensor& dout, const Tensor& q,
                                                            const Tensor& k, const Tensor& v,
                                                            const Tensor& out, const Tensor& lse,
                                                            const FlashAttentionParams& p);

// Kernel tables (see qk/tensor/dispatch.h). The front validates shapes and
// dtypes, resolves scale == 0, and hands over tensors whose last dim is
// contiguous; a backend kernel may assume all of that.
using FlashAttentionFwdFn = FlashAttentionResult(const Tensor& q, const Tensor& k,
                                                 const Tensor& v, const FlashAttentionParams& p);
using FlashAttentionBwdFn = std::tuple<Tensor, Tensor, Tensor>(
    const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
    const Tensor& lse, const FlashAttentionParams& p);
QK_DECLARE_KERNEL(flash_attention_fwd_kernel, FlashAttentionFwdFn);
QK_DECLARE_KERNEL(flash_attention_bwd_kernel, FlashAttentionBwdFn);

// The CPU kernel's SIMD variants this machine can run, fastest first (of
// "avx512bf16", "avx512", "avx2", "generic"). Benchmarks and tests pick one
// with set_flash_attention_cpu_variant (as QK_FLASH_ATTENTION_ISA does);
// "" restores the automatic choice. Any other name is a ValueError.
std::vector<std::string> flash_attention_cpu_variants();
void set_flash_attention_cpu_variant(const std::string& name);

}  // namespace qk::ops
