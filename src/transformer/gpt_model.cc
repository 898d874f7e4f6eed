// GPTModel: embedding -> decoder -> output layer / loss, and the KV-cache
// inference path.
#include "qk/transformer/gpt_model.h"

#include <algorithm>

#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/parallel/cross_entropy.h"
#include "qk/parallel/mappings.h"
#include "qk/transformer/mla.h"
#include "qk/transformer/moe.h"
#include "qk/transformer/tensor_parallel.h"

namespace qk::transformer {

namespace {

// config.multi_latent_attention: every layer's self-attention is MLA (as
// Megatron's layer specs pick MLASelfAttention), the spec's MLP kept.
TransformerLayerSpec with_attention_of(const TransformerConfig& c, const TransformerLayerSpec& spec,
                                       const std::shared_ptr<dist::ProcessGroup>& tp) {
  if (!c.multi_latent_attention) return spec;
  return tp ? gpt_layer_mla_tensor_parallel_spec(tp, spec) : gpt_layer_mla_local_spec(spec);
}

}  // namespace

// ---- LanguageModelEmbedding ----

LanguageModelEmbeddingImpl::LanguageModelEmbeddingImpl(const TransformerConfig& c) : dropout_(c.hidden_dropout) {
  word_embeddings = register_module("word_embeddings", nn::Embedding(c.padded_vocab_size(), c.hidden_size));
  init_normal(word_embeddings->weight, c);
  if (c.position_embedding_type == PositionEmbeddingType::learned_absolute) {
    position_embeddings =
        register_module("position_embeddings", nn::Embedding(c.max_position_embeddings, c.hidden_size));
    init_normal(position_embeddings->weight, c);
  }
}

LanguageModelEmbeddingImpl::LanguageModelEmbeddingImpl(const TransformerConfig& c,
                                                       std::shared_ptr<dist::ProcessGroup> tp,
                                                       Generator* sp_dropout_generator)
    : dropout_(c.hidden_dropout), tp_(std::move(tp)), sequence_parallel_(c.sequence_parallel),
      sp_dropout_generator_(sp_dropout_generator) {
  QK_CHECK(tp_ != nullptr, "LanguageModelEmbedding: needs a tensor-parallel group");
  const bool learned = c.position_embedding_type == PositionEmbeddingType::learned_absolute;
  // Megatron's reduce_scatter_embeddings: with nothing to add after the
  // lookup, the sum over the group and the sequence split are one reduce-scatter.
  vocab_parallel_word_embeddings = register_module(
      "word_embeddings", parallel::VocabParallelEmbedding(
                             c.padded_vocab_size(), c.hidden_size, tp_,
                             parallel::VocabParallelEmbeddingOptions()
                                 .init([c](const Tensor& w, const Tensor&) { init_normal(w, c); })
                                 .reduce_scatter_embeddings(sequence_parallel_ && !learned)));
  if (learned) {
    position_embeddings =
        register_module("position_embeddings", nn::Embedding(c.max_position_embeddings, c.hidden_size));
    init_normal(position_embeddings->weight, c);
  }
}

const Tensor& LanguageModelEmbeddingImpl::word_embedding_weight() const {
  return vocab_parallel_word_embeddings ? vocab_parallel_word_embeddings->weight : word_embeddings->weight;
}

Tensor LanguageModelEmbeddingImpl::forward(const Tensor& tokens, const Tensor& position_ids, int64_t offset) {
  // [B, T, C] ([B, T/tp, C] when the vocabulary-parallel lookup reduce-scatters).
  Tensor h = vocab_parallel_word_embeddings ? vocab_parallel_word_embeddings(tokens) : word_embeddings(tokens);
  if (position_embeddings) {
    const int64_t t = tokens.size(1);
    Tensor positions = position_ids;
    if (!positions.defined()) {
      positions = arange(static_cast<double>(offset), static_cast<double>(offset + t), 1.0,
                        TensorOptions().dtype(DType::i64).device(tokens.device()));
    } else {
      QK_CHECK(positions.shape() == tokens.shape() || positions.shape() == Shape{t},
               "GPTModel: position_ids must be [B, T] or [T] like tokens ", shape_str(tokens.shape()), ", got ",
               shape_str(positions.shape()));
    }
    h = h + position_embeddings(positions);  // [T, C] broadcasts over the batch
  }
  if (sequence_parallel_) {
    if (position_embeddings) h = parallel::scatter_to_sequence_parallel_region(h, *tp_, 1);
    // Each rank drops out other tokens: its own generator (Megatron forks the model-parallel RNG).
    return dropout(h, dropout_, is_training(), *sp_dropout_generator_);
  }
  return dropout(h, dropout_, is_training());
}

// ---- TransformerBlock ----

TransformerBlockImpl::TransformerBlockImpl(const TransformerConfig& c, const TransformerLayerSpec& spec)
    : recompute_(LayerRecompute::of(c)) {
  layers = register_module("layers", nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    auto layer = std::make_shared<TransformerLayerImpl>(c, /*layer_number=*/i + 1, spec);
    layers->push_back(layer);
    typed_layers_.push_back(std::move(layer));
  }
  final_layernorm = register_module("final_layernorm", Norm(c, c.hidden_size));
}

Tensor TransformerBlockImpl::forward(const Tensor& hidden, const RotaryTables& rotary, KVCache* cache) {
  const AttentionContext ctx{rotary, cache, 0, attention_dropout_generator, hidden_dropout_generator};
  const Tensor h = run_layers_with_recompute(typed_layers_, hidden, ctx, recompute_, is_training(), forward_pre_hook);
  if (forward_pre_hook) forward_pre_hook(*final_layernorm);
  return final_layernorm(h);
}

// ---- GPTModel ----

TransformerLayerSpec gpt_layer_spec(const TransformerConfig& c, const GPTModelParallel& groups,
                                    const TransformerLayerSpec* base) {
  const TransformerLayerSpec spec =
      base ? *base : (groups.tp ? gpt_layer_tensor_parallel_spec(groups.tp) : gpt_layer_local_spec());
  return with_moe_layers(with_attention_of(c, spec, groups.tp), MoEParallel{.ep = groups.ep, .tp = groups.tp});
}

GPTModelImpl::GPTModelImpl(const TransformerConfig& config, const TransformerLayerSpec& spec)
    : config_(config.validated()) {
  build_local(gpt_layer_spec(config_, {}, &spec));
}

GPTModelImpl::GPTModelImpl(const TransformerConfig& config, std::shared_ptr<dist::ProcessGroup> tp)
    : config_(config.validated()), tp_(std::move(tp)) {
  QK_CHECK(tp_ != nullptr, "GPTModel: the tensor-parallel constructor needs a group (a group of one for none)");
  build_tensor_parallel(gpt_layer_spec(config_, {.tp = tp_}));
}

GPTModelImpl::GPTModelImpl(const TransformerConfig& config, GPTModelParallel groups)
    : config_(config.validated()), tp_(std::move(groups.tp)), ep_(std::move(groups.ep)) {
  const int64_t ep = ep_ ? ep_->size() : 1;
  QK_CHECK(config_.expert_model_parallel_size == ep, "GPTModel: the config's expert_model_parallel_size (",
           config_.expert_model_parallel_size, ") differs from the expert-parallel group's size (", ep, ")");
  const TransformerLayerSpec spec = gpt_layer_spec(config_, {.tp = tp_, .ep = ep_});
  if (tp_) build_tensor_parallel(spec);
  else build_local(spec);
}

void GPTModelImpl::build_local(const TransformerLayerSpec& spec) {
  const TransformerConfig& c = config_;
  embedding = register_module("embedding", LanguageModelEmbedding(c));
  decoder = register_module("decoder", TransformerBlock(c, spec));
  if (!c.share_embeddings_and_output_weights) {
    output_layer = register_module("output_layer",
                                   nn::Linear(nn::LinearOptions(c.hidden_size, c.padded_vocab_size()).bias(false)));
    init_normal(output_layer->weight, c);
  }
  if (c.params_dtype != DType::f32) to(c.params_dtype);
}

void GPTModelImpl::build_tensor_parallel(const TransformerLayerSpec& spec) {
  const TransformerConfig& c = config_;
  check_tensor_parallel_config(c, tp_->size());
  // Megatron's model_parallel_cuda_manual_seed: seed + 2718 + tp rank. Making
  // it draws nothing, so the default generator stays in step with the unsplit model's.
  tp_rng_ = std::make_shared<Generator>(default_generator().seed() + 2718 + static_cast<uint64_t>(tp_->rank()));
  embedding = register_module("embedding", LanguageModelEmbedding(c, tp_, tp_rng_.get()));
  decoder = register_module("decoder", TransformerBlock(c, spec));
  if (tp_->size() > 1) decoder->attention_dropout_generator = tp_rng_.get();
  if (c.sequence_parallel) decoder->hidden_dropout_generator = tp_rng_.get();
  if (!c.share_embeddings_and_output_weights) {
    parallel_output_layer = register_module(
        "output_layer", parallel::ColumnParallelLinear(
                            c.hidden_size, c.padded_vocab_size(), tp_,
                            parallel::ColumnParallelLinearOptions()
                                .bias(false)
                                .sequence_parallel(c.sequence_parallel)
                                .init([c](const Tensor& w, const Tensor&) { init_normal(w, c); })));
  }
  if (c.params_dtype != DType::f32) to(c.params_dtype);
}

const Tensor& GPTModelImpl::output_weight() const {
  if (parallel_output_layer) return parallel_output_layer->weight;
  return output_layer ? output_layer->weight : embedding->word_embedding_weight();
}

std::vector<std::string> GPTModelImpl::partial_gradient_parameters() const {
  std::vector<std::string> names;
  if (!tp_ || tp_->size() == 1 || !config_.sequence_parallel) return names;
  auto add_norm = [&](const std::string& prefix, const Norm& n) {
    names.push_back(prefix + ".weight");
    if (n->bias.defined()) names.push_back(prefix + ".bias");
  };
  const auto& layers = decoder->layers;
  for (size_t i = 0; i < layers->size(); ++i) {
    const auto* layer = dynamic_cast<const TransformerLayerImpl*>(layers->ptr(i).get());
    const std::string prefix = "decoder.layers." + std::to_string(i) + ".";
    add_norm(prefix + "input_layernorm", layer->input_layernorm);
    add_norm(prefix + "pre_mlp_layernorm", layer->pre_mlp_layernorm);
  }
  add_norm("decoder.final_layernorm", decoder->final_layernorm);
  return names;
}

Tensor GPTModelImpl::vocab_parallel_logits(const Tensor& hidden) {
  const Tensor input = config_.sequence_parallel ? parallel::gather_from_sequence_parallel_region(hidden, *tp_, 1)
                                                 : parallel::copy_to_tensor_model_parallel_region(hidden, *tp_);
  return linear(input, output_weight()).to(DType::f32);
}

void GPTModelImpl::check_tokens(const Tensor& tokens, int64_t offset) const {
  QK_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.size(1) > 0,
           "GPTModel: expected tokens [B, T] with T > 0, got ",
           tokens.defined() ? shape_str(tokens.shape()) : "an undefined tensor");
  QK_CHECK_TYPE(tokens.dtype() == DType::i64, "GPTModel: tokens must be i64, got ", dtype_name(tokens.dtype()));
  if (config_.position_embedding_type == PositionEmbeddingType::learned_absolute)
    QK_CHECK(offset + tokens.size(1) <= config_.max_position_embeddings, "GPTModel: positions up to ",
             offset + tokens.size(1), " exceed max_position_embeddings (", config_.max_position_embeddings,
             ") of the learned position embedding");
  if (tp_ && config_.sequence_parallel)
    QK_CHECK(tokens.size(1) % tp_->size() == 0, "GPTModel: a sequence of ", tokens.size(1),
             " tokens does not split over --tensor-model-parallel-size ", tp_->size(),
             " under --sequence-parallel; make --seq-length a multiple of it");
}

