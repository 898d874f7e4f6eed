// MultiLatentAttention (Megatron-core's MLASelfAttention, local spec) and the
// attention between its projections, shared with the tensor-parallel module.
#include "qk/transformer/mla.h"

#include "megatron_init.h"
#include "mla_core.h"
#include "qk/autograd/checkpoint.h"
#include "qk/autograd/functions.h"
#include "qk/nn/init.h"

namespace qk::transformer {

namespace {

CoreAttentionOptions core_options(const TransformerConfig& c, const AttentionContext& ctx, bool training) {
  CoreAttentionOptions o;
  o.causal = true;
  o.scale = mla_softmax_scale(c);
  o.dropout_p = c.attention_dropout;
  o.training = training;
  o.softmax_in_fp32 = c.attention_softmax_in_fp32;
  o.use_flash = c.use_flash_attn;
  o.generator = ctx.attention_dropout_generator;
  return o;
}

// [B, T, H, a] x per-head [H, a, b] -> [B, T, H, b]: one batched GEMM over the heads.
Tensor per_head_matmul(const Tensor& x, const Tensor& w) {
  const int64_t b = x.size(0), t = x.size(1), h = x.size(2), a = x.size(3);
  const Tensor y = matmul(x.permute({2, 0, 1, 3}).reshape({h, b * t, a}), w);  // [H, B*T, b]
  return y.reshape({h, b, t, w.size(2)}).permute({1, 2, 0, 3});
}

// Generation against a KVCache::latent: the new positions' latents
// [c_kv, rope(k_pe)] join the cache and the heads attend to the cached
// latents directly. With W_uk, W_uv the key and value halves of
// linear_kv_up_proj per head, q_nope . (W_uk c) = (W_uk^T q_nope) . c and
// softmax(..) (W_uv c) = W_uv (softmax(..) c): queries [W_uk^T q_nope, q_pe]
// of rkv + dr dims against one shared head of latents, values the latents'
// first rkv dims, the context out through W_uv.
Tensor absorbed_attention(const TransformerConfig& c, int64_t heads, const Tensor& q_nope, const Tensor& q_pe,
                          const Tensor& c_kv, const Tensor& k_pe, const Tensor& kv_up_weight,
                          const AttentionContext& ctx) {
  const int64_t b = q_nope.size(0), t = q_nope.size(1);
  const int64_t dn = c.qk_head_dim, dr = c.qk_pos_emb_head_dim, dv = c.v_head_dim, r = c.kv_lora_rank;
  QK_CHECK(c_kv.size(1) == t, "MultiLatentAttention: generation runs without sequence parallelism");
  const Tensor fresh = cat({c_kv.to(q_pe.dtype()), k_pe.reshape({b, t, dr})}, 2);  // [B, T, rkv + dr]
  const Tensor latents = ctx.cache->append_latent(ctx.layer, fresh).to(q_pe.dtype());  // [B, S, rkv + dr]
  const Tensor w = kv_up_weight.reshape({heads, dn + dv, r}).to(q_pe.dtype());
  const Tensor w_uk = w.narrow(1, 0, dn), w_uv = w.narrow(1, dn, dv);  // [H, dn, rkv], [H, dv, rkv]
  const Tensor query = cat({per_head_matmul(q_nope.to(q_pe.dtype()), w_uk), q_pe}, 3);  // [B, T, H, rkv + dr]
  const Tensor context = core_attention(query, latents.unsqueeze(2), latents.narrow(2, 0, r).unsqueeze(2),
                                        core_options(c, ctx, false));  // [B, T, H, rkv]
  return per_head_matmul(context, w_uv.transpose(1, 2)).reshape({b, t, heads * dv});
}

}  // namespace

Tensor mla_between_projections(const TransformerConfig& c, int64_t heads, const Tensor& q, const Tensor& c_kv,
                               const Tensor& k_pe, const std::function<Tensor(const Tensor&)>& kv_up,
                               const Tensor& kv_up_weight, const AttentionContext& ctx, bool training) {
  const int64_t b = q.size(0), t = q.size(1);
  const int64_t dn = c.qk_head_dim, dr = c.qk_pos_emb_head_dim, dv = c.v_head_dim;
  QK_CHECK(q.size(2) == heads * (dn + dr) && k_pe.dim() == 3 && k_pe.size(1) == t && k_pe.size(2) == dr,
           "MultiLatentAttention: expected q [B, T, ", heads * (dn + dr), "] and k_pe [B, T, ", dr, "], got ",
           shape_str(q.shape()), " and ", shape_str(k_pe.shape()));
  const RotaryTables rope =
      ctx.rotary.cos.defined() ? ctx.rotary : mla_rotary_tables(c, ctx.cache ? ctx.cache->length() : 0, t);
  const Tensor q_heads = q.reshape({b, t, heads, dn + dr});
  const Tensor q_nope = q_heads.narrow(3, 0, dn);
  const Tensor q_pe = apply_rotary_embedding(q_heads.narrow(3, dn, dr), rope.cos, rope.sin);  // [B, T, H, dr]
  const Tensor k_rot = apply_rotary_embedding(k_pe.unsqueeze(2), rope.cos, rope.sin);         // [B, T, 1, dr]
  if (ctx.cache != nullptr) return absorbed_attention(c, heads, q_nope, q_pe, c_kv, k_rot, kv_up_weight, ctx);

  const Tensor kv = kv_up(c_kv).reshape({b, t, heads, dn + dv});
  const Tensor value = kv.narrow(3, dn, dv);
  // Under autocast the latent norm returns f32 while the GEMMs give bf16:
  // attention runs in the projections' dtype (no-op casts otherwise).
  const Tensor query = cat({q_nope, q_pe}, 3).to(value.dtype());
  const Tensor key = cat({kv.narrow(3, 0, dn), k_rot.expand({b, t, heads, dr})}, 3).to(value.dtype());
  const CoreAttentionOptions o = core_options(c, ctx, training);
  // Selective recompute as SelfAttention's: keep q, k, v, re-run the core in backward.
  const bool recompute = c.recompute_granularity == RecomputeGranularity::selective && training && !c.use_flash_attn;
  auto core = [o](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{core_attention(in[0], in[1], in[2], o)};
  };
  const Tensor context =  // [B, T, H, dv]
      recompute ? autograd::checkpoint(core, {query, key, value}, {.generators = {o.generator}})[0]
                : core({query, key, value})[0];
  return context.reshape({b, t, heads * dv});
}

// ---- MultiLatentAttention ----

MultiLatentAttentionImpl::MultiLatentAttentionImpl(const TransformerConfig& c, int64_t /*layer_number*/)
    : config_(c) {
  QK_CHECK(c.multi_latent_attention, "MultiLatentAttention: the config must set multi_latent_attention "
           "(--multi-latent-attention)");
  const int64_t h = c.num_attention_heads, q_head = c.qk_head_dim + c.qk_pos_emb_head_dim;
  // Registration (and so initialisation) order as Megatron-core's: linear_proj
  // (MultiLatentAttention), then the q, kv projections and norms (MLASelfAttention).
  linear_proj =
      register_module("linear_proj", make_linear(h * c.v_head_dim, c.hidden_size, c.add_bias_linear, true, c));
  if (c.q_lora_rank == 0) {
    linear_q_proj = register_module("linear_q_proj", make_linear(c.hidden_size, h * q_head, false, false, c));
  } else {
    linear_q_down_proj =
        register_module("linear_q_down_proj", make_linear(c.hidden_size, c.q_lora_rank, false, false, c));
    linear_q_up_proj = register_module("linear_q_up_proj", make_linear(c.q_lora_rank, h * q_head, false, false, c));
  }
  linear_kv_down_proj = register_module(
      "linear_kv_down_proj", make_linear(c.hidden_size, c.kv_lora_rank + c.qk_pos_emb_head_dim, false, false, c));
  linear_kv_up_proj = register_module(
      "linear_kv_up_proj", make_linear(c.kv_lora_rank, h * (c.qk_head_dim + c.v_head_dim), false, false, c));
  if (c.qk_layernorm) {
    if (c.q_lora_rank > 0) q_layernorm = register_module("q_layernorm", Norm(c, c.q_lora_rank));
    kv_layernorm = register_module("kv_layernorm", Norm(c, c.kv_lora_rank));
  }
}

Tensor MultiLatentAttentionImpl::forward(const Tensor& hidden, const AttentionContext& ctx) {
  const TransformerConfig& c = config_;
  QK_CHECK(hidden.dim() == 3 && hidden.size(2) == c.hidden_size, "MultiLatentAttention: expected hidden [B, T, ",
           c.hidden_size, "], got ", shape_str(hidden.shape()));
  Tensor q;
  if (linear_q_proj) {
    q = linear_q_proj(hidden);
  } else {
    Tensor q_latent = linear_q_down_proj(hidden);
    if (q_layernorm) q_latent = q_layernorm(q_latent);
    q = linear_q_up_proj(q_latent);
  }
  const Tensor kv = linear_kv_down_proj(hidden);  // [B, T, rkv + dr]: the latent, then the shared RoPE key
  Tensor c_kv = kv.narrow(2, 0, c.kv_lora_rank);
  if (kv_layernorm) c_kv = kv_layernorm(c_kv);
  const Tensor context = mla_between_projections(
      c, c.num_attention_heads, q, c_kv, kv.narrow(2, c.kv_lora_rank, c.qk_pos_emb_head_dim),
      [this](const Tensor& x) { return linear_kv_up_proj(x); }, linear_kv_up_proj->weight, ctx, is_training());
  return linear_proj(context);
}

TransformerLayerSpec gpt_layer_mla_local_spec(TransformerLayerSpec base) {
  base.self_attention = [](const TransformerConfig& c, int64_t layer_number) -> std::shared_ptr<SelfAttentionBase> {
    return std::make_shared<MultiLatentAttentionImpl>(c, layer_number);
  };
  return base;
}

}  // namespace qk::transformer
