// GPTModel: Megatron-core's GPT (decoder-only transformer) built from a
// TransformerConfig; GPT-2 and Llama are two configurations of it.
//
//   qk::manual_seed(1234);                          // the init draws from the default generator
//   qk::transformer::GPTModel model(config);         // config: qk/transformer/config.h
//   qk::Tensor logits = model(tokens);               // tokens [B, T] i64 -> [B, T, V_padded] f32
//   qk::Tensor loss = model(tokens, {}, labels, loss_mask);   // Megatron's masked mean
//   loss.backward();
//   model->named_parameters();   // "embedding.word_embeddings.weight", "decoder.layers.0. ...", ...
//
//   model->eval();                                   // generation with a KV cache
//   auto cache = model->make_kv_cache(1, 128);
//   qk::Tensor next = model->forward_step(prompt, cache);   // logits of the new positions
//
// Structure and parameter names (Megatron-core's state dict, local spec):
//   embedding.word_embeddings.weight [V_padded, C]
//   embedding.position_embeddings.weight [max_position_embeddings, C]   (learned_absolute)
//   decoder.layers.{i}.*                                                 (qk/transformer/layers.h)
//   decoder.final_layernorm.weight/.bias
//   output_layer.weight [V_padded, C]          (only when untied; tied reuses the word embedding)
// Parameters are created in f32, initialised as Megatron does (layers.h's
// init_normal / init_scaled_normal, norms at 1 or 0 for zero-centred gamma,
// zero biases) and then converted to config.params_dtype.
#pragma once

#include <vector>

#include "qk/nn/container.h"
#include "qk/nn/embedding.h"
#include "qk/transformer/layers.h"

namespace qk::transformer {

// Word embedding plus learned absolute positions (if configured), then
// dropout (hidden_dropout), as Megatron's LanguageModelEmbedding.
class LanguageModelEmbeddingImpl : public nn::Module {
 public:
  explicit LanguageModelEmbeddingImpl(const TransformerConfig& config);
  // tokens [B, T]; position_ids [B, T] or [T] (undefined: offset .. offset+T-1).
  Tensor forward(const Tensor& tokens, const Tensor& position_ids = Tensor(), int64_t offset = 0);

  nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr};

 private:
  double dropout_;
};
QK_MODULE(LanguageModelEmbedding);

// The decoder stack: layers, then final_layernorm (Megatron's TransformerBlock).
class TransformerBlockImpl : public nn::Module {
 public:
  TransformerBlockImpl(const TransformerConfig& config, const TransformerLayerSpec& spec);
  // rotary: RoPE tables for this call's positions (undefined: none); cache:
  // generation (each layer appends to its slot).
  Tensor forward(const Tensor& hidden, const RotaryTables& rotary = {}, KVCache* cache = nullptr);

  nn::ModuleList layers;
  Norm final_layernorm{nullptr};

 private:
  std::vector<std::shared_ptr<TransformerLayerImpl>> typed_layers_;
};
QK_MODULE(TransformerBlock);

class GPTModelImpl : public nn::Module {
 public:
  // Validates a copy of `config` (ValueError naming the field).
  explicit GPTModelImpl(const TransformerConfig& config, const TransformerLayerSpec& spec = gpt_layer_local_spec());

  // tokens [B, T] i64 (T <= max_position_embeddings with learned positions);
  // position_ids [B, T] feed the learned position embedding only (RoPE uses
  // positions 0..T-1, as Megatron-core's GPTModel). Without labels: logits
  // [B, T, V_padded] in f32. With labels [B, T]: the scalar f32 loss
  // sum(ce * loss_mask) / sum(loss_mask) (loss_mask [B, T], undefined: ones).
  Tensor forward(const Tensor& tokens, const Tensor& position_ids = Tensor(), const Tensor& labels = Tensor(),
                 const Tensor& loss_mask = Tensor());

  // Generation: runs tokens [B, T_new] at positions cache.length() ..
  // cache.length()+T_new-1 against everything cached, appends their keys and
  // values, advances the cache and returns their logits [B, T_new, V_padded]
  // f32. No autograd. Needs eval() when the config has dropout.
  Tensor forward_step(const Tensor& tokens, KVCache& cache);
  // An empty cache sized for this model (dtype = params_dtype).
  KVCache make_kv_cache(int64_t batch_size, int64_t max_length) const;

  // The final hidden states [B, T, C] (after final_layernorm), for callers
  // that compute their own head or loss.
  Tensor hidden_states(const Tensor& tokens, const Tensor& position_ids = Tensor());
  // [B, T, C] -> [B, T, V_padded] f32 logits through the output layer.
  Tensor logits(const Tensor& hidden);
  // output_layer.weight, or the word embedding when tied.
  const Tensor& output_weight() const;

  const TransformerConfig& config() const { return config_; }

  LanguageModelEmbedding embedding{nullptr};
  TransformerBlock decoder{nullptr};
  nn::Linear output_layer{nullptr};  // empty when tied

 private:
  Tensor run(const Tensor& tokens, const Tensor& position_ids, KVCache* cache);
  void check_tokens(const Tensor& tokens, int64_t offset) const;

  TransformerConfig config_;
};
QK_MODULE(GPTModel);

}  // namespace qk::transformer
