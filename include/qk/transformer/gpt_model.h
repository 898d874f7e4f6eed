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
//   GPTModel split(config_tp2, tp_group);            // tensor parallel (qk/transformer/tensor_parallel.h)
//   GPTModel moe(config_moe, GPTModelParallel{.tp = tp_group, .ep = ep_group});   // + expert parallel
//
//   model->eval();                                   // generation with a KV cache
//   auto cache = model->make_kv_cache(1, 128);
//   qk::Tensor next = model->forward_step(prompt, cache);   // logits of the new positions
//
// Structure and parameter names (Megatron-core's state dict, local spec):
//   embedding.word_embeddings.weight [V_padded, C]
//   embedding.position_embeddings.weight [max_position_embeddings, C]   (learned_absolute)
//   decoder.layers.{i}.*                                                 (qk/transformer/layers.h)
//   decoder.layers.{i}.self_attention.*  with config.multi_latent_attention: MLA (qk/transformer/mla.h),
//                                        in place of the spec's self_attention
//   decoder.layers.{i}.mlp.*             in config.is_moe_layer(i + 1) layers an MoELayer
//                                        (qk/transformer/moe.h: router, experts.local_experts.{e}, shared_experts)
//   decoder.final_layernorm.weight/.bias
//   output_layer.weight [V_padded, C]          (only when untied; tied reuses the word embedding)
// Parameters are created in f32, initialised as Megatron does (layers.h's
// init_normal / init_scaled_normal, norms at 1 or 0 for zero-centred gamma,
// zero biases) and then converted to config.params_dtype.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qk/dist/process_group.h"
#include "qk/nn/container.h"
#include "qk/nn/embedding.h"
#include "qk/parallel/layers.h"
#include "qk/parallel/sharding.h"
#include "qk/transformer/layer_recompute.h"
#include "qk/transformer/layers.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {

// Word embedding plus learned absolute positions (if configured), then
// dropout (hidden_dropout), as Megatron's LanguageModelEmbedding.
class LanguageModelEmbeddingImpl : public nn::Module {
 public:
  explicit LanguageModelEmbeddingImpl(const TransformerConfig& config);
  // Tensor parallel: the word embedding is vocabulary-parallel over `tp`
  // (registered under the same name); under config.sequence_parallel the
  // output is this rank's sequence shard [B, T/tp, C], its dropout drawn
  // from `sp_dropout_generator`.
  LanguageModelEmbeddingImpl(const TransformerConfig& config, std::shared_ptr<dist::ProcessGroup> tp,
                             Generator* sp_dropout_generator);
  // tokens [B, T]; position_ids [B, T] or [T] (undefined: offset .. offset+T-1).
  Tensor forward(const Tensor& tokens, const Tensor& position_ids = Tensor(), int64_t offset = 0);
  // The word embedding table: whole, or this rank's rows under tensor parallelism.
  const Tensor& word_embedding_weight() const;

  nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr};  // word_embeddings: empty under TP
  parallel::VocabParallelEmbedding vocab_parallel_word_embeddings{nullptr};  // only under TP

 private:
  double dropout_;
  std::shared_ptr<dist::ProcessGroup> tp_;
  bool sequence_parallel_ = false;
  Generator* sp_dropout_generator_ = nullptr;
};
QK_MODULE(LanguageModelEmbedding);

// Called with each part of a model right before it runs (Megatron's forward
// pre-hooks): where the distributed optimizer waits for the all-gather of
// that part's parameters under --overlap-param-gather.
using ForwardPreHook = std::function<void(const nn::Module& part)>;

// The decoder stack: layers, then final_layernorm (Megatron's TransformerBlock).
// In training with gradients, config.recompute_granularity full checkpoints
// layers (qk/autograd/checkpoint.h) as Megatron's _checkpointed_forward:
// uniform runs groups of recompute_num_layers layers as one region each;
// block checkpoints the first recompute_num_layers layers one by one and
// keeps the rest's activations.
class TransformerBlockImpl : public nn::Module {
 public:
  TransformerBlockImpl(const TransformerConfig& config, const TransformerLayerSpec& spec);
  // rotary: RoPE tables for this call's positions (undefined: none); cache:
  // generation (each layer appends to its slot).
  Tensor forward(const Tensor& hidden, const RotaryTables& rotary = {}, KVCache* cache = nullptr);

  nn::ModuleList layers;
  Norm final_layernorm{nullptr};
  // Dropout's generators for every layer (AttentionContext); null: the default one.
  Generator* attention_dropout_generator = nullptr;
  Generator* hidden_dropout_generator = nullptr;
  // Called before each layer and final_layernorm (empty: none).
  ForwardPreHook forward_pre_hook;

 private:
  std::vector<std::shared_ptr<TransformerLayerImpl>> typed_layers_;
  LayerRecompute recompute_;
};
QK_MODULE(TransformerBlock);

// The groups a GPT model is split over (null: none).
struct GPTModelParallel {
  std::shared_ptr<dist::ProcessGroup> tp = nullptr;  // tensor parallel (and sequence parallel)
  std::shared_ptr<dist::ProcessGroup> ep = nullptr;  // expert parallel: the MoE layers' experts
};

