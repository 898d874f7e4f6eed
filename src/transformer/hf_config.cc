// config.json <-> TransformerConfig for GPT2LMHeadModel and LlamaForCausalLM.
// Missing keys take transformers' GPT2Config / LlamaConfig defaults, as
// from_pretrained does; keys that change the architecture in ways GPTModel
// cannot follow are refused by name.
#include <cmath>
#include <nlohmann/json.hpp>

#include "qk/base/error.h"
#include "qk/transformer/hf_checkpoint.h"

namespace qk::transformer {

namespace {

using json = nlohmann::json;

// Typed reads of config.json keys with transformers' defaults; a null value
// counts as absent (transformers writes null for "use the default").
class Keys {
 public:
  Keys(const json& j, const std::string& source) : j_(j), source_(source) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  int64_t integer(const char* key, int64_t def) const {
    if (!has(key)) return def;
    QK_CHECK(j_[key].is_number_integer(), source_, ": '", key, "' must be an integer, got ", j_[key].dump());
    return j_[key].get<int64_t>();
  }
  double number(const char* key, double def) const {
    if (!has(key)) return def;
    QK_CHECK(j_[key].is_number(), source_, ": '", key, "' must be a number, got ", j_[key].dump());
    return j_[key].get<double>();
  }
  bool boolean(const char* key, bool def) const {
    if (!has(key)) return def;
    QK_CHECK(j_[key].is_boolean(), source_, ": '", key, "' must be true or false, got ", j_[key].dump());
    return j_[key].get<bool>();
  }
  std::string string(const char* key, const std::string& def) const {
    if (!has(key)) return def;
    QK_CHECK(j_[key].is_string(), source_, ": '", key, "' must be a string, got ", j_[key].dump());
    return j_[key].get<std::string>();
  }
  // One id or a list of ids (Llama 3 lists several eos ids).
  std::vector<int64_t> ids(const char* key) const {
    if (!has(key)) return {};
    const json& v = j_[key];
    if (v.is_number_integer()) return {v.get<int64_t>()};
    QK_CHECK(v.is_array(), source_, ": '", key, "' must be a token id or a list of ids, got ", v.dump());
    std::vector<int64_t> out;
    for (const json& e : v) {
      QK_CHECK(e.is_number_integer(), source_, ": '", key, "' must list integer ids, got ", v.dump());
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  // Refuses a key whose value is not `expected`.
  void require(const char* key, bool value, bool expected, const char* why) const {
    QK_CHECK(value == expected, source_, ": '", key, "' = ", value ? "true" : "false", " is not supported: ", why);
  }
  const json& raw(const char* key) const { return j_[key]; }
  const std::string& source() const { return source_; }

 private:
  const json& j_;
  const std::string& source_;
};

DType parse_torch_dtype(const std::string& s, const std::string& source) {
  if (s == "float32") return DType::f32;
  if (s == "bfloat16") return DType::bf16;
  if (s == "float16") return DType::f16;
  QK_THROW(ValueError, source, ": torch_dtype '", s, "' is not supported; expected float32, bfloat16 or float16");
}

const char* torch_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    default: QK_THROW(ValueError, "Hugging Face export: dtype ", dtype_name(t), " is not one of f32, bf16, f16");
  }
}

// transformers' ACT2FN names GPT-2 may use, as our activations.
Activation parse_gpt2_activation(const std::string& s, const std::string& source) {
  // gelu_new, gelu_pytorch_tanh and gelu_fast are the same tanh formula.
  if (s == "gelu_new" || s == "gelu_pytorch_tanh" || s == "gelu_fast") return Activation::openai_gelu;
  if (s == "gelu") return Activation::gelu;
  if (s == "relu") return Activation::relu;
  if (s == "silu" || s == "swish") return Activation::silu;
  QK_THROW(ValueError, source, ": activation_function '", s,
           "' is not supported; qk has gelu_new (gelu_pytorch_tanh, gelu_fast), gelu, relu and silu");
}

const char* gpt2_activation_name(Activation a) {
  switch (a) {
    case Activation::openai_gelu: return "gelu_new";
    case Activation::gelu: return "gelu";
    case Activation::relu: return "relu";
    case Activation::silu: return "silu";
    default: return nullptr;
  }
}

HfArchitecture parse_architecture(const Keys& k) {
  std::string type = k.string("model_type", "");
  if (type.empty() && k.has("architectures") && k.raw("architectures").is_array() && !k.raw("architectures").empty() &&
      k.raw("architectures")[0].is_string()) {
    const std::string arch = k.raw("architectures")[0].get<std::string>();
    if (arch.rfind("GPT2", 0) == 0) type = "gpt2";
    if (arch.rfind("Llama", 0) == 0) type = "llama";
  }
  if (type == "gpt2") return HfArchitecture::gpt2;
  if (type == "llama") return HfArchitecture::llama;
  QK_THROW(ValueError, k.source(), ": model_type '", type,
           "' is not supported; qk reads gpt2 (GPT2LMHeadModel) and llama (LlamaForCausalLM)");
}

void read_gpt2(const Keys& k, TransformerConfig& c) {
  c.vocab_size = k.integer("vocab_size", 50257);
  c.hidden_size = k.integer("n_embd", 768);
  c.num_layers = k.integer("n_layer", 12);
  c.num_attention_heads = k.integer("n_head", 12);
  c.num_query_groups = c.num_attention_heads;
  c.ffn_hidden_size = k.integer("n_inner", 4 * c.hidden_size);
  c.max_position_embeddings = k.integer("n_positions", 1024);
  c.activation_func = parse_gpt2_activation(k.string("activation_function", "gelu_new"), k.source());
  c.layernorm_epsilon = k.number("layer_norm_epsilon", 1e-5);
  // Megatron has one dropout for the embedding and the residual branches.
  c.hidden_dropout = k.number("resid_pdrop", 0.1);
  c.attention_dropout = k.number("attn_pdrop", 0.1);
  c.init_method_std = k.number("initializer_range", 0.02);
  c.share_embeddings_and_output_weights = k.boolean("tie_word_embeddings", true);
  // scale_attn_weights=false: raw Q.K^T, i.e. a softmax scale of 1.
  if (!k.boolean("scale_attn_weights", true)) c.softmax_scale = 1.0;
  k.require("scale_attn_by_inverse_layer_idx", k.boolean("scale_attn_by_inverse_layer_idx", false), false,
            "GPTModel does not scale attention by 1/layer");
  k.require("add_cross_attention", k.boolean("add_cross_attention", false), false,
            "GPTModel is decoder-only (no cross-attention)");
  c.position_embedding_type = PositionEmbeddingType::learned_absolute;
  c.normalization = Normalization::LayerNorm;
  c.add_bias_linear = true;
  c.gated_linear_unit = false;
}

void read_llama(const Keys& k, TransformerConfig& c) {
  c.vocab_size = k.integer("vocab_size", 32000);
  c.hidden_size = k.integer("hidden_size", 4096);
  c.ffn_hidden_size = k.integer("intermediate_size", 11008);
  c.num_layers = k.integer("num_hidden_layers", 32);
  c.num_attention_heads = k.integer("num_attention_heads", 32);
  c.num_query_groups = k.integer("num_key_value_heads", c.num_attention_heads);
  QK_CHECK(c.num_attention_heads > 0, k.source(), ": num_attention_heads must be positive");
  c.kv_channels = k.integer("head_dim", c.hidden_size / c.num_attention_heads);
  const std::string act = k.string("hidden_act", "silu");
  QK_CHECK(act == "silu" || act == "swish", k.source(), ": hidden_act '", act,
           "' is not supported; the Llama layout is SwiGLU (silu)");
  c.max_position_embeddings = k.integer("max_position_embeddings", 2048);
  c.layernorm_epsilon = k.number("rms_norm_eps", 1e-6);
  c.share_embeddings_and_output_weights = k.boolean("tie_word_embeddings", false);
  c.rotary_base = k.number("rope_theta", 10000.0);
  c.attention_dropout = k.number("attention_dropout", 0.0);
  c.hidden_dropout = 0.0;
  c.init_method_std = k.number("initializer_range", 0.02);
  k.require("attention_bias", k.boolean("attention_bias", false), false,
            "GPTModel's Llama layout has no q/k/v/o projection biases");
  k.require("mlp_bias", k.boolean("mlp_bias", false), false, "GPTModel's Llama layout has no MLP biases");
  const double partial = k.number("partial_rotary_factor", 1.0);
  QK_CHECK(partial == 1.0, k.source(), ": partial_rotary_factor ", partial, " is not supported by LlamaForCausalLM");
  if (k.has("rope_scaling")) {
    const json& s = k.raw("rope_scaling");
    QK_CHECK(s.is_object(), k.source(), ": rope_scaling must be an object, got ", s.dump());
    const Keys rs(s, k.source());
    const std::string type = rs.string("rope_type", rs.string("type", "default"));
    if (type == "linear") {
      const double factor = rs.number("factor", 0.0);
      QK_CHECK(factor > 0, k.source(), ": rope_scaling 'linear' needs a positive factor, got ", s.dump());
      c.rotary_seq_len_interpolation_factor = factor;
    } else {
      QK_CHECK(type == "default", k.source(), ": rope_scaling type '", type,
               "' is not supported; qk has linear RoPE interpolation only (rope_scaling {\"type\": \"linear\"})");
    }
  }
  c.position_embedding_type = PositionEmbeddingType::rope;
  c.normalization = Normalization::RMSNorm;
  c.set_swiglu();
  c.add_bias_linear = false;
}

}  // namespace

const char* to_string(HfArchitecture a) { return a == HfArchitecture::gpt2 ? "gpt2" : "llama"; }

HfArchitecture hf_architecture_for(const TransformerConfig& config) {
  TransformerConfig c = config;
  c.validate();
  const char* where = "Hugging Face export";
  QK_CHECK(!c.qk_layernorm, where, ": qk_layernorm has no place in GPT2LMHeadModel or LlamaForCausalLM");
  QK_CHECK(!c.apply_residual_connection_post_layernorm, where,
           ": apply_residual_connection_post_layernorm has no place in GPT2LMHeadModel or LlamaForCausalLM");
  const double default_scale = 1.0 / std::sqrt(static_cast<double>(c.kv_channels));
  const bool default_softmax_scale =
      !c.softmax_scale || std::fabs(*c.softmax_scale - default_scale) <= 1e-12 * default_scale;
  switch (c.position_embedding_type) {
    case PositionEmbeddingType::learned_absolute:
      // GPT2LMHeadModel.
      QK_CHECK(c.normalization == Normalization::LayerNorm, where,
               ": learned positions mean the GPT-2 layout, which needs normalization=LayerNorm, got ",
               to_string(c.normalization));
      QK_CHECK(!c.gated_linear_unit, where, ": the GPT-2 layout has no gated_linear_unit (SwiGLU)");
      QK_CHECK(gpt2_activation_name(c.activation_func) != nullptr, where, ": activation_func ",
               to_string(c.activation_func), " has no GPT-2 activation_function");
      QK_CHECK(c.add_bias_linear, where, ": the GPT-2 layout needs add_bias_linear (Conv1D always has a bias)");
      QK_CHECK(c.num_query_groups == c.num_attention_heads, where, ": the GPT-2 layout has no grouped-query ",
               "attention (num_query_groups ", c.num_query_groups, " != num_attention_heads ", c.num_attention_heads,
               ")");
      QK_CHECK(c.kv_channels * c.num_attention_heads == c.hidden_size, where, ": the GPT-2 layout needs kv_channels ",
               "x num_attention_heads == hidden_size, got ", c.kv_channels, " x ", c.num_attention_heads);
      QK_CHECK(default_softmax_scale || *c.softmax_scale == 1.0, where, ": softmax_scale ", *c.softmax_scale,
               " is neither 1/sqrt(kv_channels) nor 1 (GPT-2's scale_attn_weights)");
      return HfArchitecture::gpt2;
    case PositionEmbeddingType::rope:
      // LlamaForCausalLM.
      QK_CHECK(c.normalization == Normalization::RMSNorm, where,
               ": RoPE means the Llama layout, which needs normalization=RMSNorm, got ", to_string(c.normalization));
      QK_CHECK(c.is_swiglu(), where, ": the Llama layout needs SwiGLU (gated_linear_unit with silu), got ",
               c.gated_linear_unit ? "gated " : "", to_string(c.activation_func));
      QK_CHECK(!c.add_bias_linear && !c.add_qkv_bias, where,
               ": the Llama layout has no linear biases (add_bias_linear / add_qkv_bias must be false)");
      QK_CHECK(c.rotary_percent == 1.0, where, ": rotary_percent ", c.rotary_percent,
               " (partial RoPE) is not supported by LlamaForCausalLM");
      QK_CHECK(default_softmax_scale, where, ": softmax_scale ", *c.softmax_scale,
               " differs from LlamaForCausalLM's 1/sqrt(head_dim)");
      return HfArchitecture::llama;
    case PositionEmbeddingType::none: break;
  }
  QK_THROW(ValueError, where, ": position_embedding_type none has no Hugging Face layout (GPT-2 needs ",
           "learned_absolute, Llama rope)");
}

HfConfig parse_hf_config(const std::string& json_text, const std::string& source, const HfImportOptions& o) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    QK_THROW(ValueError, source, ": not valid JSON: ", e.what());
  }
  QK_CHECK(j.is_object(), source, ": expected a JSON object");
  const Keys k(j, source);
  QK_CHECK(!k.has("quantization_config"), source,
           ": quantized weights (quantization_config) are not supported; use a float16/bfloat16/float32 model");
  HfConfig out;
  out.info.architecture = parse_architecture(k);
  TransformerConfig& c = out.config;
  if (out.info.architecture == HfArchitecture::gpt2)
    read_gpt2(k, c);
  else
    read_llama(k, c);
  // Newer transformers write "dtype", older "torch_dtype".
  const std::string dtype = k.string("torch_dtype", k.string("dtype", "float32"));
  out.info.torch_dtype = parse_torch_dtype(dtype, source);
  out.info.eos_token_ids = k.ids("eos_token_id");
  const std::vector<int64_t> bos = k.ids("bos_token_id");
  out.info.bos_token_id = bos.empty() ? -1 : bos.front();
  c.seq_length = o.seq_length.value_or(c.max_position_embeddings);
  c.make_vocab_size_divisible_by = o.make_vocab_size_divisible_by;
  c.params_dtype = o.dtype.value_or(out.info.torch_dtype);
  try {
    c.validate();
  } catch (const ValueError& e) {
    QK_THROW(ValueError, source, ": ", e.message());
  }
  return out;
}

