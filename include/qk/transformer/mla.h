// Multi-latent attention (DeepSeek-V2/V3), as Megatron-core's MLASelfAttention
// (megatron/core/transformer/multi_latent_attention.py) with the local spec,
// and its tensor-parallel form. GPTModel builds it for every layer when
// config.multi_latent_attention is set:
//
//   TransformerConfig c = ...;                  // hidden_size, num_attention_heads, ...
//   c.multi_latent_attention = true;            // --multi-latent-attention
//   c.q_lora_rank = 48;  c.kv_lora_rank = 32;   // --q-lora-rank, --kv-lora-rank
//   c.qk_head_dim = 16;  c.qk_pos_emb_head_dim = 8;  c.v_head_dim = 16;
//   c.rotary_scaling_factor = 40;  c.mscale_all_dim = 0.707;   // YaRN (optional)
//   GPTModel model(c);                          // decoder.layers.{i}.self_attention is MLA
//   KVCache cache = model->make_kv_cache(1, 256);   // caches the latent, not keys/values
//
// With H heads, C hidden, rq/rkv the ranks, dn = qk_head_dim, dr =
// qk_pos_emb_head_dim, dv = v_head_dim (Megatron-core's parameter names):
//   q  = linear_q_proj(x)                                   [H*(dn+dr), C]   (q_lora_rank 0)
//      = linear_q_up_proj(q_layernorm(linear_q_down_proj(x)))   [rq, C], [H*(dn+dr), rq]
//   [c_kv, k_pe] = linear_kv_down_proj(x)                   [rkv + dr, C]
//   [k_nope, v]  = linear_kv_up_proj(kv_layernorm(c_kv))    [H*(dn+dv), rkv]
//   query_h = [q_nope_h, rope(q_pe_h)],  key_h = [k_nope_h, rope(k_pe)]  (one k_pe shared by the heads)
//   out = linear_proj(softmax(query.key^T * scale) v)       [C, H*dv]
// rows of the up projections head-major ([H, dn+dr] and [H, dn+dv]); the
// norms only with qk_layernorm (Megatron's local spec has IdentityOp
// otherwise), q_layernorm only with q_lora_rank; RoPE non-interleaved
// (rotate_half) on the dr dims, with YaRN's frequencies and cos/sin scaled by
// YaRN's concentration factor; scale = mscale^2 / sqrt(dn + dr) with
// mscale = yarn_get_mscale(rotary_scaling_factor, mscale_all_dim). Core
// attention (flash or unfused) takes q/k heads of dn + dr and values of dv.
//
// Generation: the cache holds per position the normalised latent c_kv and the
// rotated k_pe (kv_lora_rank + qk_pos_emb_head_dim values, KVCache::latent).
// Each step attends in latent space (weight absorption): the query's q_nope
// goes through the key half of linear_kv_up_proj, the keys are the cached
// latents (one shared head), the context comes out through the value half.
#pragma once

#include <memory>

#include "qk/dist/process_group.h"
#include "qk/parallel/layers.h"
#include "qk/transformer/layers.h"

namespace qk::transformer {

// ---- YaRN (megatron/core/models/common/embeddings/yarn_rotary_pos_embedding.py) ----

// Megatron's _yarn_get_mscale: 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1.
double yarn_get_mscale(double scale, double mscale);
// The attention scale MLA applies: yarn_get_mscale(rotary_scaling_factor,
// mscale_all_dim)^2 / sqrt(qk_head_dim + qk_pos_emb_head_dim).
double mla_softmax_scale(const TransformerConfig& config);
// YaRN's RoPE tables for positions offset .. offset+length-1 over
// qk_pos_emb_head_dim dims: inv_freq blends base^(-2i/d) (extrapolated, the
// fast dims) and the same / rotary_scaling_factor (interpolated, the slow
// dims) by a linear ramp between the correction dims of beta_fast and
// beta_slow at original_max_position_embeddings; cos and sin [length, dr] f32
// in cat(freqs, freqs) layout, multiplied by the concentration factor
// yarn_get_mscale(s, mscale) / yarn_get_mscale(s, mscale_all_dim).
// rotary_scaling_factor 1 gives plain RoPE.
RotaryTables mla_rotary_tables(const TransformerConfig& config, int64_t offset, int64_t length);

// ---- the attention modules ----

// MLA with the local spec. layer_number counts from 1.
class MultiLatentAttentionImpl : public SelfAttentionBase {
 public:
  MultiLatentAttentionImpl(const TransformerConfig& config, int64_t layer_number);
  // hidden [B, T, C] -> [B, T, C]. ctx.rotary: mla_rotary_tables for this
  // call's positions (undefined: made here from position ctx.cache->length(),
  // or 0). ctx.cache: a KVCache::latent (generation).
  Tensor forward(const Tensor& hidden, const AttentionContext& ctx) override;

