// The transformer's compute steps as small differentiable functions: the
// unfused reference compositions of existing ops (qk/autograd/functions.h),
// and the seams the model calls, where the fused ops of
// qk/autograd/llm_ops.h (flash_attention, rotary_embedding, swiglu,
// linear_cross_entropy) plug in with one line each.
//
//   using namespace qk::transformer;
//   RotaryTables rope = rotary_tables(config, /*offset=*/0, /*length=*/T);   // cos, sin [T, R]
//   Tensor q2 = apply_rotary_embedding(q, rope.cos, rope.sin);               // q [B, T, H, D]
//   Tensor out = core_attention(q2, k2, v, {.scale = 0.125});                // [B, T, H, D]
//   Tensor loss = output_loss(hidden, weight, labels, loss_mask);            // masked mean
//
// Shapes: B batch, T query length, S key length, Hq/Hkv query/kv heads,
// D head dim, R rotary dims, C hidden, V vocabulary, N tokens.
#pragma once

#include <optional>

#include "qk/tensor/generator.h"
#include "qk/tensor/tensor.h"
#include "qk/transformer/config.h"

namespace qk::transformer {

// As qk::AttentionOptions (LLM_API.md), plus which path to take.
struct CoreAttentionOptions {
  // Bottom-right aligned: query i (of T) sees keys j <= i + (S - T), so a
  // T-token step against an S-long KV cache sees every cached key.
  bool causal = true;
  double scale = 0;  // 0: 1/sqrt(D)
  double dropout_p = 0;
  bool training = false;
  Generator* generator = nullptr;  // nullptr: default_generator()
  // Unfused path: scores, mask and softmax in f32 even for bf16/f16 inputs.
  bool softmax_in_fp32 = true;
  // flash_attention (--use-flash-attn) instead of the unfused path.
  bool use_flash = false;
};

// q [B, T, Hq, D], k [B, S, Hkv, D], v [B, S, Hkv, Dv] (strided views with a
// contiguous last dim are fine; Dv may differ from D, as in multi-latent
// attention), Hq % Hkv == 0 (query head h reads kv head h / (Hq / Hkv)).
// Returns [B, T, Hq, Dv] contiguous. Dispatches on o.use_flash.
Tensor core_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const CoreAttentionOptions& o = {});
// The reference: softmax(scale * Q.K^T + causal mask) . V with the [T x S]
// probabilities materialised (Megatron's unfused DotProductAttention). Each
// kv head's query heads are stacked along the rows, so grouped-query
// attention needs no repeated K/V.
Tensor unfused_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                         const CoreAttentionOptions& o = {});

// Megatron's RotaryEmbedding tables for positions offset .. offset+length-1:
// inv_freq[i] = 1 / base^(2i / R), angle = (position / interpolation) x
// inv_freq, laid out cat(freqs, freqs); cos and sin are [length, R] f32.
struct RotaryTables {
  Tensor cos, sin;
  // Built on the host; moved to the activations' device before use.
  RotaryTables to(Device d) const {
    return {cos.defined() ? cos.to(d) : cos, sin.defined() ? sin.to(d) : sin};
  }
};
RotaryTables rotary_tables(int64_t rotary_dim, double rotary_base, int64_t offset, int64_t length,
                           std::optional<double> seq_len_interpolation_factor = std::nullopt);
RotaryTables rotary_tables(const TransformerConfig& config, int64_t offset, int64_t length);

// RoPE on the first R dims of x [B, T, H, D] (non-interleaved, "rotate_half"),
// dims R..D unchanged; cos, sin [T, R]. Returns x's dtype.
Tensor apply_rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin);
// The reference: x * cos + rotate_half(x) * sin with cos/sin cast to x's
// dtype first, as Megatron's apply_rotary_pos_emb.
Tensor unfused_rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin);

// The MLP non-linearity on linear_fc1's output: act(x), or with
// gated_linear_unit act(x[..., :F]) * x[..., F:] (SwiGLU for silu).
Tensor mlp_activation(const Tensor& x, Activation activation, bool gated_linear_unit);
// The reference composition (chunk, activation, multiply) the fused swiglu is checked against.
Tensor unfused_mlp_activation(const Tensor& x, Activation activation, bool gated_linear_unit);

// The language-model loss from the final hidden states: hidden [N, C],
// weight [V, C] (output layer or tied embedding), labels [N] i64, loss_mask
// [N] (any floating dtype; undefined: all ones). Returns Megatron's
// sum(loss * loss_mask) / sum(loss_mask) as an f32 scalar, the cross entropy
// taken over f32 logits.
// Runs the chunked linear_cross_entropy (the [N, V] logits never held whole).
Tensor output_loss(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                   const Tensor& loss_mask = Tensor());
// The reference: the whole f32 logits, then cross entropy.
Tensor unfused_output_loss(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                           const Tensor& loss_mask = Tensor());

}  // namespace qk::transformer