std::string hf_config_json(const TransformerConfig& config, const HfExportOptions& o) {
  TransformerConfig c = config;
  c.validate();
  const HfArchitecture arch = hf_architecture_for(c);
  json j;
  j["model_type"] = to_string(arch);
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.share_embeddings_and_output_weights;
  j["torch_dtype"] = torch_dtype_name(o.dtype.value_or(c.params_dtype));
  j["initializer_range"] = c.init_method_std;
  j["use_cache"] = true;
  if (o.eos_token_ids.empty())
    j["eos_token_id"] = nullptr;
  else if (o.eos_token_ids.size() == 1)
    j["eos_token_id"] = o.eos_token_ids.front();
  else
    j["eos_token_id"] = o.eos_token_ids;
  j["bos_token_id"] = o.bos_token_id >= 0 ? json(o.bos_token_id) : json(nullptr);
  if (arch == HfArchitecture::gpt2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["n_embd"] = c.hidden_size;
    j["n_layer"] = c.num_layers;
    j["n_head"] = c.num_attention_heads;
    j["n_inner"] = c.ffn_hidden_size;
    j["n_positions"] = c.max_position_embeddings;
    j["n_ctx"] = c.max_position_embeddings;
    j["activation_function"] = gpt2_activation_name(c.activation_func);
    j["layer_norm_epsilon"] = c.layernorm_epsilon;
    j["resid_pdrop"] = c.hidden_dropout;
    j["embd_pdrop"] = c.hidden_dropout;
    j["attn_pdrop"] = c.attention_dropout;
    j["scale_attn_weights"] = !(c.softmax_scale && *c.softmax_scale == 1.0);
    j["scale_attn_by_inverse_layer_idx"] = false;
    j["reorder_and_upcast_attn"] = false;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.ffn_hidden_size;
    j["num_hidden_layers"] = c.num_layers;
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_key_value_heads"] = c.num_query_groups;
    j["head_dim"] = c.kv_channels;
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["rms_norm_eps"] = c.layernorm_epsilon;
    j["rope_theta"] = c.rotary_base;
    if (c.rotary_seq_len_interpolation_factor)
      j["rope_scaling"] = {
          {"type", "linear"}, {"rope_type", "linear"}, {"factor", *c.rotary_seq_len_interpolation_factor}};
    else
      j["rope_scaling"] = nullptr;
    j["attention_bias"] = false;
    j["attention_dropout"] = c.attention_dropout;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
  return j.dump(2) + "\n";
}

}  // namespace qk::transformer
