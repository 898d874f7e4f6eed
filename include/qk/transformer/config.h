// TransformerConfig: the model half of Megatron-LM's arguments, as one struct
// the GPT/Llama model (qk/transformer/gpt_model.h) is built from.
//
//   qk::transformer::TransformerConfig c;          // Megatron's defaults
//   c.num_layers = 12;  c.hidden_size = 768;  c.num_attention_heads = 12;
//   c.seq_length = 1024;  c.max_position_embeddings = 1024;  c.vocab_size = 50257;
//   c.validate();                                  // fills Megatron's derived defaults
//   c.padded_vocab_size();                         // 50304
//   c.ffn_hidden_size;                             // 3072 (4 x hidden)
//
//   // The Llama layout: --position-embedding-type rope --normalization RMSNorm --swiglu
//   //   --group-query-attention --num-query-groups 2 --qk-layernorm --disable-bias-linear
//   //   --untie-embeddings-and-output-weights
//   c.position_embedding_type = PositionEmbeddingType::rope;
//   c.normalization = Normalization::RMSNorm;
//   c.set_swiglu();  c.num_query_groups = 2;  c.qk_layernorm = true;
//   c.add_bias_linear = false;  c.share_embeddings_and_output_weights = false;
//
// Field names are Megatron's (megatron/core/transformer/transformer_config.py
// and the GPT model flags of megatron/training/arguments.py) in snake_case,
// with Megatron's defaults. Where Megatron has None, an integer field holds 0
// ("unset") and validate() fills it in as Megatron's __post_init__ and
// validate_args do; it also enforces Megatron's rules, throwing qk::ValueError
// with the field's name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qk/tensor/dtype.h"

namespace qk::transformer {

enum class Normalization { LayerNorm, RMSNorm };
enum class PositionEmbeddingType { learned_absolute, rope, none };
// The MLP non-linearity: gelu (erf, Megatron's default F.gelu), openai_gelu
// (tanh approximation, --openai-gelu, GPT-2's), silu (with gated_linear_unit:
// --swiglu), relu, squared_relu (--squared-relu).
enum class Activation { gelu, openai_gelu, silu, relu, squared_relu };
// Activation recompute (--recompute-granularity, --recompute-method): none;
// full: whole layers re-run in backward (uniform: groups of
// recompute_num_layers layers; block: the first recompute_num_layers layers,
// one by one); selective: only the attention core (softmax, dropout, P.V).
enum class RecomputeGranularity { none, full, selective };
enum class RecomputeMethod { none, uniform, block };
// Mixture of experts (Megatron's MoE fields): the router's score function,
// its load-balancing loss (--moe-router-load-balancing-type), how tokens
// reach the ranks that hold their experts, and which tokens a full expert
// drops.
enum class MoEScoreFunction { softmax, sigmoid };
enum class MoELoadBalancing { aux_loss, seq_aux_loss, global_aux_loss, sinkhorn, none };
enum class MoETokenDispatcher { allgather, alltoall };
enum class MoETokenDropPolicy { probs, position };

// "LayerNorm"/"RMSNorm", "learned_absolute"/"rope"/"none", "gelu"/"openai_gelu"/...;
// anything else throws ValueError listing the choices.
Normalization parse_normalization(std::string_view s);
PositionEmbeddingType parse_position_embedding_type(std::string_view s);
Activation parse_activation(std::string_view s);
// "full"/"selective" ("" or "none": none), "uniform"/"block" ("" or "none": none).
RecomputeGranularity parse_recompute_granularity(std::string_view s);
RecomputeMethod parse_recompute_method(std::string_view s);
MoEScoreFunction parse_moe_score_function(std::string_view s);
MoELoadBalancing parse_moe_load_balancing(std::string_view s);
MoETokenDispatcher parse_moe_token_dispatcher(std::string_view s);
MoETokenDropPolicy parse_moe_token_drop_policy(std::string_view s);
const char* to_string(Normalization n);
const char* to_string(PositionEmbeddingType p);
const char* to_string(Activation a);
const char* to_string(RecomputeGranularity g);
const char* to_string(RecomputeMethod m);
const char* to_string(MoEScoreFunction f);
const char* to_string(MoELoadBalancing b);
const char* to_string(MoETokenDispatcher d);
const char* to_string(MoETokenDropPolicy p);

struct TransformerConfig {
  // ---- model architecture ----
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_attention_heads = 0;
  // Grouped-query attention: key/value heads (0: num_attention_heads, i.e. plain MHA).
  int64_t num_query_groups = 0;
  // Head dimension (0: hidden_size / num_attention_heads).
  int64_t kv_channels = 0;
  // MLP width (0: 4 x hidden_size, or for SwiGLU Megatron's
  // int(4 * hidden_size * 2/3 / 64) * 64).
  int64_t ffn_hidden_size = 0;
  double hidden_dropout = 0.1;
  double attention_dropout = 0.1;
  // Original BERT residual order: the residual is the layer norm's output.
  bool apply_residual_connection_post_layernorm = false;
  // --norm-epsilon
  double layernorm_epsilon = 1e-5;
  // --apply-layernorm-1p: norm weights stored zero-centred, applied as (1 + weight).
  bool layernorm_zero_centered_gamma = false;
  // --disable-bias-linear sets false: biases of linear_qkv, linear_proj, linear_fc1, linear_fc2.
  bool add_bias_linear = true;
  // A bias on linear_qkv only (--add-qkv-bias).
  bool add_qkv_bias = false;
  bool gated_linear_unit = false;
  Activation activation_func = Activation::gelu;
  Normalization normalization = Normalization::LayerNorm;
  // Normalise each query and key head (over kv_channels) before RoPE.
  bool qk_layernorm = false;

