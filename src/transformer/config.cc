// TransformerConfig: Megatron's derived defaults and validation rules
// (TransformerConfig.__post_init__ and arguments.py's validate_args), the
// vocabulary padding and the FLOPs count.
#include "qk/transformer/config.h"

#include <cmath>
#include <sstream>

#include "qk/base/error.h"

namespace qk::transformer {

namespace {

template <typename E, size_t N>
E parse_choice(std::string_view s, const char* what, const std::pair<const char*, E> (&choices)[N]) {
  std::string list;
  for (const auto& [name, value] : choices) {
    if (s == name) return value;
    list += list.empty() ? "" : ", ";
    list += name;
  }
  QK_THROW(ValueError, what, ": unknown value '", s, "'; choose one of ", list);
}

constexpr std::pair<const char*, Normalization> kNorms[] = {{"LayerNorm", Normalization::LayerNorm},
                                                           {"RMSNorm", Normalization::RMSNorm}};
constexpr std::pair<const char*, PositionEmbeddingType> kPositions[] = {
    {"learned_absolute", PositionEmbeddingType::learned_absolute},
    {"rope", PositionEmbeddingType::rope},
    {"none", PositionEmbeddingType::none}};
constexpr std::pair<const char*, Activation> kActivations[] = {{"gelu", Activation::gelu},
                                                              {"openai_gelu", Activation::openai_gelu},
                                                              {"silu", Activation::silu},
                                                              {"relu", Activation::relu},
                                                              {"squared_relu", Activation::squared_relu}};

constexpr std::pair<const char*, RecomputeGranularity> kGranularities[] = {
    {"none", RecomputeGranularity::none}, {"full", RecomputeGranularity::full},
    {"selective", RecomputeGranularity::selective}};
constexpr std::pair<const char*, RecomputeMethod> kMethods[] = {
    {"none", RecomputeMethod::none}, {"uniform", RecomputeMethod::uniform}, {"block", RecomputeMethod::block}};

constexpr std::pair<const char*, MoEScoreFunction> kScoreFunctions[] = {{"softmax", MoEScoreFunction::softmax},
                                                                      {"sigmoid", MoEScoreFunction::sigmoid}};
constexpr std::pair<const char*, MoELoadBalancing> kLoadBalancing[] = {
    {"aux_loss", MoELoadBalancing::aux_loss},
    {"seq_aux_loss", MoELoadBalancing::seq_aux_loss},
    {"global_aux_loss", MoELoadBalancing::global_aux_loss},
    {"sinkhorn", MoELoadBalancing::sinkhorn},
    {"none", MoELoadBalancing::none}};
constexpr std::pair<const char*, MoETokenDispatcher> kDispatchers[] = {{"allgather", MoETokenDispatcher::allgather},
                                                                      {"alltoall", MoETokenDispatcher::alltoall}};
constexpr std::pair<const char*, MoETokenDropPolicy> kDropPolicies[] = {{"probs", MoETokenDropPolicy::probs},
                                                                       {"position", MoETokenDropPolicy::position}};

template <typename E, size_t N>
const char* name_of(E v, const std::pair<const char*, E> (&choices)[N]) {
  for (const auto& [name, value] : choices)
    if (value == v) return name;
  return "?";
}

void check_positive(int64_t v, const char* field) {
  QK_CHECK(v > 0, field, " must be a positive integer, got ", v);
}

void check_probability(double p, const char* field) {
  QK_CHECK(p >= 0.0 && p < 1.0, field, " must be in [0, 1), got ", p);
}

}  // namespace

Normalization parse_normalization(std::string_view s) { return parse_choice(s, "normalization", kNorms); }
PositionEmbeddingType parse_position_embedding_type(std::string_view s) {
  return parse_choice(s, "position_embedding_type", kPositions);
}
Activation parse_activation(std::string_view s) { return parse_choice(s, "activation_func", kActivations); }
RecomputeGranularity parse_recompute_granularity(std::string_view s) {
  return parse_choice(s.empty() ? "none" : s, "recompute_granularity", kGranularities);
}
RecomputeMethod parse_recompute_method(std::string_view s) {
  return parse_choice(s.empty() ? "none" : s, "recompute_method", kMethods);
}
MoEScoreFunction parse_moe_score_function(std::string_view s) {
  return parse_choice(s, "moe_router_score_function", kScoreFunctions);
}
MoELoadBalancing parse_moe_load_balancing(std::string_view s) {
  return parse_choice(s, "moe_router_load_balancing_type", kLoadBalancing);
}
MoETokenDispatcher parse_moe_token_dispatcher(std::string_view s) {
  return parse_choice(s, "moe_token_dispatcher_type", kDispatchers);
}
MoETokenDropPolicy parse_moe_token_drop_policy(std::string_view s) {
  return parse_choice(s, "moe_token_drop_policy", kDropPolicies);
}
const char* to_string(MoEScoreFunction f) { return name_of(f, kScoreFunctions); }
const char* to_string(MoELoadBalancing b) { return name_of(b, kLoadBalancing); }
const char* to_string(MoETokenDispatcher d) { return name_of(d, kDispatchers); }
const char* to_string(MoETokenDropPolicy p) { return name_of(p, kDropPolicies); }
const char* to_string(RecomputeGranularity g) { return name_of(g, kGranularities); }
const char* to_string(RecomputeMethod m) { return name_of(m, kMethods); }
const char* to_string(Normalization n) { return name_of(n, kNorms); }
const char* to_string(PositionEmbeddingType p) { return name_of(p, kPositions); }
const char* to_string(Activation a) { return name_of(a, kActivations); }

void TransformerConfig::validate() {
  check_positive(num_layers, "num_layers");
  check_positive(hidden_size, "hidden_size");
  check_positive(num_attention_heads, "num_attention_heads");
  check_positive(tensor_model_parallel_size, "tensor_model_parallel_size");
  QK_CHECK(num_attention_heads % tensor_model_parallel_size == 0, "num_attention_heads (--num-attention-heads ",
           num_attention_heads, ") must be a multiple of tensor_model_parallel_size (--tensor-model-parallel-size ",
           tensor_model_parallel_size, "): each rank holds whole heads");

  if (num_query_groups == 0) num_query_groups = num_attention_heads;
  check_positive(num_query_groups, "num_query_groups");
  QK_CHECK(num_attention_heads % num_query_groups == 0, "num_query_groups (", num_query_groups,
           ") must divide num_attention_heads (", num_attention_heads,
           "): each key/value head serves the same number of query heads");
  QK_CHECK(num_query_groups % tensor_model_parallel_size == 0, "num_query_groups (--num-query-groups ",
           num_query_groups, ") must be a multiple of tensor_model_parallel_size (--tensor-model-parallel-size ",
           tensor_model_parallel_size, "): each rank holds whole query groups of the fused QKV weight");

  if (kv_channels == 0) {
    QK_CHECK(hidden_size % num_attention_heads == 0, "hidden_size (", hidden_size,
             ") must be divisible by num_attention_heads (", num_attention_heads,
             ") unless kv_channels is given");
    kv_channels = hidden_size / num_attention_heads;
  }
  check_positive(kv_channels, "kv_channels");

  if (ffn_hidden_size == 0) {
    // arguments.py: SwiGLU's two input projections keep the parameter count
    // near the 4h MLP's; a multiple of 64.
    ffn_hidden_size = is_swiglu() ? static_cast<int64_t>(4.0 * hidden_size * 2.0 / 3.0 / 64.0) * 64
                                  : 4 * hidden_size;
  }
  check_positive(ffn_hidden_size, "ffn_hidden_size");
  QK_CHECK(ffn_hidden_size % tensor_model_parallel_size == 0, "ffn_hidden_size (--ffn-hidden-size ",
           ffn_hidden_size, ") must be a multiple of tensor_model_parallel_size (--tensor-model-parallel-size ",
           tensor_model_parallel_size, "): linear_fc1/linear_fc2 split the MLP width over the ranks");
  // Megatron's validate_args: sequence parallelism needs tensor parallelism.
  if (tensor_model_parallel_size == 1) sequence_parallel = false;

  check_probability(hidden_dropout, "hidden_dropout");
  check_probability(attention_dropout, "attention_dropout");
  QK_CHECK(layernorm_epsilon > 0, "layernorm_epsilon (--norm-epsilon) must be positive, got ",
           layernorm_epsilon);
  QK_CHECK(init_method_std > 0, "init_method_std must be positive, got ", init_method_std);
  if (softmax_scale) QK_CHECK(*softmax_scale > 0, "softmax_scale must be positive, got ", *softmax_scale);
  if (apply_query_key_layer_scaling) attention_softmax_in_fp32 = true;

  check_positive(seq_length, "seq_length");
  if (max_position_embeddings == 0) max_position_embeddings = seq_length;
  QK_CHECK(max_position_embeddings >= seq_length, "max_position_embeddings (", max_position_embeddings,
           ") must be greater than or equal to seq_length (", seq_length, ")");

  if (position_embedding_type == PositionEmbeddingType::rope) {
    QK_CHECK(rotary_base > 0, "rotary_base must be positive, got ", rotary_base);
    QK_CHECK(rotary_percent > 0 && rotary_percent <= 1.0, "rotary_percent must be in (0, 1], got ",
             rotary_percent);
    const int64_t dim = rotary_dim();
    QK_CHECK(dim >= 2 && dim % 2 == 0, "rotary_percent (", rotary_percent, ") x kv_channels (",
             kv_channels, ") gives ", dim, " rotary dims; RoPE needs a positive even number");
  }
  if (rotary_seq_len_interpolation_factor)
    QK_CHECK(*rotary_seq_len_interpolation_factor > 0,
             "rotary_seq_len_interpolation_factor must be positive, got ",
             *rotary_seq_len_interpolation_factor);

  // TransformerConfig.__post_init__'s recompute rules.
  if (recompute_granularity == RecomputeGranularity::full) {
    QK_CHECK(recompute_method != RecomputeMethod::none, "recompute_granularity full needs recompute_method "
             "(--recompute-method) uniform or block");
    QK_CHECK(recompute_num_layers >= 1 && recompute_num_layers <= num_layers,
             "recompute_num_layers (--recompute-num-layers) must be between 1 and the layers per pipeline rank (",
             num_layers, ") under recompute_granularity full, got ", recompute_num_layers);
  } else if (recompute_granularity == RecomputeGranularity::selective) {
    QK_CHECK(recompute_method == RecomputeMethod::none, "recompute_method ", to_string(recompute_method),
             " is not supported with recompute_granularity selective");
    QK_CHECK(recompute_num_layers == 0, "recompute_num_layers must be unset under recompute_granularity selective, "
             "got ", recompute_num_layers);
  }

  validate_moe();
  validate_mla();

  check_positive(vocab_size, "vocab_size");
  check_positive(make_vocab_size_divisible_by, "make_vocab_size_divisible_by");
  QK_CHECK(params_dtype == DType::f32 || params_dtype == DType::bf16 || params_dtype == DType::f16,
           "params_dtype must be f32, bf16 or f16, got ", dtype_name(params_dtype));
}

void TransformerConfig::validate_moe() {
  check_positive(expert_model_parallel_size, "expert_model_parallel_size");
  QK_CHECK(num_moe_experts >= 0, "num_moe_experts (--num-experts) must not be negative, got ", num_moe_experts);
  if (num_moe_experts == 0) {
    QK_CHECK(expert_model_parallel_size == 1, "expert_model_parallel_size (--expert-model-parallel-size ",
             expert_model_parallel_size, ") needs experts: set --num-experts");
    return;
  }
  if (moe_layer_pattern.empty()) moe_layer_pattern.assign(static_cast<size_t>(num_layers), 1);
  QK_CHECK(static_cast<int64_t>(moe_layer_pattern.size()) == num_layers, "moe_layer_pattern (--moe-layer-freq) has ",
           moe_layer_pattern.size(), " entries, the model has num_layers ", num_layers, " layers");
  for (int64_t v : moe_layer_pattern)
    QK_CHECK(v == 0 || v == 1, "moe_layer_pattern (--moe-layer-freq) entries must be 0 (dense) or 1 (MoE), got ", v);
  if (moe_ffn_hidden_size == 0) moe_ffn_hidden_size = ffn_hidden_size;
  check_positive(moe_ffn_hidden_size, "moe_ffn_hidden_size");
  QK_CHECK(moe_shared_expert_intermediate_size >= 0, "moe_shared_expert_intermediate_size must not be negative, got ",
           moe_shared_expert_intermediate_size);
  check_moe_routing();
}

// The router's rules (TopKRouter checks its config with them too).
void TransformerConfig::check_moe_routing() const {
  QK_CHECK(num_moe_experts >= 1, "num_moe_experts (--num-experts) must be positive for a router, got ",
           num_moe_experts);
  check_positive(expert_model_parallel_size, "expert_model_parallel_size");
  QK_CHECK(num_moe_experts % expert_model_parallel_size == 0, "num_moe_experts (--num-experts ", num_moe_experts,
           ") must be a multiple of expert_model_parallel_size (--expert-model-parallel-size ",
           expert_model_parallel_size, "): each rank holds the same number of experts");
  QK_CHECK(moe_router_topk >= 1 && moe_router_topk <= num_moe_experts, "moe_router_topk (--moe-router-topk ",
           moe_router_topk, ") must be between 1 and num_moe_experts (", num_moe_experts, ")");
  QK_CHECK((moe_router_num_groups == 0) == (moe_router_group_topk == 0), "group-limited routing needs both "
           "moe_router_num_groups (--moe-router-num-groups) and moe_router_group_topk (--moe-router-group-topk), got ",
           moe_router_num_groups, " and ", moe_router_group_topk);
  if (moe_router_num_groups > 0) {
    QK_CHECK(num_moe_experts % moe_router_num_groups == 0, "moe_router_num_groups (", moe_router_num_groups,
             ") must divide num_moe_experts (", num_moe_experts, ")");
    QK_CHECK(moe_router_group_topk <= moe_router_num_groups, "moe_router_group_topk (", moe_router_group_topk,
             ") must not exceed moe_router_num_groups (", moe_router_num_groups, ")");
    QK_CHECK(moe_router_topk <= moe_router_group_topk * (num_moe_experts / moe_router_num_groups),
             "moe_router_topk (", moe_router_topk, ") exceeds the experts in moe_router_group_topk (",
             moe_router_group_topk, ") groups of ", num_moe_experts / moe_router_num_groups);
  }
  QK_CHECK(!moe_router_enable_expert_bias || moe_router_score_function == MoEScoreFunction::sigmoid,
           "moe_router_enable_expert_bias (--moe-router-enable-expert-bias) needs moe_router_score_function sigmoid "
           "(--moe-router-score-function sigmoid): aux-loss-free routing biases sigmoid scores only, as Megatron");
  QK_CHECK(!(moe_router_topk == 1 && moe_router_score_function == MoEScoreFunction::softmax &&
             !moe_router_pre_softmax && moe_router_load_balancing_type != MoELoadBalancing::sinkhorn),
           "moe_router_topk 1 with the softmax score function needs moe_router_pre_softmax "
           "(--moe-router-pre-softmax): a softmax over the one chosen logit is always 1 and trains nothing");
  QK_CHECK(!(moe_router_load_balancing_type == MoELoadBalancing::sinkhorn && moe_aux_loss_coeff > 0),
           "moe_router_load_balancing_type sinkhorn takes no moe_aux_loss_coeff (--moe-aux-loss-coeff ",
           moe_aux_loss_coeff, "): set it to 0");
  if (moe_router_topk_scaling_factor)
    QK_CHECK(*moe_router_topk_scaling_factor > 0, "moe_router_topk_scaling_factor must be positive, got ",
             *moe_router_topk_scaling_factor);
  QK_CHECK(moe_aux_loss_coeff >= 0 && moe_z_loss_coeff >= 0 && moe_input_jitter_eps >= 0 &&
               moe_device_level_aux_loss_coeff >= 0 && moe_comm_aux_loss_coeff >= 0,
           "the MoE loss coefficients and moe_input_jitter_eps must not be negative");
  QK_CHECK(moe_router_bias_update_rate >= 0, "moe_router_bias_update_rate must not be negative, got ",
           moe_router_bias_update_rate);
  if (moe_expert_capacity_factor)
    QK_CHECK(*moe_expert_capacity_factor > 0, "moe_expert_capacity_factor (--moe-expert-capacity-factor) must be "
             "positive, got ", *moe_expert_capacity_factor);
  QK_CHECK(!moe_pad_expert_input_to_capacity || moe_expert_capacity_factor,
           "moe_pad_expert_input_to_capacity (--moe-pad-expert-input-to-capacity) needs "
           "--moe-expert-capacity-factor");
  QK_CHECK(!moe_device_level_capacity || moe_expert_capacity_factor,
           "moe_device_level_capacity (--moe-device-level-capacity) needs --moe-expert-capacity-factor");
}

void TransformerConfig::validate_mla() {
  if (!multi_latent_attention) return;
  QK_CHECK(q_lora_rank >= 0, "q_lora_rank (--q-lora-rank) must not be negative, got ", q_lora_rank);
  check_positive(kv_lora_rank, "kv_lora_rank");
  check_positive(qk_head_dim, "qk_head_dim");
  QK_CHECK(qk_pos_emb_head_dim > 0 && qk_pos_emb_head_dim % 2 == 0, "qk_pos_emb_head_dim (--qk-pos-emb-head-dim) "
           "must be a positive even number (RoPE rotates pairs), got ", qk_pos_emb_head_dim);
  check_positive(v_head_dim, "v_head_dim");
  QK_CHECK(rotary_scaling_factor >= 1.0, "rotary_scaling_factor (--rotary-scaling-factor) must be >= 1, got ",
           rotary_scaling_factor);
  check_positive(original_max_position_embeddings, "original_max_position_embeddings");
  QK_CHECK(beta_fast > 0 && beta_slow > 0, "beta_fast (", beta_fast, ") and beta_slow (", beta_slow,
           ") of YaRN must be positive");
}

bool TransformerConfig::is_moe_layer(int64_t layer_number) const {
  if (num_moe_experts == 0) return false;
  if (moe_layer_pattern.empty()) return true;
  QK_CHECK(layer_number >= 1 && layer_number <= static_cast<int64_t>(moe_layer_pattern.size()),
           "is_moe_layer: layer ", layer_number, " outside 1..", moe_layer_pattern.size());
  return moe_layer_pattern[static_cast<size_t>(layer_number - 1)] != 0;
}

int64_t TransformerConfig::padded_vocab_size() const {
  return vocab_size_with_padding(vocab_size, make_vocab_size_divisible_by, tensor_model_parallel_size);
}

int64_t TransformerConfig::rotary_dim() const {
  // RotaryEmbedding: dim = int(kv_channels * rotary_percent) when rotary_percent < 1.
  if (rotary_percent >= 1.0) return kv_channels;
  return static_cast<int64_t>(static_cast<double>(kv_channels) * rotary_percent);
}

std::string TransformerConfig::summary() const {
  std::ostringstream os;
  os << "num_layers=" << num_layers << " hidden_size=" << hidden_size
     << " num_attention_heads=" << num_attention_heads << " num_query_groups=" << num_query_groups
     << " kv_channels=" << kv_channels << " ffn_hidden_size=" << ffn_hidden_size
     << " normalization=" << to_string(normalization) << " activation_func=" << to_string(activation_func)
     << (gated_linear_unit ? " gated_linear_unit" : "") << (qk_layernorm ? " qk_layernorm" : "")
     << " add_bias_linear=" << add_bias_linear
     << " position_embedding_type=" << to_string(position_embedding_type)
     << " seq_length=" << seq_length << " vocab_size=" << vocab_size
     << " padded_vocab_size=" << padded_vocab_size()
     << " share_embeddings_and_output_weights=" << share_embeddings_and_output_weights
     << " params_dtype=" << dtype_name(params_dtype);
  if (num_moe_experts > 0)
    os << " num_moe_experts=" << num_moe_experts << " moe_router_topk=" << moe_router_topk
       << " moe_ffn_hidden_size=" << moe_ffn_hidden_size
       << " expert_model_parallel_size=" << expert_model_parallel_size;
  if (multi_latent_attention)
    os << " multi_latent_attention q_lora_rank=" << q_lora_rank << " kv_lora_rank=" << kv_lora_rank
       << " qk_head_dim=" << qk_head_dim << " qk_pos_emb_head_dim=" << qk_pos_emb_head_dim
       << " v_head_dim=" << v_head_dim;
  return os.str();
}

int64_t vocab_size_with_padding(int64_t orig_vocab_size, int64_t make_vocab_size_divisible_by,
                                int64_t tensor_model_parallel_size) {
  check_positive(orig_vocab_size, "vocab_size");
  check_positive(make_vocab_size_divisible_by, "make_vocab_size_divisible_by");
  check_positive(tensor_model_parallel_size, "tensor_model_parallel_size");
  const int64_t multiple = make_vocab_size_divisible_by * tensor_model_parallel_size;
  return (orig_vocab_size + multiple - 1) / multiple * multiple;
}

double num_floating_point_operations(const TransformerConfig& config, int64_t batch_size) {
  TransformerConfig c = config;
  c.validate();
  const double h = static_cast<double>(c.hidden_size);
  const double s = static_cast<double>(c.seq_length);
  const double layers = static_cast<double>(c.num_layers);
  // 3 (forward, weight and data gradients) x 2 (GEMMs come in pairs) x 2 (multiply-add).
  const double expansion_factor = 3 * 2 * 2;
  const double gated_linear_multiplier = c.gated_linear_unit ? 1.5 : 1.0;
  // Only the causal half of the attention matrix is computed and multiplied with V.
  const double causal = 0.5;
  double self_attn_term = 0;
  if (c.multi_latent_attention) {
    const double heads = static_cast<double>(c.num_attention_heads);
    const double qk = static_cast<double>(c.qk_head_dim + c.qk_pos_emb_head_dim);
    const double v = static_cast<double>(c.v_head_dim);
    const double q_term = c.q_lora_rank == 0 ? h * heads * qk
                                             : static_cast<double>(c.q_lora_rank) * (h + heads * qk + 1);
    self_attn_term =
        3 * 2 * layers *
        (q_term +
         static_cast<double>(c.kv_lora_rank) * (h + heads * static_cast<double>(c.qk_head_dim + c.v_head_dim) + 1) +
         h * static_cast<double>(c.qk_pos_emb_head_dim) + heads * v * h + s * heads * qk * causal +
         s * heads * v * causal);
  } else {
    const double query_projection_to_hidden_size_ratio = static_cast<double>(c.query_projection_size()) / h;
    self_attn_term = expansion_factor * layers * h * h *
                     ((1.0 + static_cast<double>(c.num_query_groups) / static_cast<double>(c.num_attention_heads) +
                       s / h * causal) *
                      query_projection_to_hidden_size_ratio);
  }
  // DeepSeek-style models mix dense and MoE MLPs; an MoE MLP costs its
  // top-k routed experts plus the shared experts per token.
  double moe_layers = 0;
  for (int64_t l = 1; l <= c.num_layers; ++l) moe_layers += c.is_moe_layer(l) ? 1 : 0;
  const double dense_layers = layers - moe_layers;
  const double mlp_term =
      expansion_factor * h * gated_linear_multiplier *
      (static_cast<double>(c.ffn_hidden_size) * dense_layers +
       (static_cast<double>(c.moe_ffn_hidden_size * c.moe_router_topk) +
        static_cast<double>(c.moe_shared_expert_intermediate_size)) *
           moe_layers);
  const double logit_term = 3.0 * 2.0 * h * static_cast<double>(c.padded_vocab_size());
  return static_cast<double>(batch_size) * s * (mlp_term + self_attn_term + logit_term);
}

}  // namespace qk::transformer
