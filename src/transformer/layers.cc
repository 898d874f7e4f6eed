// Norm, SelfAttention, Mlp and TransformerLayer (Megatron-core's local spec).
#include "qk/transformer/layers.h"

#include <cmath>

#include "attention_core.h"
#include "megatron_init.h"
#include "qk/autograd/checkpoint.h"
#include "qk/autograd/functions.h"
#include "qk/nn/init.h"
#include "qk/tensor/ops/index.h"
#include "qk/tensor/ops/view.h"

namespace qk::transformer {

namespace {

// Splits linear_qkv's output [B, T, G * (hpg + 2) * D] into query
// [B, T, G, hpg, D], key and value [B, T, G, D]: strided views, no copies.
// One backward concatenates the three gradients into the fused layout, where
// three slice backwards would each zero-fill and add a full-size buffer.
std::vector<Tensor> split_qkv(const Tensor& qkv, int64_t groups, int64_t heads_per_group, int64_t head_dim) {
  const int64_t b = qkv.size(0), t = qkv.size(1);
  const Tensor fused = ops::reshape(qkv, {b, t, groups, heads_per_group + 2, head_dim});
  std::vector<Tensor> pieces{ops::narrow(fused, 3, 0, heads_per_group), ops::select(fused, 3, heads_per_group),
                             ops::select(fused, 3, heads_per_group + 1)};
  if (autograd::needs_grad({qkv})) {
    const Shape shape = qkv.shape();
    autograd::record("SplitQkvBackward", {qkv}, pieces, [shape](const std::vector<Tensor>& g) {
      const Tensor k = ops::unsqueeze(g[1], 3), v = ops::unsqueeze(g[2], 3);
      return std::vector<Tensor>{ops::reshape(ops::cat({g[0], k, v}, 3), shape)};
    });
  }
  return pieces;
}

// Megatron's bias-dropout-add (the bias is already in x): residual + dropout(x),
// in the residual's dtype (under autocast x may come back in bf16).
Tensor dropout_add(const Tensor& x, const Tensor& residual, double p, bool training, Generator* gen) {
  return residual + dropout(x.to(residual.dtype()), p, training, gen ? *gen : default_generator());
}

}  // namespace

nn::Linear make_linear(int64_t in, int64_t out, bool bias, bool scaled, const TransformerConfig& c) {
  nn::Linear l(nn::LinearOptions(in, out).bias(bias));
  if (scaled)
    init_scaled_normal(l->weight, c);
  else
    init_normal(l->weight, c);
  if (bias) nn::init::zeros_(l->bias);
  return l;
}

void init_normal(const Tensor& weight, const TransformerConfig& c) {
  nn::init::normal_(weight, 0.0, c.init_method_std);
}

void init_scaled_normal(const Tensor& weight, const TransformerConfig& c) {
  nn::init::normal_(weight, 0.0, c.init_method_std / std::sqrt(2.0 * static_cast<double>(c.num_layers)));
}

// ---- Norm ----

NormImpl::NormImpl(const TransformerConfig& c, int64_t dim)
    : kind_(c.normalization), dim_(dim), eps_(c.layernorm_epsilon),
      zero_centered_gamma_(c.layernorm_zero_centered_gamma) {
  weight = register_parameter("weight", full({dim}, zero_centered_gamma_ ? 0.0 : 1.0));
  if (kind_ == Normalization::LayerNorm) bias = register_parameter("bias", zeros({dim}));
}

Tensor NormImpl::forward(const Tensor& x) {
  QK_CHECK(x.dim() >= 1 && x.size(-1) == dim_, to_string(kind_), ": expected input [..., ", dim_,
           "], got ", shape_str(x.shape()));
  const Tensor w = zero_centered_gamma_ ? weight + 1.0 : weight;
  if (kind_ == Normalization::RMSNorm) return rms_norm(x, {dim_}, w, eps_);
  return layer_norm(x, {dim_}, w, bias, eps_);
}

void NormImpl::pretty_print(std::ostream& os) const {
  os << to_string(kind_) << "(" << dim_ << ", eps=" << eps_ << (zero_centered_gamma_ ? ", zero_centered_gamma" : "")
     << ")";
}

// ---- SelfAttention ----

SelfAttentionImpl::SelfAttentionImpl(const TransformerConfig& c, int64_t layer_number)
    : config_(c), layer_number_(layer_number) {
  // Registration order as Megatron-core's (Attention registers linear_proj,
  // then SelfAttention linear_qkv and the q/k norms), so state dicts list alike.
  linear_proj = register_module(
      "linear_proj", make_linear(c.query_projection_size(), c.hidden_size, c.add_bias_linear, true, c));
  linear_qkv = register_module("linear_qkv", make_linear(c.hidden_size, c.qkv_projection_size(),
                                                         c.add_bias_linear || c.add_qkv_bias, false, c));
  if (c.qk_layernorm) {
    q_layernorm = register_module("q_layernorm", Norm(c, c.kv_channels));
    k_layernorm = register_module("k_layernorm", Norm(c, c.kv_channels));
  }
}

Tensor SelfAttentionImpl::forward(const Tensor& hidden, const AttentionContext& ctx) {
  QK_CHECK(hidden.dim() == 3 && hidden.size(2) == config_.hidden_size, "SelfAttention: expected hidden [B, T, ",
           config_.hidden_size, "], got ", shape_str(hidden.shape()));
  const Tensor context = attention_between_projections(linear_qkv(hidden), config_.num_query_groups, config_,
                                                       q_layernorm, k_layernorm, ctx, is_training());
  return linear_proj(context);
}

Tensor attention_between_projections(const Tensor& qkv_out, int64_t groups, const TransformerConfig& c,
                                     const Norm& q_layernorm, const Norm& k_layernorm, const AttentionContext& ctx,
                                     bool training) {
  const int64_t b = qkv_out.size(0), t = qkv_out.size(1);
  const int64_t hpg = c.heads_per_group(), d = c.kv_channels;
  const std::vector<Tensor> qkv = split_qkv(qkv_out, groups, hpg, d);
  Tensor query = qkv[0], key = qkv[1], value = qkv[2];  // [B, T, G, hpg, D], [B, T, G, D] x 2
  if (q_layernorm) query = q_layernorm(query);  // over D; the output is contiguous
  if (k_layernorm) key = k_layernorm(key);
  // [B, T, G, hpg, D] -> [B, T, Hq, D]: a view for plain MHA (hpg == 1) or after
  // the q norm; otherwise the one copy grouped-query attention needs.
  query = query.reshape({b, t, groups * hpg, d});
  if (ctx.rotary.cos.defined()) {
    query = apply_rotary_embedding(query, ctx.rotary.cos, ctx.rotary.sin);
    key = apply_rotary_embedding(key, ctx.rotary.cos, ctx.rotary.sin);
  }
  // Under autocast the q/k norms return f32 while value is the GEMM's bf16:
  // attention runs in the projection's dtype (no-op casts otherwise).
  query = query.to(value.dtype());
  key = key.to(value.dtype());
  if (ctx.cache != nullptr) {
    std::tie(key, value) = ctx.cache->append(ctx.layer, key, value);
    key = key.to(query.dtype());
    value = value.to(query.dtype());
  }

  CoreAttentionOptions o;
  o.causal = true;
  o.scale = c.softmax_scale.value_or(0.0);
  o.dropout_p = c.attention_dropout;
  o.training = training;
  o.softmax_in_fp32 = c.attention_softmax_in_fp32;
  o.use_flash = c.use_flash_attn;
  o.generator = ctx.attention_dropout_generator;
  // Megatron's selective recompute (core_attention checkpointing): keep
  // q, k, v and re-run softmax, dropout and P.V in backward. The flash
  // kernel keeps no attention matrix, so there is nothing to recompute.
  const bool recompute = c.recompute_granularity == RecomputeGranularity::selective && training && !c.use_flash_attn;
  const Tensor context =  // [B, T, Hq, D] contiguous
      recompute ? autograd::checkpoint(
                      [o](const std::vector<Tensor>& in) { return std::vector<Tensor>{core_attention(in[0], in[1], in[2], o)}; },
                      {query, key, value}, {.generators = {o.generator}})[0]
                : core_attention(query, key, value, o);
  return context.reshape({b, t, groups * hpg * d});
}

// ---- Mlp ----

MlpImpl::MlpImpl(const TransformerConfig& c, int64_t /*layer_number*/)
    : activation_(c.activation_func), gated_(c.gated_linear_unit) {
  const int64_t fc1_out = c.gated_linear_unit ? 2 * c.ffn_hidden_size : c.ffn_hidden_size;
  linear_fc1 = register_module("linear_fc1", make_linear(c.hidden_size, fc1_out, c.add_bias_linear, false, c));
  linear_fc2 =
      register_module("linear_fc2", make_linear(c.ffn_hidden_size, c.hidden_size, c.add_bias_linear, true, c));
}

Tensor MlpImpl::forward(const Tensor& hidden) {
  return linear_fc2(mlp_activation(linear_fc1(hidden), activation_, gated_));
}

TransformerLayerSpec gpt_layer_local_spec() {
  TransformerLayerSpec spec;
  spec.self_attention = [](const TransformerConfig& c, int64_t layer_number) -> std::shared_ptr<SelfAttentionBase> {
    return std::make_shared<SelfAttentionImpl>(c, layer_number);
  };
  spec.mlp = [](const TransformerConfig& c, int64_t layer_number) -> std::shared_ptr<MlpBase> {
    return std::make_shared<MlpImpl>(c, layer_number);
  };
  return spec;
}

// ---- TransformerLayer ----

TransformerLayerImpl::TransformerLayerImpl(const TransformerConfig& c, int64_t layer_number,
                                           const TransformerLayerSpec& spec)
    : hidden_dropout_(c.hidden_dropout), residual_post_layernorm_(c.apply_residual_connection_post_layernorm) {
  QK_CHECK(spec.self_attention && spec.mlp, "TransformerLayer: the layer spec needs self_attention and mlp factories");
  input_layernorm = register_module("input_layernorm", Norm(c, c.hidden_size));
  self_attention = register_module("self_attention", spec.self_attention(c, layer_number));
  pre_mlp_layernorm = register_module("pre_mlp_layernorm", Norm(c, c.hidden_size));
  mlp = register_module("mlp", spec.mlp(c, layer_number));
}

Tensor TransformerLayerImpl::forward(const Tensor& hidden, const AttentionContext& ctx) {
  const bool training = is_training();
  const Tensor ln1 = input_layernorm(hidden);
  Tensor h = dropout_add(self_attention->forward(ln1, ctx), residual_post_layernorm_ ? ln1 : hidden,
                         hidden_dropout_, training, ctx.hidden_dropout_generator);
  const Tensor ln2 = pre_mlp_layernorm(h);
  return dropout_add(mlp->forward(ln2), residual_post_layernorm_ ? ln2 : h, hidden_dropout_, training,
                     ctx.hidden_dropout_generator);
}

}  // namespace qk::transformer
