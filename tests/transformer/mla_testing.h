// The tiny GPT with multi-latent attention the MLA tests train and split:
// 2 layers, hidden 32, 4 heads, q/kv low ranks 16/12 (q rank 0: no low-rank
// query), head dims 8 + 4 RoPE, values 6, latent norms, YaRN factor 4.
#pragma once

#include <cstdint>

#include "qk/transformer/config.h"

namespace qk::transformer {

inline TransformerConfig tiny_mla_config(int64_t seq_length, int64_t q_lora_rank) {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = seq_length;
  c.vocab_size = 128;
  c.make_vocab_size_divisible_by = 32;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  c.position_embedding_type = PositionEmbeddingType::rope;
  c.normalization = Normalization::RMSNorm;
  c.set_swiglu();
  c.ffn_hidden_size = 48;
  c.add_bias_linear = false;
  c.share_embeddings_and_output_weights = false;
  c.multi_latent_attention = true;
  c.q_lora_rank = q_lora_rank;
  c.kv_lora_rank = 12;
  c.qk_head_dim = 8;
  c.qk_pos_emb_head_dim = 4;
  c.v_head_dim = 6;
  c.qk_layernorm = true;
  c.rotary_scaling_factor = 4;
  c.mscale_all_dim = 0.5;
  return c;
}

}  // namespace qk::transformer
