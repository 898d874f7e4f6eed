// Tensor-parallel self-attention and MLP (Megatron-core's TP layer spec).
#include "qk/transformer/tensor_parallel.h"

#include "attention_core.h"
#include "megatron_init.h"
#include "qk/base/error.h"

namespace qk::transformer {

void check_tensor_parallel_config(const TransformerConfig& c, int64_t tp) {
  QK_CHECK(tp >= 1, "--tensor-model-parallel-size must be at least 1, got ", tp);
  QK_CHECK(c.tensor_model_parallel_size == tp, "the model's tensor_model_parallel_size (--tensor-model-parallel-size ",
           c.tensor_model_parallel_size, ") differs from the size of the tensor-parallel group it is built on (", tp,
           "); set config.tensor_model_parallel_size from the parallel state");
  QK_CHECK(c.num_attention_heads % tp == 0, "--num-attention-heads (", c.num_attention_heads,
           ") must be divisible by --tensor-model-parallel-size (", tp, "): each rank holds whole heads");
  QK_CHECK(c.num_query_groups % tp == 0, "--num-query-groups (", c.num_query_groups,
           ") must be divisible by --tensor-model-parallel-size (", tp,
           "): each rank holds whole query groups of the fused QKV weight");
  QK_CHECK(c.ffn_hidden_size % tp == 0, "--ffn-hidden-size (", c.ffn_hidden_size,
           ") must be divisible by --tensor-model-parallel-size (", tp, ")");
  QK_CHECK(c.padded_vocab_size() % tp == 0, "the padded vocabulary (", c.padded_vocab_size(),
           ") must be divisible by --tensor-model-parallel-size (", tp, "); --make-vocab-size-divisible-by pads it");
}

// ---- ParallelSelfAttention ----

ParallelSelfAttentionImpl::ParallelSelfAttentionImpl(const TransformerConfig& c, int64_t /*layer_number*/,
                                                     std::shared_ptr<dist::ProcessGroup> tp)
    : config_(c), tp_(std::move(tp)) {
  QK_CHECK(tp_ != nullptr, "ParallelSelfAttention: needs a tensor-parallel group");
  check_tensor_parallel_config(c, tp_->size());
  local_groups_ = c.num_query_groups / tp_->size();
  // Registration (and so initialisation) order as SelfAttention's.
  linear_proj = register_module(
      "linear_proj",
      parallel::RowParallelLinear(c.query_projection_size(), c.hidden_size, tp_,
                                  parallel::RowParallelLinearOptions()
                                      .bias(c.add_bias_linear)
                                      .input_is_parallel(true)
                                      .sequence_parallel(c.sequence_parallel)
                                      .init(megatron_init(c, true))));
  linear_qkv = register_module("linear_qkv", parallel::ColumnParallelLinear(
                                                 c.hidden_size, c.qkv_projection_size(), tp_,
                                                 parallel::ColumnParallelLinearOptions()
                                                     .bias(c.add_bias_linear || c.add_qkv_bias)
                                                     .sequence_parallel(c.sequence_parallel)
                                                     .init(megatron_init(c, false))));
  if (c.qk_layernorm) {
    q_layernorm = register_module("q_layernorm", Norm(c, c.kv_channels));
    k_layernorm = register_module("k_layernorm", Norm(c, c.kv_channels));
  }
}

Tensor ParallelSelfAttentionImpl::forward(const Tensor& hidden, const AttentionContext& ctx) {
  QK_CHECK(hidden.dim() == 3 && hidden.size(2) == config_.hidden_size, "ParallelSelfAttention: expected hidden [B, T",
           config_.sequence_parallel ? "/tp" : "", ", ", config_.hidden_size, "], got ", shape_str(hidden.shape()));
  const Tensor context = attention_between_projections(linear_qkv(hidden), local_groups_, config_, q_layernorm,
                                                       k_layernorm, ctx, is_training());
  return linear_proj(context);
}

std::vector<std::string> ParallelSelfAttentionImpl::partial_gradient_parameters() const {
  std::vector<std::string> names;
  if (tp_->size() == 1) return names;
  for (const Norm* n : {&q_layernorm, &k_layernorm}) {
    if (!*n) continue;
    const std::string prefix = n == &q_layernorm ? "q_layernorm." : "k_layernorm.";
    names.push_back(prefix + "weight");
    if ((*n)->bias.defined()) names.push_back(prefix + "bias");
  }
  return names;
}

// ---- ParallelMlp ----

ParallelMlpImpl::ParallelMlpImpl(const TransformerConfig& c, int64_t /*layer_number*/,
                                 std::shared_ptr<dist::ProcessGroup> tp)
    : activation_(c.activation_func), gated_(c.gated_linear_unit) {
  QK_CHECK(tp != nullptr, "ParallelMlp: needs a tensor-parallel group");
  check_tensor_parallel_config(c, tp->size());
  const int64_t fc1_out = c.gated_linear_unit ? 2 * c.ffn_hidden_size : c.ffn_hidden_size;
  linear_fc1 = register_module("linear_fc1", parallel::ColumnParallelLinear(
                                                 c.hidden_size, fc1_out, tp,
                                                 parallel::ColumnParallelLinearOptions()
                                                     .bias(c.add_bias_linear)
                                                     .sequence_parallel(c.sequence_parallel)
                                                     .stride(c.gated_linear_unit ? 2 : 1)
                                                     .init(megatron_init(c, false))));
  linear_fc2 = register_module("linear_fc2", parallel::RowParallelLinear(c.ffn_hidden_size, c.hidden_size, tp,
                                                                         parallel::RowParallelLinearOptions()
                                                                             .bias(c.add_bias_linear)
                                                                             .input_is_parallel(true)
                                                                             .sequence_parallel(c.sequence_parallel)
                                                                             .init(megatron_init(c, true))));
}

Tensor ParallelMlpImpl::forward(const Tensor& hidden) {
  return linear_fc2(mlp_activation(linear_fc1(hidden), activation_, gated_));
}

TransformerLayerSpec gpt_layer_tensor_parallel_spec(std::shared_ptr<dist::ProcessGroup> tp) {
  TransformerLayerSpec spec;
  spec.self_attention = [tp](const TransformerConfig& c, int64_t layer_number) -> std::shared_ptr<SelfAttentionBase> {
    return std::make_shared<ParallelSelfAttentionImpl>(c, layer_number, tp);
  };
  spec.mlp = [tp](const TransformerConfig& c, int64_t layer_number) -> std::shared_ptr<MlpBase> {
    return std::make_shared<ParallelMlpImpl>(c, layer_number, tp);
  };
  return spec;
}

}  // namespace qk::transformer
