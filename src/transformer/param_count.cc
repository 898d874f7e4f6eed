// Parameter counts from the config, as the modules register them
// (layers.cc, mla.cc / mla_parallel.cc, moe/, gpt_model.cc).
#include "qk/transformer/param_count.h"

#include "qk/base/error.h"

namespace qk::transformer {

namespace {

int64_t norm(const TransformerConfig& c, int64_t dim) {
  return c.normalization == Normalization::LayerNorm ? 2 * dim : dim;
}

// An MLP of `width` split over tp: fc1 (x2 gated) column-parallel, fc2 row-parallel.
int64_t mlp(const TransformerConfig& c, int64_t width, int64_t tp) {
  const int64_t h = c.hidden_size, rows = c.gated_linear_unit ? 2 * width : width;
  int64_t n = rows * h / tp + h * width / tp;
  if (c.add_bias_linear) n += rows / tp + h;
  return n;
}

int64_t attention(const TransformerConfig& c, int64_t tp) {
  const int64_t h = c.hidden_size;
  if (c.multi_latent_attention) {
    const int64_t heads = c.num_attention_heads, q_head = c.qk_head_dim + c.qk_pos_emb_head_dim;
    int64_t n = heads * c.v_head_dim * h / tp + (c.add_bias_linear ? h : 0);  // linear_proj
    if (c.q_lora_rank == 0)
      n += heads * q_head * h / tp;
    else
      n += h * c.q_lora_rank + c.q_lora_rank * heads * q_head / tp;
    n += h * (c.kv_lora_rank + c.qk_pos_emb_head_dim);
    n += c.kv_lora_rank * heads * (c.qk_head_dim + c.v_head_dim) / tp;
    if (c.qk_layernorm) n += (c.q_lora_rank > 0 ? norm(c, c.q_lora_rank) : 0) + norm(c, c.kv_lora_rank);
    return n;
  }
  const int64_t qkv = c.qkv_projection_size();
  int64_t n = qkv * h / tp + c.query_projection_size() * h / tp;
  if (c.add_bias_linear || c.add_qkv_bias) n += qkv / tp;
  if (c.add_bias_linear) n += h;
  if (c.qk_layernorm) n += 2 * norm(c, c.kv_channels);
  return n;
}

}  // namespace

ParamCount layer_num_parameters(const TransformerConfig& c, int64_t layer_number) {
  QK_CHECK(layer_number >= 1 && layer_number <= c.num_layers, "layer_num_parameters: layer ", layer_number,
           " outside 1..", c.num_layers);
  const int64_t tp = c.tensor_model_parallel_size, h = c.hidden_size;
  ParamCount n;
  n.dense = 2 * norm(c, h) + attention(c, tp);
  if (!c.is_moe_layer(layer_number)) {
    n.dense += mlp(c, c.ffn_hidden_size, tp);
    return n;
  }
  n.dense += c.num_moe_experts * h;  // the router
  if (c.moe_shared_expert_intermediate_size > 0) n.dense += mlp(c, c.moe_shared_expert_intermediate_size, tp);
  n.expert = c.num_local_experts() * mlp(c, c.moe_ffn_hidden_size, tp);
  return n;
}

int64_t embedding_num_parameters(const TransformerConfig& c) {
  int64_t n = c.padded_vocab_size() * c.hidden_size / c.tensor_model_parallel_size;
  if (c.position_embedding_type == PositionEmbeddingType::learned_absolute)
    n += c.max_position_embeddings * c.hidden_size;
  return n;
}

int64_t output_num_parameters(const TransformerConfig& c, int64_t pipeline_size) {
  int64_t n = norm(c, c.hidden_size);
  if (!c.share_embeddings_and_output_weights || pipeline_size > 1)
    n += c.padded_vocab_size() * c.hidden_size / c.tensor_model_parallel_size;
  return n;
}

ParamCount num_parameters(const TransformerConfig& c, const ParamScope& s) {
  const int64_t count = s.num_layers < 0 ? c.num_layers - s.first_layer + 1 : s.num_layers;
  QK_CHECK(s.first_layer >= 1 && count >= 0 && s.first_layer + count - 1 <= c.num_layers,
           "num_parameters: layers ", s.first_layer, "..", s.first_layer + count - 1, " outside 1..", c.num_layers);
  ParamCount n;
  for (int64_t l = s.first_layer; l < s.first_layer + count; ++l) n += layer_num_parameters(c, l);
  // A tied output layer of a single stage is the embedding itself.
  const bool tied_copy = c.share_embeddings_and_output_weights && s.pipeline_size > 1;
  if (s.embedding) n.dense += embedding_num_parameters(c);
  if (s.output) n.dense += output_num_parameters(c, tied_copy ? s.pipeline_size : 1);
  return n;
}

}  // namespace qk::transformer