  nn::Linear linear_proj{nullptr};
  nn::Linear linear_q_proj{nullptr};                             // q_lora_rank 0
  nn::Linear linear_q_down_proj{nullptr}, linear_q_up_proj{nullptr};  // q_lora_rank > 0
  nn::Linear linear_kv_down_proj{nullptr}, linear_kv_up_proj{nullptr};
  Norm q_layernorm{nullptr}, kv_layernorm{nullptr};  // qk_layernorm

 private:
  TransformerConfig config_;
};
QK_MODULE(MultiLatentAttention);

// MLA over a tensor-parallel group: each rank holds H/tp whole heads.
// linear_q_proj / linear_q_up_proj and linear_kv_up_proj are column-parallel
// (this rank's heads' rows), linear_proj row-parallel; the down projections
// and the latent norms are replicated (Megatron's "duplicated" down
// projections). Under sequence parallelism the down projections and norms
// run on this rank's sequence shard, the up projections all-gather the
// latents and the shared k_pe is all-gathered (its gradient reduce-scattered);
// without it k_pe's gradient is all-reduced (every rank's heads read it).
// Parameter names, and with the same seed the full weights, are the local module's.
class ParallelMultiLatentAttentionImpl : public SelfAttentionBase, public parallel::TensorParallelModule {
 public:
  ParallelMultiLatentAttentionImpl(const TransformerConfig& config, int64_t layer_number,
                                   std::shared_ptr<dist::ProcessGroup> tp);
  // hidden [B, T, C], or [B, T/tp, C] under sequence parallelism (the output too).
  Tensor forward(const Tensor& hidden, const AttentionContext& ctx) override;
  std::vector<std::pair<std::string, parallel::ShardSpec>> shard_specs() const override { return {}; }
  // Under sequence parallelism the replicated down projections and latent
  // norms see only this rank's tokens: their gradients are partial.
  std::vector<std::string> partial_gradient_parameters() const override;

  parallel::RowParallelLinear linear_proj{nullptr};
  parallel::ColumnParallelLinear linear_q_proj{nullptr}, linear_q_up_proj{nullptr};
  nn::Linear linear_q_down_proj{nullptr};
  nn::Linear linear_kv_down_proj{nullptr};
  parallel::ColumnParallelLinear linear_kv_up_proj{nullptr};
  Norm q_layernorm{nullptr}, kv_layernorm{nullptr};

 private:
  TransformerConfig config_;
  int64_t local_heads_;
  std::shared_ptr<dist::ProcessGroup> tp_;
};
QK_MODULE(ParallelMultiLatentAttention);

// Layer-spec factories: MLA for self_attention, the spec's other parts as
// given (gpt_layer_local_spec's / gpt_layer_tensor_parallel_spec's).
//   GPTModel model(config, gpt_layer_mla_local_spec());
TransformerLayerSpec gpt_layer_mla_local_spec(TransformerLayerSpec base = gpt_layer_local_spec());
TransformerLayerSpec gpt_layer_mla_tensor_parallel_spec(std::shared_ptr<dist::ProcessGroup> tp,
                                                        TransformerLayerSpec base);

}  // namespace qk::transformer
