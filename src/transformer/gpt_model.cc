// GPTModel: embedding -> decoder -> output layer / loss, and the KV-cache
// inference path.
#include "qk/transformer/gpt_model.h"

#include "qk/autograd/functions.h"

namespace qk::transformer {

namespace {

TransformerConfig validated(TransformerConfig c) {
  c.validate();
  return c;
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

Tensor LanguageModelEmbeddingImpl::forward(const Tensor& tokens, const Tensor& position_ids, int64_t offset) {
  Tensor h = word_embeddings(tokens);  // [B, T, C]
  if (position_embeddings) {
    const int64_t t = tokens.size(1);
    Tensor positions = position_ids;
    if (!positions.defined()) {
      positions = arange(static_cast<double>(offset), static_cast<double>(offset + t), 1.0, DType::i64);
    } else {
      QK_CHECK(positions.shape() == tokens.shape() || positions.shape() == Shape{t},
               "GPTModel: position_ids must be [B, T] or [T] like tokens ", shape_str(tokens.shape()), ", got ",
               shape_str(positions.shape()));
    }
    h = h + position_embeddings(positions);  // [T, C] broadcasts over the batch
  }
  return dropout(h, dropout_, is_training());
}

// ---- TransformerBlock ----

TransformerBlockImpl::TransformerBlockImpl(const TransformerConfig& c, const TransformerLayerSpec& spec) {
  layers = register_module("layers", nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    auto layer = std::make_shared<TransformerLayerImpl>(c, /*layer_number=*/i + 1, spec);
    layers->push_back(layer);
    typed_layers_.push_back(std::move(layer));
  }
  final_layernorm = register_module("final_layernorm", Norm(c, c.hidden_size));
}

Tensor TransformerBlockImpl::forward(const Tensor& hidden, const RotaryTables& rotary, KVCache* cache) {
  Tensor h = hidden;
  AttentionContext ctx{rotary, cache, 0};
  for (size_t i = 0; i < typed_layers_.size(); ++i) {
    ctx.layer = static_cast<int64_t>(i);
    h = typed_layers_[i]->forward(h, ctx);
  }
  return final_layernorm(h);
}

// ---- GPTModel ----

GPTModelImpl::GPTModelImpl(const TransformerConfig& config, const TransformerLayerSpec& spec)
    : config_(validated(config)) {
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

const Tensor& GPTModelImpl::output_weight() const {
  return output_layer ? output_layer->weight : embedding->word_embeddings->weight;
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
}

Tensor GPTModelImpl::run(const Tensor& tokens, const Tensor& position_ids, KVCache* cache) {
  const int64_t offset = cache ? cache->length() : 0;
  check_tokens(tokens, offset);
  const Tensor h = embedding(tokens, position_ids, offset);
  RotaryTables rotary;
  if (config_.position_embedding_type == PositionEmbeddingType::rope)
    rotary = rotary_tables(config_, offset, tokens.size(1));
  return decoder(h, rotary, cache);
}

Tensor GPTModelImpl::hidden_states(const Tensor& tokens, const Tensor& position_ids) {
  return run(tokens, position_ids, nullptr);
}

Tensor GPTModelImpl::logits(const Tensor& hidden) { return linear(hidden, output_weight()).to(DType::f32); }

Tensor GPTModelImpl::forward(const Tensor& tokens, const Tensor& position_ids, const Tensor& labels,
                             const Tensor& loss_mask) {
  const Tensor h = run(tokens, position_ids, nullptr);
  if (!labels.defined()) return logits(h);
  QK_CHECK(labels.shape() == tokens.shape(), "GPTModel: labels ", shape_str(labels.shape()),
           " must match tokens ", shape_str(tokens.shape()));
  QK_CHECK(!loss_mask.defined() || loss_mask.shape() == tokens.shape(), "GPTModel: loss_mask ",
           loss_mask.defined() ? shape_str(loss_mask.shape()) : "", " must match tokens ", shape_str(tokens.shape()));
  const int64_t n = tokens.numel();
  return output_loss(h.reshape({n, config_.hidden_size}), output_weight(), labels.reshape({n}),
                     loss_mask.defined() ? loss_mask.reshape({n}) : Tensor());
}

Tensor GPTModelImpl::forward_step(const Tensor& tokens, KVCache& cache) {
  QK_CHECK(cache.num_layers() == config_.num_layers, "GPTModel::forward_step: the cache has ", cache.num_layers(),
           " layers, the model ", config_.num_layers, "; make it with make_kv_cache");
  QK_CHECK(tokens.dim() == 2 && tokens.size(0) == cache.batch_size(), "GPTModel::forward_step: tokens ",
           shape_str(tokens.shape()), " must be [", cache.batch_size(), ", T] for this cache");
  QK_CHECK(!is_training() || (config_.hidden_dropout == 0 && config_.attention_dropout == 0),
           "GPTModel::forward_step: the model is in training mode and would drop activations; call eval() "
           "before generating");
  NoGradGuard no_grad;
  const Tensor h = run(tokens, Tensor(), &cache);
  cache.advance(tokens.size(1));
  return logits(h);
}

KVCache GPTModelImpl::make_kv_cache(int64_t batch_size, int64_t max_length) const {
  return KVCache(config_.num_layers, batch_size, max_length, config_.num_query_groups, config_.kv_channels,
                 config_.params_dtype);
}

}  // namespace qk::transformer
