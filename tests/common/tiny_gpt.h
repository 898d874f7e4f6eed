// The two tiny GPT layouts the model tests use: GPT-2 (learned positions,
// LayerNorm, GELU, tied output) and Llama (RoPE, RMSNorm, SwiGLU, grouped
// query heads, QK layernorm, no biases, untied output); 2 layers of 64, a
// vocabulary of 100, sequence 16, no dropout.
#pragma once

#include "qk/transformer/config.h"

namespace qk::test {

inline transformer::TransformerConfig tiny_gpt2() {
  transformer::TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 16;
  c.vocab_size = 100;
  c.activation_func = transformer::Activation::openai_gelu;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  return c;
}

inline transformer::TransformerConfig tiny_llama() {
  transformer::TransformerConfig c = tiny_gpt2();
  c.position_embedding_type = transformer::PositionEmbeddingType::rope;
  c.normalization = transformer::Normalization::RMSNorm;
  c.set_swiglu();
  c.num_query_groups = 2;
  c.qk_layernorm = true;
  c.add_bias_linear = false;
  c.share_embeddings_and_output_weights = false;
  return c;
}

}  // namespace qk::test