void GPTModelImpl::set_forward_pre_hook(ForwardPreHook hook) {
  forward_pre_hook_ = hook;
  decoder->forward_pre_hook = std::move(hook);
}

void GPTModelImpl::before_output_layer() const {
  if (!forward_pre_hook_) return;
  if (output_layer) forward_pre_hook_(*output_layer);
  if (parallel_output_layer) forward_pre_hook_(*parallel_output_layer);
}

Tensor GPTModelImpl::run(const Tensor& tokens, const Tensor& position_ids, KVCache* cache) {
  const int64_t offset = cache ? cache->length() : 0;
  check_tokens(tokens, offset);
  if (forward_pre_hook_) forward_pre_hook_(*embedding);
  const Tensor h = embedding(tokens, position_ids, offset);
  // MLA rotates its own qk_pos_emb_head_dims with YaRN (Megatron: whatever the type).
  auto tables = [&] {
    if (config_.multi_latent_attention) return mla_rotary_tables(config_, offset, tokens.size(1)).to(h.device());
    if (config_.position_embedding_type == PositionEmbeddingType::rope)
      return rotary_tables(config_, offset, tokens.size(1)).to(h.device());
    return RotaryTables{};
  };
  if (offset != 0) return decoder(h, tables(), cache);  // a KV cache's later positions: made each time
  const auto key = std::make_pair(h.device().str(), tokens.size(1));
  auto it = rotary_cache_.find(key);
  if (it == rotary_cache_.end()) it = rotary_cache_.emplace(key, tables()).first;
  return decoder(h, it->second, cache);
}