// The layer spec GPTModel builds its layers from: `base` (null: the local
// spec, or the tensor-parallel one over groups.tp) with multi-latent
// attention when config.multi_latent_attention and an MoELayer over
// {groups.ep, groups.tp} as the MLP of config.is_moe_layer() layers.
TransformerLayerSpec gpt_layer_spec(const TransformerConfig& config, const GPTModelParallel& groups,
                                    const TransformerLayerSpec* base = nullptr);

class GPTModelImpl : public nn::Module, public parallel::TensorParallelModule {
 public:
  // Validates a copy of `config` (ValueError naming the field).
  explicit GPTModelImpl(const TransformerConfig& config, const TransformerLayerSpec& spec = gpt_layer_local_spec());
  // Tensor parallel over `tp` (Megatron's TP, and SP with
  // config.sequence_parallel): vocabulary-parallel embedding and output
  // layer, the layers of gpt_layer_tensor_parallel_spec, the loss by
  // vocabulary-parallel cross entropy (logits never gathered). Same names,
  // and with the same seed the same full weights, as the unsplit model
  // (qk/transformer/tensor_parallel.h). config.tensor_model_parallel_size
  // must be tp's size; every rank of tp passes the same config and seed.
  GPTModelImpl(const TransformerConfig& config, std::shared_ptr<dist::ProcessGroup> tp);
  // Tensor parallel over groups.tp when given (as above; else the local
  // layers), the MoE layers' experts split over groups.ep
  // (config.expert_model_parallel_size must be its size; every rank of ep
  // passes the same config and seed, and draws every expert, keeping its own).
  GPTModelImpl(const TransformerConfig& config, GPTModelParallel groups);

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
  // last_only: only the last position's logits [B, 1, V_padded] (a prompt
  // step of sampling needs no more, and the output layer is the largest GEMM).
  Tensor forward_step(const Tensor& tokens, KVCache& cache, bool last_only = false);
  // An empty cache sized for this model (dtype = params_dtype); a
  // KVCache::latent for multi-latent attention.
  KVCache make_kv_cache(int64_t batch_size, int64_t max_length) const;

  // The final hidden states [B, T, C] (after final_layernorm), for callers
  // that compute their own head or loss ([B, T/tp, C], this rank's sequence
  // shard, under sequence parallelism).
  Tensor hidden_states(const Tensor& tokens, const Tensor& position_ids = Tensor());
  // hidden_states' output -> [B, T, V_padded] f32 logits through the output
  // layer (gathered over the vocabulary under tensor parallelism).
  Tensor logits(const Tensor& hidden);
  // output_layer.weight, or the word embedding when tied (this rank's
  // vocabulary rows [V_padded/tp, C] under tensor parallelism).
  const Tensor& output_weight() const;

  const TransformerConfig& config() const { return config_; }
  // Runs `hook` before the embedding, each decoder layer, final_layernorm
  // and the untied output layer (every part that owns parameters), in
  // training, evaluation and generation alike. Empty: none.
  void set_forward_pre_hook(ForwardPreHook hook);
  // The tensor-parallel group (null for the unsplit model).
  const std::shared_ptr<dist::ProcessGroup>& tensor_parallel_group() const { return tp_; }
  // The expert-parallel group (null: none).
  const std::shared_ptr<dist::ProcessGroup>& expert_parallel_group() const { return ep_; }
  // The per-rank generator of attention dropout and of sequence-parallel
  // dropout (Megatron's model-parallel RNG: the default generator's seed at
  // construction + 2718 + tp rank); null for the unsplit model. Its state
  // belongs in a checkpoint next to the default generator's.
  Generator* tensor_parallel_generator() const { return tp_rng_.get(); }

  // parallel::TensorParallelModule: the shards are the children's; under
  // sequence parallelism the layer norms' gradients are partial.
  std::vector<std::pair<std::string, parallel::ShardSpec>> shard_specs() const override { return {}; }
  std::vector<std::string> partial_gradient_parameters() const override;

  LanguageModelEmbedding embedding{nullptr};
  TransformerBlock decoder{nullptr};
  nn::Linear output_layer{nullptr};  // empty when tied or tensor parallel
  parallel::ColumnParallelLinear parallel_output_layer{nullptr};  // "output_layer" under TP (untied)

 private:
  void build_local(const TransformerLayerSpec& spec);
  void build_tensor_parallel(const TransformerLayerSpec& spec);
  Tensor run(const Tensor& tokens, const Tensor& position_ids, KVCache* cache);
  void before_output_layer() const;
  void check_tokens(const Tensor& tokens, int64_t offset) const;
  // This rank's vocabulary columns of the logits [B, T, V_padded/tp] f32
  // (the full sequence: gathered first under sequence parallelism).
  Tensor vocab_parallel_logits(const Tensor& hidden);

  TransformerConfig config_;
  std::shared_ptr<dist::ProcessGroup> tp_, ep_;
  std::shared_ptr<Generator> tp_rng_;
  ForwardPreHook forward_pre_hook_;
  // The rotary tables of positions 0..length-1 on the activations' device,
  // made once (Megatron caches its RoPE frequencies): no host work and no
  // copy from the host per forward, so a step can be recorded in a graph.
  std::map<std::pair<std::string, int64_t>, RotaryTables> rotary_cache_;
};
QK_MODULE(GPTModel);

}  // namespace qk::transformer
