// Tensor-parallel multi-latent attention: heads split over the group, the
// down projections replicated.
#include "megatron_init.h"
#include "mla_core.h"
#include "qk/parallel/mappings.h"
#include "qk/transformer/tensor_parallel.h"

namespace qk::transformer {

namespace {

parallel::ColumnParallelLinear column(int64_t in, int64_t out, const TransformerConfig& c,
                                      const std::shared_ptr<dist::ProcessGroup>& tp) {
  return parallel::ColumnParallelLinear(
      in, out, tp,
      parallel::ColumnParallelLinearOptions().bias(false).sequence_parallel(c.sequence_parallel).init(
          megatron_init(c, false)));
}

// A replicated projection drawn as the local module's (nn::Linear, then N(0, std)).
nn::Linear replicated(int64_t in, int64_t out, const TransformerConfig& c) {
  nn::Linear l(nn::LinearOptions(in, out).bias(false));
  init_normal(l->weight, c);
  return l;
}

}  // namespace

ParallelMultiLatentAttentionImpl::ParallelMultiLatentAttentionImpl(const TransformerConfig& c,
                                                                   int64_t /*layer_number*/,
                                                                   std::shared_ptr<dist::ProcessGroup> tp)
    : config_(c), tp_(std::move(tp)) {
  QK_CHECK(tp_ != nullptr, "ParallelMultiLatentAttention: needs a tensor-parallel group");
  QK_CHECK(c.multi_latent_attention, "ParallelMultiLatentAttention: the config must set multi_latent_attention "
           "(--multi-latent-attention)");
  check_tensor_parallel_config(c, tp_->size());
  local_heads_ = c.num_attention_heads / tp_->size();
  const int64_t h = c.num_attention_heads, q_head = c.qk_head_dim + c.qk_pos_emb_head_dim;
  // Registration (and so initialisation) order as MultiLatentAttention's.
  linear_proj = register_module(
      "linear_proj", parallel::RowParallelLinear(h * c.v_head_dim, c.hidden_size, tp_,
                                                 parallel::RowParallelLinearOptions()
                                                     .bias(c.add_bias_linear)
                                                     .input_is_parallel(true)
                                                     .sequence_parallel(c.sequence_parallel)
                                                     .init(megatron_init(c, true))));
  if (c.q_lora_rank == 0) {
    linear_q_proj = register_module("linear_q_proj", column(c.hidden_size, h * q_head, c, tp_));
  } else {
    linear_q_down_proj = register_module("linear_q_down_proj", replicated(c.hidden_size, c.q_lora_rank, c));
    linear_q_up_proj = register_module("linear_q_up_proj", column(c.q_lora_rank, h * q_head, c, tp_));
  }
  linear_kv_down_proj =
      register_module("linear_kv_down_proj", replicated(c.hidden_size, c.kv_lora_rank + c.qk_pos_emb_head_dim, c));
  linear_kv_up_proj =
      register_module("linear_kv_up_proj", column(c.kv_lora_rank, h * (c.qk_head_dim + c.v_head_dim), c, tp_));
  if (c.qk_layernorm) {
    if (c.q_lora_rank > 0) q_layernorm = register_module("q_layernorm", Norm(c, c.q_lora_rank));
    kv_layernorm = register_module("kv_layernorm", Norm(c, c.kv_lora_rank));
  }
}

Tensor ParallelMultiLatentAttentionImpl::forward(const Tensor& hidden, const AttentionContext& ctx) {
  const TransformerConfig& c = config_;
  QK_CHECK(hidden.dim() == 3 && hidden.size(2) == c.hidden_size, "ParallelMultiLatentAttention: expected hidden [B, T",
           c.sequence_parallel ? "/tp" : "", ", ", c.hidden_size, "], got ", shape_str(hidden.shape()));
  Tensor q;  // [B, T, local heads * (dn + dr)]: the column-parallel layers gather a sequence shard
  if (linear_q_proj) {
    q = linear_q_proj(hidden);
  } else {
    Tensor q_latent = linear_q_down_proj(hidden);
    if (q_layernorm) q_latent = q_layernorm(q_latent);
    q = linear_q_up_proj(q_latent);
  }
  const Tensor kv = linear_kv_down_proj(hidden);
  Tensor c_kv = kv.narrow(2, 0, c.kv_lora_rank);
  if (kv_layernorm) c_kv = kv_layernorm(c_kv);
  // Every rank's heads read the shared RoPE key: under sequence parallelism
  // gather the sequence (the gradient is reduce-scattered), else sum its
  // gradient over the group.
  Tensor k_pe = kv.narrow(2, c.kv_lora_rank, c.qk_pos_emb_head_dim);
  if (tp_->size() > 1)
    k_pe = c.sequence_parallel ? parallel::gather_from_sequence_parallel_region(k_pe, *tp_, 1)
                               : parallel::copy_to_tensor_model_parallel_region(k_pe, *tp_);
  const Tensor context = mla_between_projections(
      c, local_heads_, q, c_kv, k_pe, [this](const Tensor& x) { return linear_kv_up_proj(x); },
      linear_kv_up_proj->weight, ctx, is_training());
  return linear_proj(context);
}

std::vector<std::string> ParallelMultiLatentAttentionImpl::partial_gradient_parameters() const {
  std::vector<std::string> names;
  if (tp_->size() == 1 || !config_.sequence_parallel) return names;
  if (linear_q_down_proj) names.push_back("linear_q_down_proj.weight");
  names.push_back("linear_kv_down_proj.weight");
  for (const Norm* n : {&q_layernorm, &kv_layernorm}) {
    if (!*n) continue;
    const std::string prefix = n == &q_layernorm ? "q_layernorm." : "kv_layernorm.";
    names.push_back(prefix + "weight");
    if ((*n)->bias.defined()) names.push_back(prefix + "bias");
  }
  return names;
}

TransformerLayerSpec gpt_layer_mla_tensor_parallel_spec(std::shared_ptr<dist::ProcessGroup> tp,
                                                        TransformerLayerSpec base) {
  base.self_attention = [tp](const TransformerConfig& c, int64_t layer_number) -> std::shared_ptr<SelfAttentionBase> {
    return std::make_shared<ParallelMultiLatentAttentionImpl>(c, layer_number, tp);
  };
  return base;
}

}  // namespace qk::transformer
