// Hugging Face interchange: GPTModel <-> a transformers model folder
// (config.json + model.safetensors, or shards with model.safetensors.index.json)
// for GPT2LMHeadModel and LlamaForCausalLM.
//
//   using namespace qk::transformer;
//   HfModel m = load_hf("gpt2/");                  // config.json decides the layout
//   m.model->train();  ...fine-tune...              // a GPTModel with Megatron-core names
//   export_hf(*m.model, "out/", {.eos_token_ids = m.info.eos_token_ids});
//
//   GPTModel mine(config);                          // GPT-2 or Llama layout
//   export_hf(*mine, "hf/", {.dtype = qk::DType::bf16});
//
// Layouts (hf_architecture_for decides from the config):
//   gpt2:  learned positions, LayerNorm, non-gated GELU/ReLU/SiLU MLP, biases,
//          multi-head attention. Tensors transformer.wte/wpe, transformer.h.{i}.
//          ln_1/attn.c_attn/attn.c_proj/ln_2/mlp.c_fc/mlp.c_proj, transformer.ln_f,
//          lm_head only when untied. GPT-2's Conv1D stores weights [in, out], and
//          c_attn's output columns are q | k | v (all heads of each), where
//          Megatron's linear_qkv rows are grouped per head.
//   llama: RoPE, RMSNorm, SwiGLU, no biases, grouped-query attention.
//          model.embed_tokens, model.layers.{i}.input_layernorm,
//          self_attn.q_proj/k_proj/v_proj/o_proj, post_attention_layernorm,
//          mlp.gate_proj/up_proj/down_proj, model.norm, lm_head.
// Anything a layout cannot hold (qk-layernorm, partial rotary, a rope_scaling
// type other than linear, Llama attention biases, ...) is a ValueError naming
// the field, in both directions.
//
// Vocabulary: Hugging Face tables have config.json's vocab_size rows; ours
// have the padded size (make_vocab_size_divisible_by). Export drops the
// padding rows; import appends them by replicating the last row, as
// Megatron's checkpoint converter (tools/checkpoint) does. Zero-centred norm
// weights (--apply-layernorm-1p) are exported as 1 + weight.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qk/nn/safetensors.h"
#include "qk/transformer/config.h"
#include "qk/transformer/gpt_model.h"

namespace qk::transformer {

enum class HfArchitecture { gpt2, llama };
// "gpt2" / "llama" (config.json's model_type).
const char* to_string(HfArchitecture a);

// The layout that represents `config` (validated copy); throws ValueError
// naming the first field neither layout can hold.
HfArchitecture hf_architecture_for(const TransformerConfig& config);

// What config.json says besides the architecture.
struct HfModelInfo {
  HfArchitecture architecture = HfArchitecture::gpt2;
  std::vector<int64_t> eos_token_ids;  // eos_token_id: one id or a list; empty when null/absent
  int64_t bos_token_id = -1;           // -1 when null/absent
  DType torch_dtype = DType::f32;      // the dtype the weights were saved in
};

struct HfImportOptions {
  // Parameter dtype of the model (unset: config.json's torch_dtype, f32 when absent).
  std::optional<DType> dtype = {};
  // Megatron's --make-vocab-size-divisible-by for the padded tables.
  int64_t make_vocab_size_divisible_by = 128;
  // Training sequence length (unset: max_position_embeddings / n_positions).
  std::optional<int64_t> seq_length = {};
};

struct HfConfig {
  TransformerConfig config;  // validated
  HfModelInfo info;
};
// config.json's text -> our config; `source` names the file in errors.
HfConfig parse_hf_config(const std::string& json_text, const std::string& source, const HfImportOptions& o = {});

struct HfExportOptions {
  // dtype of the written tensors (unset: the model's params_dtype).
  std::optional<DType> dtype = {};
  // Split model.safetensors into model-0000i-of-0000n.safetensors of at most
  // this many bytes (one tensor may exceed it) plus the index; 0: one file.
  int64_t max_shard_bytes = 0;
  // config.json's eos_token_id (one id, or a list) and bos_token_id; null when unset.
  std::vector<int64_t> eos_token_ids = {};
  int64_t bos_token_id = -1;
};
// config.json as transformers writes it for the layout of `config`.
std::string hf_config_json(const TransformerConfig& config, const HfExportOptions& o = {});

// State-dict conversion (no files): Megatron-core names as GPTModel's
// state_dict(), tensors [padded vocab, ...] <-> Hugging Face names and shapes.
// to_hf converts to `dtype`; from_hf converts to config.params_dtype and
// throws ValueError naming any missing, unexpected or mis-shaped tensor.
nn::TensorMap megatron_to_hf(const nn::TensorMap& state, const TransformerConfig& config, DType dtype);
nn::TensorMap hf_to_megatron(const nn::TensorMap& hf, const TransformerConfig& config, HfArchitecture arch,
                             const std::string& source);

// Writes config.json and the weights into `dir` (created if missing; stale
// weight files of the other kind, single or sharded, are removed so that
// transformers cannot pick them up). Every file is written atomically.
void export_hf(const GPTModelImpl& model, const std::string& dir, const HfExportOptions& o = {});

// The weights of a folder by Hugging Face name: model.safetensors, or every
// shard model.safetensors.index.json lists (each listed tensor must be in its shard).
nn::TensorMap read_hf_weights(const std::string& dir);

struct HfModel {
  TransformerConfig config;
  HfModelInfo info;
  GPTModel model{nullptr};  // in train() mode, as a new module
};
// Reads config.json and the weights of a Hugging Face folder. The default
// generator's state is left as it was (building the model draws its init).
HfModel load_hf(const std::string& dir, const HfImportOptions& o = {});
// Loads a folder's weights into an existing model whose config matches the
// folder's (e.g. one built with a parallel layer spec).
void load_hf_weights(GPTModelImpl& model, const std::string& dir);

// True when `dir` holds a config.json (a Hugging Face model folder).
bool is_hf_folder(const std::string& dir);

}  // namespace qk::transformer