Tensor GPTModelImpl::hidden_states(const Tensor& tokens, const Tensor& position_ids) {
  return run(tokens, position_ids, nullptr);
}

Tensor GPTModelImpl::logits(const Tensor& hidden) {
  before_output_layer();
  if (tp_) return parallel::gather_from_tensor_model_parallel_region(vocab_parallel_logits(hidden), *tp_);
  return linear(hidden, output_weight()).to(DType::f32);
}

Tensor GPTModelImpl::forward(const Tensor& tokens, const Tensor& position_ids, const Tensor& labels,
                             const Tensor& loss_mask) {
  const Tensor h = run(tokens, position_ids, nullptr);
  if (!labels.defined()) return logits(h);
  QK_CHECK(labels.shape() == tokens.shape(), "GPTModel: labels ", shape_str(labels.shape()),
           " must match tokens ", shape_str(tokens.shape()));
  QK_CHECK(!loss_mask.defined() || loss_mask.shape() == tokens.shape(), "GPTModel: loss_mask ",
           loss_mask.defined() ? shape_str(loss_mask.shape()) : "", " must match tokens ", shape_str(tokens.shape()));
  const int64_t n = tokens.numel();
  before_output_layer();
  if (!tp_)
    return output_loss(h.reshape({n, config_.hidden_size}), output_weight(), labels.reshape({n}),
                       loss_mask.defined() ? loss_mask.reshape({n}) : Tensor());
  // output_loss's masked mean over the vocabulary-parallel cross entropy.
  const Tensor logits_local = vocab_parallel_logits(h);  // [B, T, V/tp]
  const Tensor ce = parallel::vocab_parallel_cross_entropy(logits_local.reshape({n, logits_local.size(-1)}),
                                                           labels.reshape({n}), *tp_);
  const Tensor token_weight = loss_mask.defined() ? loss_mask.reshape({n}).to(DType::f32) /
                                                        sum(loss_mask.to(DType::f32))
                                                  : full({n}, 1.0 / static_cast<double>(n),
                                                         TensorOptions().dtype(DType::f32).device(ce.device()));
  return sum(ce * token_weight);
}

