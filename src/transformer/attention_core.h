// Self-attention between its two projections, shared by the local
// SelfAttention and the tensor-parallel one (which runs it on its own query
// groups): split linear_qkv's fused output, q/k norms, RoPE, the KV cache,
// core attention.
#pragma once

#include "qk/transformer/layers.h"

namespace qk::transformer {

// qkv_out: linear_qkv's output [B, T, groups * (Hq/G + 2) * D] in Megatron's
// grouped layout for `groups` query groups (all of config's, or this rank's
// share). Returns the context [B, T, groups * (Hq/G) * D] for linear_proj.
Tensor attention_between_projections(const Tensor& qkv_out, int64_t groups, const TransformerConfig& config,
                                     const Norm& q_layernorm, const Norm& k_layernorm, const AttentionContext& ctx,
                                     bool training);

}  // namespace qk::transformer