  // ---- initialisation ----
  // Linear weights and embeddings ~ N(0, init_method_std); linear_proj and
  // linear_fc2 ~ N(0, init_method_std / sqrt(2 * num_layers)); biases zero.
  double init_method_std = 0.02;

  // ---- attention numerics ----
  // Scale Q.K^T by 1/layer_number too (an fp16 aid; forces softmax in fp32).
  bool apply_query_key_layer_scaling = false;
  bool attention_softmax_in_fp32 = true;
  // Softmax scale (unset: 1 / sqrt(kv_channels)).
  std::optional<double> softmax_scale;
  // --use-flash-attn: the tiled kernel (qk::flash_attention) instead of the
  // unfused reference attention.
  bool use_flash_attn = false;

  // ---- GPT model arguments (megatron/training/arguments.py) ----
  int64_t seq_length = 0;
  // Rows of the learned position table (0: seq_length).
  int64_t max_position_embeddings = 0;
  PositionEmbeddingType position_embedding_type = PositionEmbeddingType::learned_absolute;
  double rotary_base = 10000;
  // Fraction of each head's dims that RoPE rotates.
  double rotary_percent = 1.0;
  // Positions are divided by this (linear RoPE interpolation).
  std::optional<double> rotary_seq_len_interpolation_factor;
  // The tokenizer's vocabulary; the model's tables have padded_vocab_size() rows.
  int64_t vocab_size = 0;
  int64_t make_vocab_size_divisible_by = 128;
  // false: --untie-embeddings-and-output-weights.
  bool share_embeddings_and_output_weights = true;
  // Parameters and activations: f32, or bf16/f16 as Megatron's --bf16/--fp16
  // runs (softmax and the loss stay in f32).
  DType params_dtype = DType::f32;

  // ---- parallelism (ModelParallelConfig) ----
  // The model's split: GPTModel built with a tensor-parallel group of this size
  // (qk/transformer/tensor_parallel.h); it also pads the vocabulary.
  int64_t tensor_model_parallel_size = 1;
  // --sequence-parallel: norms and dropout on sequence shards between the
  // tensor-parallel layers (validate() turns it off at tensor-parallel size 1).
  bool sequence_parallel = false;