Tensor GPTModelImpl::forward_step(const Tensor& tokens, KVCache& cache, bool last_only) {
  QK_CHECK(cache.num_layers() == config_.num_layers, "GPTModel::forward_step: the cache has ", cache.num_layers(),
           " layers, the model ", config_.num_layers, "; make it with make_kv_cache");
  QK_CHECK(tokens.dim() == 2 && tokens.size(0) == cache.batch_size(), "GPTModel::forward_step: tokens ",
           shape_str(tokens.shape()), " must be [", cache.batch_size(), ", T] for this cache");
  QK_CHECK(!is_training() || (config_.hidden_dropout == 0 && config_.attention_dropout == 0),
           "GPTModel::forward_step: the model is in training mode and would drop activations; call eval() "
           "before generating");
  QK_CHECK(!(tp_ && config_.sequence_parallel), "GPTModel::forward_step: generation runs without sequence "
           "parallelism (as Megatron's inference); build the model with config.sequence_parallel = false");
  NoGradGuard no_grad;
  const Tensor h = run(tokens, Tensor(), &cache);
  const int64_t t = tokens.size(1);
  cache.advance(t);
  return logits(last_only && t > 1 ? h.narrow(1, t - 1, 1) : h);
}

KVCache GPTModelImpl::make_kv_cache(int64_t batch_size, int64_t max_length) const {
  // MLA caches the latent, replicated over tensor-parallel ranks.
  if (config_.multi_latent_attention)
    return KVCache::latent(config_.num_layers, batch_size, max_length,
                           config_.kv_lora_rank + config_.qk_pos_emb_head_dim, config_.params_dtype);
  // Under tensor parallelism each rank caches its own query groups.
  const int64_t groups = config_.num_query_groups / (tp_ ? tp_->size() : 1);
  return KVCache(config_.num_layers, batch_size, max_length, groups, config_.kv_channels, config_.params_dtype);
}

}  // namespace qk::transformer
