// `qk pretrain-gpt --load HF_FOLDER`: fine-tuning from Hugging Face weights.
// The model is built from the flags, as always; the folder's config.json must
// describe the same model (each difference named by flag and field), then its
// weights replace the initial ones.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/transformer/hf_checkpoint.h"

namespace qk::recipes {

namespace {

using transformer::Activation;
using transformer::HfArchitecture;
using transformer::PositionEmbeddingType;
using transformer::TransformerConfig;

std::string config_path(const std::string& dir) { return (std::filesystem::path(dir) / "config.json").string(); }

transformer::HfConfig read_hf_config(const TransformerConfig& ours, const std::string& dir) {
  const std::string path = config_path(dir);
  QK_CHECK_AS(IoError, file_exists(path), "'", dir, "' has no config.json; is it a Hugging Face model folder?");
  return transformer::parse_hf_config(read_file(path), path,
                                      {.dtype = ours.params_dtype,
                                       .make_vocab_size_divisible_by = ours.make_vocab_size_divisible_by,
                                       .seq_length = ours.seq_length});
}

bool same_number(double x, double y) { return std::fabs(x - y) <= 1e-9 * std::max(std::fabs(x), std::fabs(y)); }

// What the flags chose for the MLP, in flag words.
std::string mlp_flags(const TransformerConfig& c) {
  if (c.is_swiglu()) return "--swiglu";
  if (c.activation_func == Activation::openai_gelu) return "--openai-gelu";
  return "neither --swiglu nor --openai-gelu (Megatron's erf GeLU MLP)";
}

// The folder's MLP in config.json words, with the flag that builds it.
std::string mlp_field(const TransformerConfig& t, bool gpt2) {
  if (!gpt2) return "hidden_act = silu (Llama's gated MLP: --swiglu)";
  switch (t.activation_func) {
    case Activation::openai_gelu: return "activation_function = gelu_new (--openai-gelu)";
    case Activation::gelu: return "activation_function = gelu (the default: neither --swiglu nor --openai-gelu)";
    default:
      return fmt::format("activation_function = {} (no Megatron flag builds it)",
                         transformer::to_string(t.activation_func));
  }
}

}  // namespace

void check_flags_match_hf_config(const MegatronArgs& a, const TransformerConfig& from_flags, const std::string& dir) {
  TransformerConfig ours = from_flags;
  ours.validate();
  const transformer::HfConfig hf = read_hf_config(ours, dir);
  const TransformerConfig& t = hf.config;
  const bool gpt2 = hf.info.architecture == HfArchitecture::gpt2;
  auto name = [&](const char* gpt2_field, const char* llama_field) { return gpt2 ? gpt2_field : llama_field; };

  std::vector<std::string> bad;
  auto expect = [&](bool same, const std::string& flags, const std::string& field) {
    if (!same) bad.push_back(fmt::format("{}, but config.json has {}", flags, field));
  };
  auto expect_size = [&](int64_t mine, int64_t theirs, const char* flag, const std::string& field) {
    expect(mine == theirs, fmt::format("{} {}", flag, mine), fmt::format("{} = {}", field, theirs));
  };

  const char* layout = gpt2 ? "model_type = gpt2 (learned positions: --position-embedding-type learned_absolute)"
                            : "model_type = llama (RoPE: --position-embedding-type rope)";
  expect(ours.position_embedding_type == t.position_embedding_type,
         fmt::format("--position-embedding-type {}", transformer::to_string(ours.position_embedding_type)), layout);
  expect(ours.normalization == t.normalization,
         fmt::format("--normalization {}", transformer::to_string(ours.normalization)),
         fmt::format("model_type = {} ({})", gpt2 ? "gpt2" : "llama", transformer::to_string(t.normalization)));
  expect(ours.gated_linear_unit == t.gated_linear_unit && ours.activation_func == t.activation_func, mlp_flags(ours),
         mlp_field(t, gpt2));
  expect_size(ours.num_layers, t.num_layers, "--num-layers", name("n_layer", "num_hidden_layers"));
  expect_size(ours.hidden_size, t.hidden_size, "--hidden-size", name("n_embd", "hidden_size"));
  expect_size(ours.num_attention_heads, t.num_attention_heads, "--num-attention-heads",
              name("n_head", "num_attention_heads"));
  // Head groups and head size follow from the sizes above unless given: report them on their own only.
  const bool heads_match = ours.hidden_size == t.hidden_size && ours.num_attention_heads == t.num_attention_heads;
  expect(!heads_match || ours.num_query_groups == t.num_query_groups,
         a.group_query_attention
             ? fmt::format("--num-query-groups {}", ours.num_query_groups)
             : fmt::format("no --group-query-attention ({} key/value heads)", ours.num_query_groups),
         gpt2 ? fmt::format("n_head = {} (GPT-2 has no grouped-query attention)", t.num_query_groups)
              : fmt::format("num_key_value_heads = {}", t.num_query_groups));
  expect(!heads_match || ours.kv_channels == t.kv_channels,
         fmt::format("--kv-channels {}", ours.kv_channels),
         fmt::format("{} = {}", name("n_embd / n_head", "head_dim"), t.kv_channels));
  expect(ours.ffn_hidden_size == t.ffn_hidden_size,
         fmt::format("--ffn-hidden-size {}", ours.ffn_hidden_size),
         fmt::format("{} = {}", name("n_inner", "intermediate_size"), t.ffn_hidden_size));
  expect(ours.add_bias_linear == t.add_bias_linear,
         ours.add_bias_linear ? "linear biases (no --disable-bias-linear)" : "--disable-bias-linear",
         gpt2 ? "model_type = gpt2 (its Conv1D layers have biases: drop --disable-bias-linear)"
              : "attention_bias = false, mlp_bias = false (--disable-bias-linear)");
  expect(ours.add_qkv_bias == t.add_qkv_bias, "--add-qkv-bias", name("no separate qkv bias", "attention_bias = false"));
  expect(same_number(ours.layernorm_epsilon, t.layernorm_epsilon),
         fmt::format("--norm-epsilon {}", ours.layernorm_epsilon),
         fmt::format("{} = {}", name("layer_norm_epsilon", "rms_norm_eps"), t.layernorm_epsilon));
  expect(ours.share_embeddings_and_output_weights == t.share_embeddings_and_output_weights,
         ours.share_embeddings_and_output_weights ? "tied output weights (no --untie-embeddings-and-output-weights)"
                                                  : "--untie-embeddings-and-output-weights",
         fmt::format("tie_word_embeddings = {}", t.share_embeddings_and_output_weights));
  expect(ours.vocab_size == t.vocab_size,
         fmt::format("the tokenizer (--tokenizer-type {}) has {} ids", a.tokenizer_type.value_or("?"), ours.vocab_size),
         fmt::format("vocab_size = {}", t.vocab_size));
  if (t.position_embedding_type == PositionEmbeddingType::learned_absolute)
    expect_size(ours.max_position_embeddings, t.max_position_embeddings, "--max-position-embeddings", "n_positions");
  if (t.position_embedding_type == PositionEmbeddingType::rope) {
    expect(same_number(ours.rotary_base, t.rotary_base), fmt::format("--rotary-base {}", ours.rotary_base),
           fmt::format("rope_theta = {}", t.rotary_base));
    expect(ours.rotary_percent == 1.0, fmt::format("--rotary-percent {}", ours.rotary_percent),
           "no partial_rotary_factor (LlamaForCausalLM rotates whole heads)");
    const auto mine = ours.rotary_seq_len_interpolation_factor, theirs = t.rotary_seq_len_interpolation_factor;
    expect(mine.has_value() == theirs.has_value() && (!mine || same_number(*mine, *theirs)),
           mine ? fmt::format("--rotary-seq-len-interpolation-factor {}", *mine)
                : std::string("no --rotary-seq-len-interpolation-factor"),
           theirs ? fmt::format("rope_scaling = linear, factor {}", *theirs) : std::string("rope_scaling = null"));
  }
  expect(!ours.qk_layernorm, "--qk-layernorm", "no query/key norms (neither GPT-2 nor Llama has them)");
  expect(!ours.apply_residual_connection_post_layernorm, "--apply-residual-connection-post-layernorm",
         "pre-norm residuals (both GPT-2 and Llama)");
  expect(ours.softmax_scale.has_value() == t.softmax_scale.has_value(),
         "Megatron's 1/sqrt(kv-channels) attention scale (no flag changes it)", "scale_attn_weights = false");

  if (bad.empty()) return;
  QK_THROW(ValueError, "--load '", dir, "' is a Hugging Face folder (", transformer::to_string(hf.info.architecture),
           "), and fine-tuning from it needs the flags to build its model; they differ:\n  ",
           fmt::format("{}", fmt::join(bad, "\n  ")));
}

std::string load_hf_weights_for_finetune(const MegatronArgs& a, transformer::GPTModelImpl& model,
                                         const std::string& dir) {
  check_flags_match_hf_config(a, model.config(), dir);
  const transformer::HfConfig hf = read_hf_config(model.config(), dir);
  transformer::load_hf_weights(model, dir);
  const TransformerConfig& c = model.config();
  return fmt::format(
      "> loaded the weights of the Hugging Face folder {} ({}, {}, vocabulary {} padded to {}{}); fine-tuning from "
      "them: iteration 0, a fresh optimizer and learning-rate schedule (as --finetune)",
      dir, transformer::to_string(hf.info.architecture), dtype_name(hf.info.torch_dtype), c.vocab_size,
      c.padded_vocab_size(), c.padded_vocab_size() > c.vocab_size ? " by repeating its last row" : "");
}

}  // namespace qk::recipes