  // ---- activation recompute (Megatron's TransformerConfig fields) ----
  // Only in training with gradients (not in evaluation or generation).
  // full needs a method and 1 <= recompute_num_layers <= num_layers;
  // selective takes neither (validate() enforces Megatron's rules). With
  // use_flash_attn selective recompute has nothing to do: the flash kernel
  // keeps no attention matrix (Megatron checkpoints core attention only on
  // its unfused path).
  RecomputeGranularity recompute_granularity = RecomputeGranularity::none;
  RecomputeMethod recompute_method = RecomputeMethod::none;
  int64_t recompute_num_layers = 0;  // 0: unset

  // ---- mixture of experts (Megatron's TransformerConfig MoE fields) ----
  // Routed experts per MoE layer (0: every MLP dense; Megatron's num_moe_experts, --num-experts).
  int64_t num_moe_experts = 0;
  // Which layers are MoE: entry i (layer i + 1) is 1 for MoE, 0 for a dense
  // MLP, as Megatron's moe_layer_freq resolved (an integer N: every N-th
  // layer from the first; a list such as "([0]*1+[1]*26)"). Empty: every
  // layer. validate() checks the length is num_layers.
  std::vector<int64_t> moe_layer_pattern;
  // Width of each expert (0: ffn_hidden_size).
  int64_t moe_ffn_hidden_size = 0;
  // Total width of the shared experts every token also passes through (0: none).
  int64_t moe_shared_expert_intermediate_size = 0;
  bool moe_shared_expert_overlap = false;
  // One grouped GEMM over a rank's experts instead of a loop of per-expert GEMMs.
  bool moe_grouped_gemm = false;
  // ---- router ----
  int64_t moe_router_topk = 2;
  MoEScoreFunction moe_router_score_function = MoEScoreFunction::softmax;
  // Softmax over all experts before the top-k (else: top-k of the logits, then softmax over the k).
  bool moe_router_pre_softmax = false;
  // Group-limited routing: experts in num_groups groups, each token picks
  // its group_topk best groups first (0: off; both or neither).
  int64_t moe_router_num_groups = 0;
  int64_t moe_router_group_topk = 0;
  // Multiplies the selected scores (DeepSeek's routed_scaling_factor).
  std::optional<double> moe_router_topk_scaling_factor;
  MoELoadBalancing moe_router_load_balancing_type = MoELoadBalancing::aux_loss;
  double moe_aux_loss_coeff = 0.0;
  double moe_z_loss_coeff = 0.0;      // 0: no z-loss
  double moe_input_jitter_eps = 0.0;  // 0: no jitter
  // DeepSeek-V2's device-level and communication balance losses (the MT-Megatron
  // fork's flags): experts grouped by the expert-parallel rank that holds them.
  double moe_device_level_aux_loss_coeff = 0.0;
  double moe_comm_aux_loss_coeff = 0.0;
  // DeepSeek-V3's aux-loss-free balancing: a per-expert bias added to the
  // scores for the top-k choice only, moved after each step by
  // bias_update_rate x sign(mean load - expert load).
  bool moe_router_enable_expert_bias = false;
  double moe_router_bias_update_rate = 1e-3;
  // Log tokens per expert and dropped tokens of every MoE layer.
  bool moe_per_layer_logging = false;
  // ---- dispatch and capacity ----
  MoETokenDispatcher moe_token_dispatcher_type = MoETokenDispatcher::allgather;
  // Permute and un-permute tokens in one fused pass each.
  bool moe_permute_fusion = false;
  // Capacity of each expert = factor x its even share of the routed tokens
  // (unset: no token is dropped); dropped routes pass only the residual.
  std::optional<double> moe_expert_capacity_factor;
  bool moe_pad_expert_input_to_capacity = false;
  MoETokenDropPolicy moe_token_drop_policy = MoETokenDropPolicy::probs;
  // DeepSeek-V2: the capacity applies to each expert-parallel rank's experts together.
  bool moe_device_level_capacity = false;
  // Ranks the routed experts are spread over (--expert-model-parallel-size).
  int64_t expert_model_parallel_size = 1;

