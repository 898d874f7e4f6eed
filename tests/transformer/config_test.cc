// TransformerConfig: Megatron's defaults, derived values, validation rules,
// vocabulary padding and the FLOPs formula.
#include "qk/transformer/config.h"

#include <gtest/gtest.h>

#include <functional>

namespace qk::transformer {
namespace {

TransformerConfig gpt2_small() {
  TransformerConfig c;
  c.num_layers = 12;
  c.hidden_size = 768;
  c.num_attention_heads = 12;
  c.seq_length = 1024;
  c.max_position_embeddings = 1024;
  c.vocab_size = 50257;
  return c;
}

// The ValueError's message names `field`.
void expect_error_naming(const std::function<void(TransformerConfig&)>& edit, const std::string& field) {
  TransformerConfig c = gpt2_small();
  edit(c);
  try {
    c.validate();
    ADD_FAILURE() << "validate() accepted a config with a bad " << field;
  } catch (const ValueError& e) {
    EXPECT_NE(e.message().find(field), std::string::npos) << "message does not name " << field << ": " << e.message();
  }
}

TEST(TransformerConfig, MegatronDefaults) {
  TransformerConfig c;
  EXPECT_EQ(c.hidden_dropout, 0.1);
  EXPECT_EQ(c.attention_dropout, 0.1);
  EXPECT_EQ(c.layernorm_epsilon, 1e-5);
  EXPECT_EQ(c.init_method_std, 0.02);
  EXPECT_TRUE(c.add_bias_linear);
  EXPECT_FALSE(c.gated_linear_unit);
  EXPECT_EQ(c.activation_func, Activation::gelu);
  EXPECT_EQ(c.normalization, Normalization::LayerNorm);
  EXPECT_EQ(c.position_embedding_type, PositionEmbeddingType::learned_absolute);
  EXPECT_EQ(c.rotary_base, 10000.0);
  EXPECT_EQ(c.rotary_percent, 1.0);
  EXPECT_EQ(c.make_vocab_size_divisible_by, 128);
  EXPECT_TRUE(c.share_embeddings_and_output_weights);
  EXPECT_TRUE(c.attention_softmax_in_fp32);
  EXPECT_FALSE(c.use_flash_attn);
  EXPECT_EQ(c.params_dtype, DType::f32);
}

TEST(TransformerConfig, ValidateFillsDerivedDefaults) {
  TransformerConfig c = gpt2_small();
  c.max_position_embeddings = 0;
  c.validate();
  EXPECT_EQ(c.num_query_groups, 12);
  EXPECT_EQ(c.kv_channels, 64);
  EXPECT_EQ(c.ffn_hidden_size, 3072);
  EXPECT_EQ(c.max_position_embeddings, 1024);
  EXPECT_EQ(c.padded_vocab_size(), 50304);
  EXPECT_EQ(c.qkv_projection_size(), 3 * 768);
  c.validate();  // idempotent
  EXPECT_EQ(c.ffn_hidden_size, 3072);
}

TEST(TransformerConfig, SwigluFfnRule) {
  // arguments.py: int((4 * h * 2 / 3) / 64) * 64; Llama-2 7B's hidden 4096 gives 10880.
  TransformerConfig c = gpt2_small();
  c.hidden_size = 4096;
  c.num_attention_heads = 32;
  c.set_swiglu();
  c.validate();
  EXPECT_EQ(c.ffn_hidden_size, 10880);
  TransformerConfig given = gpt2_small();
  given.set_swiglu();
  given.ffn_hidden_size = 2048;  // an explicit size wins
  given.validate();
  EXPECT_EQ(given.ffn_hidden_size, 2048);
}

TEST(TransformerConfig, GroupedQueryAttentionSizes) {
  TransformerConfig c = gpt2_small();
  c.num_query_groups = 4;
  c.kv_channels = 32;  // need not be hidden / heads
  c.validate();
  EXPECT_EQ(c.heads_per_group(), 3);
  EXPECT_EQ(c.query_projection_size(), 12 * 32);
  EXPECT_EQ(c.qkv_projection_size(), (12 + 2 * 4) * 32);
}

TEST(TransformerConfig, ValidationErrorsNameTheField) {
  expect_error_naming([](auto& c) { c.num_layers = 0; }, "num_layers");
  expect_error_naming([](auto& c) { c.hidden_size = 770; }, "hidden_size");
  expect_error_naming([](auto& c) { c.num_query_groups = 5; }, "num_query_groups");
  expect_error_naming([](auto& c) { c.tensor_model_parallel_size = 5; }, "tensor_model_parallel_size");
  expect_error_naming([](auto& c) { c.num_query_groups = 3, c.tensor_model_parallel_size = 2; }, "num_query_groups");
  expect_error_naming([](auto& c) { c.max_position_embeddings = 512; }, "max_position_embeddings");
  expect_error_naming([](auto& c) { c.seq_length = 0; }, "seq_length");
  expect_error_naming([](auto& c) { c.vocab_size = 0; }, "vocab_size");
  expect_error_naming([](auto& c) { c.hidden_dropout = 1.0; }, "hidden_dropout");
  expect_error_naming([](auto& c) { c.attention_dropout = -0.1; }, "attention_dropout");
  expect_error_naming([](auto& c) { c.layernorm_epsilon = 0; }, "layernorm_epsilon");
  expect_error_naming([](auto& c) { c.init_method_std = 0; }, "init_method_std");
  expect_error_naming([](auto& c) { c.make_vocab_size_divisible_by = 0; }, "make_vocab_size_divisible_by");
  expect_error_naming([](auto& c) { c.params_dtype = DType::i64; }, "params_dtype");
  expect_error_naming([](auto& c) { c.softmax_scale = -1.0; }, "softmax_scale");
  expect_error_naming(
      [](auto& c) {
        c.position_embedding_type = PositionEmbeddingType::rope;
        c.rotary_percent = 1.5;
      },
      "rotary_percent");
  expect_error_naming(
      [](auto& c) {
        c.position_embedding_type = PositionEmbeddingType::rope;
        c.rotary_percent = 0.01;  // int(64 * 0.01) = 0 rotary dims
      },
      "rotary_percent");
  expect_error_naming(
      [](auto& c) {
        c.position_embedding_type = PositionEmbeddingType::rope;
        c.rotary_seq_len_interpolation_factor = 0.0;
      },
      "rotary_seq_len_interpolation_factor");
}

TEST(TransformerConfig, MoEDefaultsAndRules) {
  TransformerConfig c = gpt2_small();
  c.num_moe_experts = 8;
  c.expert_model_parallel_size = 2;
  c.moe_layer_pattern = std::vector<int64_t>(12, 0);
  c.moe_layer_pattern[3] = 1;
  c.validate();
  EXPECT_EQ(c.moe_ffn_hidden_size, c.ffn_hidden_size);
  EXPECT_EQ(c.num_local_experts(), 4);
  EXPECT_FALSE(c.is_moe_layer(1));
  EXPECT_TRUE(c.is_moe_layer(4));
  TransformerConfig every = gpt2_small();
  every.num_moe_experts = 4;
  every.validate();
  EXPECT_EQ(every.moe_layer_pattern, std::vector<int64_t>(12, 1));
  EXPECT_FALSE(gpt2_small().is_moe_layer(1));

  auto moe = [](auto edit) {
    return [edit](TransformerConfig& c) {
      c.num_moe_experts = 8;
      edit(c);
    };
  };
  expect_error_naming(moe([](auto& c) { c.expert_model_parallel_size = 3; }), "expert_model_parallel_size");
  expect_error_naming([](auto& c) { c.expert_model_parallel_size = 2; }, "expert_model_parallel_size");
  expect_error_naming(moe([](auto& c) { c.moe_router_topk = 9; }), "moe_router_topk");
  expect_error_naming(moe([](auto& c) { c.moe_layer_pattern = {1, 0}; }), "moe_layer_pattern");
  expect_error_naming(moe([](auto& c) { c.moe_router_num_groups = 4; }), "moe_router_group_topk");
  expect_error_naming(moe([](auto& c) { c.moe_router_num_groups = 3, c.moe_router_group_topk = 1; }),
                      "moe_router_num_groups");
  expect_error_naming(moe([](auto& c) { c.moe_router_num_groups = 4, c.moe_router_group_topk = 1, c.moe_router_topk = 3; }),
                      "moe_router_topk");
  expect_error_naming(moe([](auto& c) { c.moe_pad_expert_input_to_capacity = true; }),
                      "moe_pad_expert_input_to_capacity");
  expect_error_naming(moe([](auto& c) { c.moe_expert_capacity_factor = 0.0; }), "moe_expert_capacity_factor");
  EXPECT_EQ(parse_moe_load_balancing("seq_aux_loss"), MoELoadBalancing::seq_aux_loss);
  EXPECT_STREQ(to_string(MoETokenDispatcher::alltoall), "alltoall");
  EXPECT_THROW(parse_moe_score_function("tanh"), ValueError);
}

TEST(TransformerConfig, MultiLatentAttentionRules) {
  expect_error_naming([](auto& c) { c.multi_latent_attention = true, c.qk_pos_emb_head_dim = 3; }, "qk_pos_emb_head_dim");
  expect_error_naming([](auto& c) { c.multi_latent_attention = true, c.kv_lora_rank = 0; }, "kv_lora_rank");
  expect_error_naming([](auto& c) { c.multi_latent_attention = true, c.rotary_scaling_factor = 0.5; },
                      "rotary_scaling_factor");
}

TEST(TransformerConfig, QueryKeyLayerScalingForcesSoftmaxInFp32) {
  TransformerConfig c = gpt2_small();
  c.attention_softmax_in_fp32 = false;
  c.apply_query_key_layer_scaling = true;
  c.validate();
  EXPECT_TRUE(c.attention_softmax_in_fp32);
}

TEST(TransformerConfig, RotaryDim) {
  TransformerConfig c = gpt2_small();
  c.position_embedding_type = PositionEmbeddingType::rope;
  c.rotary_percent = 0.5;
  c.validate();
  EXPECT_EQ(c.rotary_dim(), 32);
}

TEST(TransformerConfig, ParseNames) {
  EXPECT_EQ(parse_normalization("RMSNorm"), Normalization::RMSNorm);
  EXPECT_EQ(parse_position_embedding_type("rope"), PositionEmbeddingType::rope);
  EXPECT_EQ(parse_activation("openai_gelu"), Activation::openai_gelu);
  EXPECT_STREQ(to_string(PositionEmbeddingType::learned_absolute), "learned_absolute");
  try {
    parse_normalization("BatchNorm");
    ADD_FAILURE() << "accepted BatchNorm";
  } catch (const ValueError& e) {
    EXPECT_NE(e.message().find("LayerNorm, RMSNorm"), std::string::npos) << e.message();
  }
}

TEST(VocabPadding, MegatronRule) {
  EXPECT_EQ(vocab_size_with_padding(50257, 128), 50304);
  EXPECT_EQ(vocab_size_with_padding(50257, 128, 2), 50432);  // a multiple of 128 x TP
  EXPECT_EQ(vocab_size_with_padding(50304, 128), 50304);     // already divisible
  EXPECT_EQ(vocab_size_with_padding(100, 1), 100);
  EXPECT_THROW(vocab_size_with_padding(100, 0), ValueError);
}

// FLOPs counted GEMM by GEMM, forward x 3 for the two backward GEMMs.
double gemm_flops(const TransformerConfig& c, int64_t batch) {
  const double C = c.hidden_size, T = c.seq_length, D = c.kv_channels, Hq = c.num_attention_heads,
               G = c.num_query_groups, F = c.ffn_hidden_size, V = c.padded_vocab_size();
  const double qkv = 2 * C * (Hq * D + 2 * G * D), proj = 2 * Hq * D * C;
  const double fc1 = 2 * C * (c.gated_linear_unit ? 2 * F : F), fc2 = 2 * F * C;
  const double attention = (2 * T * Hq * D + 2 * T * Hq * D) / 2;  // Q.K^T and P.V, causal half
  const double per_token = c.num_layers * (qkv + proj + fc1 + fc2 + attention) + 2 * C * V;
  return 3 * per_token * T * batch;
}

TEST(Flops, MatchesGemmCount) {
  TransformerConfig c = gpt2_small();
  c.validate();
  EXPECT_NEAR(num_floating_point_operations(c, 8) / gemm_flops(c, 8), 1.0, 1e-12);
  // GPT-2 124M at sequence 64, micro batch 4 (the benchmark): 72 L C^2 + 6 L T C + 6 C V per token.
  c.seq_length = 64;
  const double per_token = 72.0 * 12 * 768 * 768 + 6.0 * 12 * 64 * 768 + 6.0 * 768 * 50304;
  EXPECT_NEAR(num_floating_point_operations(c, 4), per_token * 64 * 4, 1.0);

  TransformerConfig llama = gpt2_small();
  llama.set_swiglu();
  llama.num_query_groups = 4;
  llama.kv_channels = 48;
  llama.validate();
  EXPECT_NEAR(num_floating_point_operations(llama, 2) / gemm_flops(llama, 2), 1.0, 1e-12);
}

// A DeepSeek-like layout counted GEMM by GEMM: MLA (low-rank q and kv, decoupled
// RoPE dims) and, in every layer but the first, top-2 routed SwiGLU experts plus
// a shared expert; norms on the latents count one multiply per element (Megatron's "+ 1").
TEST(Flops, MoEAndMultiLatentAttention) {
  TransformerConfig c = gpt2_small();
  c.num_layers = 4;
  c.set_swiglu();
  c.multi_latent_attention = true;
  c.q_lora_rank = 96, c.kv_lora_rank = 64, c.qk_head_dim = 32, c.qk_pos_emb_head_dim = 16, c.v_head_dim = 48;
  c.num_moe_experts = 8, c.moe_router_topk = 2, c.moe_ffn_hidden_size = 128;
  c.moe_shared_expert_intermediate_size = 256;
  c.moe_layer_pattern = {0, 1, 1, 1};
  c.validate();
  const double C = 768, T = 1024, H = 12, V = c.padded_vocab_size(), F = c.ffn_hidden_size;
  const double q = 2 * (96 * C + 96 + 96 * H * 48), kv = 2 * (64 * C + 64 + 64 * H * (32 + 48)) + 2 * C * 16;
  const double proj = 2 * H * 48 * C, attention = (2 * T * H * 48 + 2 * T * H * 48) / 2;
  const double swiglu_mlp = [&](double f) { return 2 * C * 2 * f + 2 * f * C; }(1);
  const double dense = swiglu_mlp * F, moe = swiglu_mlp * (2 * 128 + 256);
  const double per_token = 4 * (q + kv + proj + attention) + dense + 3 * moe + 2 * C * V;
  EXPECT_NEAR(num_floating_point_operations(c, 3) / (3 * per_token * T * 3), 1.0, 1e-12);
}

}  // namespace
}  // namespace qk::transformer
