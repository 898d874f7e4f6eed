// Multi-latent attention between its projections, shared by the local
// MultiLatentAttention and the tensor-parallel one (which runs it on its own
// heads): decoupled RoPE, the up projection of the kv latent, core attention,
// and in generation the latent KV cache with absorbed up projections.
#pragma once

#include <functional>

#include "qk/transformer/mla.h"

namespace qk::transformer {

// q: the query projection's output [B, T, heads * (dn + dr)] (heads: all of
// config's, or this rank's share). c_kv: the normalised kv latent
// [B, T', kv_lora_rank] (T' = T, or this rank's sequence shard: kv_up
// gathers it). k_pe: the shared RoPE key before rotation [B, T, dr].
// kv_up: linear_kv_up_proj ([B, T', rkv] -> [B, T, heads * (dn + dv)]);
// kv_up_weight its (this rank's) weight, which generation absorbs.
// Returns the context [B, T, heads * dv] for linear_proj.
Tensor mla_between_projections(const TransformerConfig& config, int64_t heads, const Tensor& q, const Tensor& c_kv,
                               const Tensor& k_pe, const std::function<Tensor(const Tensor&)>& kv_up,
                               const Tensor& kv_up_weight, const AttentionContext& ctx, bool training);

}  // namespace qk::transformer