  // ---- multi-latent attention (Megatron's MLATransformerConfig, arguments.py defaults) ----
  bool multi_latent_attention = false;
  int64_t q_lora_rank = 0;  // 0: queries projected directly (no low-rank query)
  int64_t kv_lora_rank = 32;
  int64_t qk_head_dim = 128;          // query/key dims without RoPE
  int64_t qk_pos_emb_head_dim = 64;   // the decoupled RoPE dims
  int64_t v_head_dim = 128;
  // YaRN (rotary_scaling_factor 1: plain RoPE).
  double rotary_scaling_factor = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
  // YaRN's other parameters (MLATransformerConfig's defaults; arguments.py has no flags
  // for them): the context the model was trained on, and the rotation counts that bound
  // the dims YaRN interpolates (beta_fast) and extrapolates (beta_slow).
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;

  // --swiglu: gated_linear_unit with SiLU.
  void set_swiglu() {
    gated_linear_unit = true;
    activation_func = Activation::silu;
  }
  bool is_swiglu() const { return gated_linear_unit && activation_func == Activation::silu; }

  // Fills the unset (0) fields with Megatron's derived defaults and checks
  // Megatron's rules; throws ValueError naming the offending field.
  // Idempotent. GPTModel validates its own copy.
  void validate();
  // A validated copy (the models keep one).
  TransformerConfig validated() const {
    TransformerConfig c = *this;
    c.validate();
    return c;
  }
  void validate_moe();  // part of validate(): the MoE fields
  // The MoE routing rules alone (top-k, groups, score function, load
  // balancing, capacity): validate_moe's, which TopKRouter applies to its
  // config too, so they are written once.
  void check_moe_routing() const;
  void validate_mla();  // part of validate(): the multi-latent attention fields

  // Queries on a validated config.
  int64_t padded_vocab_size() const;
  int64_t heads_per_group() const { return num_attention_heads / num_query_groups; }
  // kv_channels * num_attention_heads, the width linear_proj reads.
  int64_t query_projection_size() const { return kv_channels * num_attention_heads; }
  // Rows of linear_qkv: query, key and value heads.
  int64_t qkv_projection_size() const { return kv_channels * (num_attention_heads + 2 * num_query_groups); }
  // Dims of each head RoPE rotates: int(kv_channels * rotary_percent).
  int64_t rotary_dim() const;
  // Whether layer `layer_number` (from 1) has an MoE MLP.
  bool is_moe_layer(int64_t layer_number) const;
  // Experts held by one expert-parallel rank.
  int64_t num_local_experts() const { return num_moe_experts / expert_model_parallel_size; }

  // "num_layers=2 hidden_size=64 ..." for logs and errors.
  std::string summary() const;
};

// Megatron's _vocab_size_with_padding: the vocabulary rounded up to a multiple
// of make_vocab_size_divisible_by x tensor_model_parallel_size.
int64_t vocab_size_with_padding(int64_t orig_vocab_size, int64_t make_vocab_size_divisible_by,
                                int64_t tensor_model_parallel_size = 1);

// Megatron's num_floating_point_operations: the FLOPs of one training step
// (forward and backward) over batch_size sequences of seq_length tokens,
// counting only the GEMMs (linear layers, causal attention's Q.K^T and P.V
// halved, the output layer; MoE layers their top-k routed experts and the
// shared experts; multi-latent attention its low-rank projections). Divide by the step
// time for achieved FLOP/s (used for TFLOP/s and MFU).
double num_floating_point_operations(const TransformerConfig& config, int64_t batch_size);

}  // namespace qk::transformer
