// GPT model chunks for pipeline parallelism: built in the unsplit model's
// draw order, forward from tokens or hidden states to hidden states or the
// loss, and the tied embedding's copy across the embedding group.
#include "qk/transformer/gpt_pipeline.h"

#include <cmath>
#include <map>

#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/parallel/cross_entropy.h"
#include "qk/parallel/mappings.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/view.h"
#include "qk/transformer/functional.h"
#include "qk/transformer/layer_recompute.h"
#include "qk/transformer/mla.h"
#include "qk/transformer/tensor_parallel.h"

namespace qk::transformer {

// Skips the draws of pieces another stage builds: the first piece of a kind
// is built (and dropped) to measure how far it advances the default
// generator; the others of that kind only advance it. Fills are counter
// based, so what a fill draws depends on its size alone.
class DrawSkipper {
 public:
  template <typename Build>
  void skip(const std::string& kind, Build build) {
    Generator& g = default_generator();
    auto it = deltas_.find(kind);
    if (it != deltas_.end()) {
      g.set_state(g.seed(), g.offset() + it->second);
      return;
    }
    const uint64_t before = g.offset();
    {
      NoGradGuard no_grad;
      build();
    }
    deltas_[kind] = g.offset() - before;
  }

 private:
  std::map<std::string, uint64_t> deltas_;
};

namespace {

constexpr const char* kWordEmbedding = "embedding.word_embeddings.weight";
constexpr const char* kOutputWeight = "output_layer.weight";

LanguageModelEmbedding make_embedding(const TransformerConfig& c, const std::shared_ptr<dist::ProcessGroup>& tp,
                                      Generator* sp_generator) {
  return tp ? LanguageModelEmbedding(c, tp, sp_generator) : LanguageModelEmbedding(c);
}

}  // namespace

GPTModelChunkImpl::GPTModelChunkImpl(const TransformerConfig& config, const parallel::PipelineLayerSplit& split,
                                     int pp_rank, int vp_stage, GPTModelParallel groups,
                                     std::shared_ptr<Generator> tp_rng, DrawSkipper& skipper)
    : config_(config.validated()), tp_(std::move(groups.tp)), ep_(std::move(groups.ep)), tp_rng_(std::move(tp_rng)),
      vp_stage_(vp_stage) {
  const TransformerConfig& c = config_;
  pre_process_ = split.is_first_stage(pp_rank, vp_stage);
  post_process_ = split.is_last_stage(pp_rank, vp_stage);
  layer_offset_ = split.layer_offset(pp_rank, vp_stage);
  const int64_t layer_end = layer_offset_ + split.num_layers(pp_rank, vp_stage);
  const bool tied = c.share_embeddings_and_output_weights;

  // 1. The embedding: the first stage's; on the last stage with tied
  //    embeddings the same draws give the copy of the word embedding.
  if (pre_process_) {
    embedding = register_module("embedding", make_embedding(c, tp_, tp_rng_.get()));
  } else if (post_process_ && tied) {
    NoGradGuard no_grad;
    output_copy_ = make_embedding(c, tp_, tp_rng_.get())->word_embedding_weight().detach();
  } else {
    skipper.skip("embedding", [&] { LanguageModelEmbedding unused(c); });
  }

  // 2. Layers 0..L-1 in order, this chunk's kept under their global index.
  decoder = register_module("decoder", std::make_shared<nn::Module>("TransformerBlock"));
  auto layers = decoder->register_module("layers", std::make_shared<nn::Module>("ModuleList"));
  // GPTModel's spec (MLA, MoE layers); the skipped layers are drawn unsplit
  // (one expert-parallel rank holding every expert draws what each rank does).
  const TransformerLayerSpec spec = gpt_layer_spec(c, {.tp = tp_, .ep = ep_});
  TransformerConfig unsplit = c;
  unsplit.expert_model_parallel_size = 1;
  const TransformerLayerSpec unsplit_spec = gpt_layer_spec(unsplit, {});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (i >= layer_offset_ && i < layer_end) {
      layers_.push_back(std::make_shared<TransformerLayerImpl>(c, /*layer_number=*/i + 1, spec));
      layers->register_module(std::to_string(i), layers_.back());
    } else {
      // The unsplit layer draws what a tensor-parallel one does (full master weights).
      skipper.skip(c.is_moe_layer(i + 1) ? "moe layer" : "layer",
                   [&] { TransformerLayerImpl unused(unsplit, i + 1, unsplit_spec); });
    }
  }
  if (post_process_) final_layernorm = decoder->register_module("final_layernorm", Norm(c, c.hidden_size));

  // 3. The untied output layer; the tied copy under the output layer's name.
  if (!tied) {
    auto init = [c](const Tensor& w, const Tensor&) { init_normal(w, c); };
    if (!post_process_) {
      skipper.skip("output", [&] {
        nn::Linear unused(nn::LinearOptions(c.hidden_size, c.padded_vocab_size()).bias(false));
        init_normal(unused->weight, c);
      });
    } else if (tp_) {
      parallel_output_layer = register_module(
          "output_layer",
          parallel::ColumnParallelLinear(
              c.hidden_size, c.padded_vocab_size(), tp_,
              parallel::ColumnParallelLinearOptions().bias(false).sequence_parallel(c.sequence_parallel).init(init)));
    } else {
      output_layer =
          register_module("output_layer", nn::Linear(nn::LinearOptions(c.hidden_size, c.padded_vocab_size()).bias(false)));
      init_normal(output_layer->weight, c);
    }
  } else if (output_copy_.defined()) {
    output_copy_holder_ = register_module("output_layer", std::make_shared<nn::Module>("SharedEmbeddingCopy"));
    output_copy_ = output_copy_holder_->register_parameter("weight", output_copy_);
  }
  if (c.params_dtype != DType::f32) {
    to(c.params_dtype);
    if (output_copy_.defined()) output_copy_ = named_parameters()[kOutputWeight];
  }
}

Tensor GPTModelChunkImpl::output_weight() const {
  if (parallel_output_layer) return parallel_output_layer->weight;
  if (output_layer) return output_layer->weight;
  if (output_copy_.defined()) return output_copy_;
  return embedding->word_embedding_weight();
}

Tensor GPTModelChunkImpl::shared_embedding_or_output_weight() const {
  if (!config_.share_embeddings_and_output_weights) return {};
  if (pre_process_) return embedding->word_embedding_weight();
  return output_copy_;
}

std::vector<std::pair<std::string, parallel::ShardSpec>> GPTModelChunkImpl::shard_specs() const {
  // The copy is this rank's vocabulary rows, as the embedding it copies.
  if (output_copy_.defined() && tp_) return {{kOutputWeight, parallel::ShardSpec{0, 1}}};
  return {};
}

std::vector<std::string> GPTModelChunkImpl::partial_gradient_parameters() const {
  std::vector<std::string> names;
  if (!tp_ || tp_->size() == 1 || !config_.sequence_parallel) return names;
  auto add_norm = [&](const std::string& prefix, const Norm& n) {
    names.push_back(prefix + ".weight");
    if (n->bias.defined()) names.push_back(prefix + ".bias");
  };
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string prefix = "decoder.layers." + std::to_string(layer_offset_ + static_cast<int64_t>(i)) + ".";
    add_norm(prefix + "input_layernorm", layers_[i]->input_layernorm);
    add_norm(prefix + "pre_mlp_layernorm", layers_[i]->pre_mlp_layernorm);
  }
  if (final_layernorm) add_norm("decoder.final_layernorm", final_layernorm);
  return names;
}

Tensor GPTModelChunkImpl::forward(const GPTChunkInput& in) {
  const TransformerConfig& c = config_;
  const bool sp = tp_ && c.sequence_parallel;
  Tensor h;
  int64_t seq = 0;
  if (pre_process_) {
    QK_CHECK(in.tokens.defined() && in.tokens.dim() == 2 && in.tokens.dtype() == DType::i64,
             "GPTModelChunk: the first stage needs tokens [B, T] i64");
    seq = in.tokens.size(1);
    QK_CHECK(c.position_embedding_type != PositionEmbeddingType::learned_absolute || seq <= c.max_position_embeddings,
             "GPTModelChunk: ", seq, " positions exceed max_position_embeddings (", c.max_position_embeddings, ")");
    QK_CHECK(!sp || seq % tp_->size() == 0, "GPTModelChunk: a sequence of ", seq, " tokens does not split over "
             "--tensor-model-parallel-size ", tp_->size(), " under --sequence-parallel");
    if (forward_pre_hook_) forward_pre_hook_(*embedding);
    h = embedding(in.tokens, in.position_ids);
  } else {
    QK_CHECK(in.hidden.defined() && in.hidden.dim() == 3 && in.hidden.size(2) == c.hidden_size,
             "GPTModelChunk: stage with layers from ", layer_offset_, " needs the previous stage's hidden states [B, T, ",
             c.hidden_size, "]", in.hidden.defined() ? ", got " + shape_str(in.hidden.shape()) : std::string());
    h = in.hidden;
    seq = h.size(1) * (sp ? tp_->size() : 1);
  }
  RotaryTables rotary;  // MLA rotates its own dims with YaRN, as GPTModel
  if (c.multi_latent_attention) rotary = mla_rotary_tables(c, 0, seq);
  else if (c.position_embedding_type == PositionEmbeddingType::rope) rotary = rotary_tables(c, 0, seq);
  rotary = rotary.to(h.device());
  Generator* tp_gen = tp_ && tp_->size() > 1 ? tp_rng_.get() : nullptr;
  AttentionContext ctx{rotary, nullptr, 0, tp_gen, sp ? tp_rng_.get() : nullptr};
  // Full recompute over this chunk's layers (recompute_num_layers per chunk, as Megatron's per-stage block).
  h = run_layers_with_recompute(layers_, h, ctx, LayerRecompute::of(c), is_training(), forward_pre_hook_);
  if (!post_process_) return h;
  if (forward_pre_hook_) forward_pre_hook_(*final_layernorm);
  return head(final_layernorm(h), in);
}

// GPTModel's head: logits, or the masked mean of the cross entropy
// (vocabulary-parallel under tensor parallelism, logits never gathered).
Tensor GPTModelChunkImpl::head(const Tensor& hidden, const GPTChunkInput& in) {
  if (forward_pre_hook_) {
    if (parallel_output_layer) forward_pre_hook_(*parallel_output_layer);
    if (output_layer) forward_pre_hook_(*output_layer);
    if (output_copy_holder_) forward_pre_hook_(*output_copy_holder_);
  }
  Tensor local_logits;  // [B, T, V/tp] f32 under tensor parallelism
  if (tp_) {
    const Tensor input = config_.sequence_parallel ? parallel::gather_from_sequence_parallel_region(hidden, *tp_, 1)
                                                   : parallel::copy_to_tensor_model_parallel_region(hidden, *tp_);
    local_logits = linear(input, output_weight()).to(DType::f32);
  }
  if (!in.labels.defined())
    return tp_ ? parallel::gather_from_tensor_model_parallel_region(local_logits, *tp_)
               : linear(hidden, output_weight()).to(DType::f32);
  const Shape tokens = {hidden.size(0), tp_ ? local_logits.size(1) : hidden.size(1)};
  QK_CHECK(in.labels.shape() == tokens, "GPTModelChunk: labels ", shape_str(in.labels.shape()), " must be ",
           shape_str(tokens));
  QK_CHECK(!in.loss_mask.defined() || in.loss_mask.shape() == tokens, "GPTModelChunk: loss_mask must be ",
           shape_str(tokens));
  const int64_t n = tokens[0] * tokens[1];
  const Tensor mask = in.loss_mask.defined() ? in.loss_mask.reshape({n}) : Tensor();
  if (!tp_) return output_loss(hidden.reshape({n, config_.hidden_size}), output_weight(), in.labels.reshape({n}), mask);
  const Tensor ce = parallel::vocab_parallel_cross_entropy(local_logits.reshape({n, local_logits.size(-1)}),
                                                           in.labels.reshape({n}), *tp_);
  const Tensor weight = mask.defined() ? mask.to(DType::f32) / sum(mask.to(DType::f32))
                                       : full({n}, 1.0 / static_cast<double>(n),
                                              TensorOptions().dtype(DType::f32).device(ce.device()));
  return sum(ce * weight);
}

std::vector<GPTModelChunk> build_gpt_model_chunks(const TransformerConfig& config,
                                                  const parallel::PipelineLayerSplit& split, int pp_rank,
                                                  std::shared_ptr<dist::ProcessGroup> tp) {
  return build_gpt_model_chunks(config, split, pp_rank, GPTModelParallel{.tp = std::move(tp)});
}

std::vector<GPTModelChunk> build_gpt_model_chunks(const TransformerConfig& config,
                                                  const parallel::PipelineLayerSplit& split, int pp_rank,
                                                  GPTModelParallel groups) {
  const TransformerConfig c = config.validated();
  const std::shared_ptr<dist::ProcessGroup>& tp = groups.tp;
  const int64_t ep = groups.ep ? groups.ep->size() : 1;
  QK_CHECK(c.expert_model_parallel_size == ep, "build_gpt_model_chunks: --expert-model-parallel-size ",
           c.expert_model_parallel_size, " differs from the expert-parallel group's size (", ep, ")");
  QK_CHECK(c.num_layers == split.num_layers(), "the model has ", c.num_layers,
           " layers but the pipeline split was made for --num-layers ", split.num_layers());
  QK_CHECK(pp_rank >= 0 && pp_rank < split.pipeline_size(), "pipeline rank ", pp_rank, " is outside [0, ",
           split.pipeline_size(), ")");
  if (tp) check_tensor_parallel_config(c, tp->size());
  else
    QK_CHECK(c.tensor_model_parallel_size == 1, "build_gpt_model_chunks: --tensor-model-parallel-size ",
             c.tensor_model_parallel_size, " needs the tensor-parallel group");
  Generator& g = default_generator();
  // Megatron's per-stage seed (seed + 100 x pipeline rank) for the
  // model-parallel RNG: the same as the unsplit model's on the first stage.
  std::shared_ptr<Generator> tp_rng;
  if (tp)
    tp_rng = std::make_shared<Generator>(g.seed() + 100 * static_cast<uint64_t>(pp_rank) + 2718 +
                                         static_cast<uint64_t>(tp->rank()));
  const uint64_t seed = g.seed(), start = g.offset();
  DrawSkipper skipper;
  std::vector<GPTModelChunk> chunks;
  for (int vp = 0; vp < split.virtual_pipeline_size(); ++vp) {
    g.set_state(seed, start);  // each chunk goes through the whole model's draws
    chunks.push_back(GPTModelChunk(std::make_shared<GPTModelChunkImpl>(c, split, pp_rank, vp, groups, tp_rng, skipper)));
  }
  return chunks;
}

// ---- the tied embedding across the embedding group ----

namespace {

GPTModelChunkImpl* tied_chunk(std::vector<GPTModelChunk>& chunks) {
  for (auto& ch : chunks)
    if (ch->shared_embedding_or_output_weight().defined() && (ch->pre_process() || ch->post_process()))
      return ch.get();
  return nullptr;
}

}  // namespace

std::string shared_embedding_parameter_name(const std::vector<GPTModelChunk>& chunks) {
  for (const auto& ch : chunks) {
    if (!ch->config().share_embeddings_and_output_weights) return "";
    if (ch->pre_process()) return kWordEmbedding;
    if (ch->holds_embedding_copy()) return kOutputWeight;
  }
  return "";
}

void all_reduce_embedding_grads(std::vector<GPTModelChunk>& chunks, dist::ProcessGroup* group) {
  GPTModelChunkImpl* ch = tied_chunk(chunks);
  if (!ch || !group || group->size() == 1) return;
  Tensor w = ch->shared_embedding_or_output_weight();
  if (!w.grad().defined()) w.set_grad(zeros_like(w));  // no backward reached it: contribute zeros
  Tensor g = w.grad();
  QK_CHECK_AS(InternalError, g.is_contiguous(), "all_reduce_embedding_grads: the gradient is not contiguous");
  group->all_reduce(g);
}

void sync_embedding_copies(std::vector<GPTModelChunk>& chunks, dist::ProcessGroup* group) {
  GPTModelChunkImpl* ch = tied_chunk(chunks);
  if (!ch || !group || group->size() == 1) return;
  NoGradGuard no_grad;
  group->broadcast(ch->shared_embedding_or_output_weight(), 0);  // group rank 0: the first stage
}

double pipeline_grad_norm(std::vector<GPTModelChunk>& chunks, dist::ProcessGroup* tp, dist::ProcessGroup& pp) {
  NoGradGuard no_grad;
  double sharded = 0, replicated = 0;
  for (auto& ch : chunks) {
    const parallel::ShardSpecs specs = parallel::tensor_parallel_shard_specs(*ch);
    for (const auto& item : ch->named_parameters()) {
      const Tensor& grad = item.value().grad();
      if (!grad.defined() || (ch->holds_embedding_copy() && item.key() == kOutputWeight)) continue;
      const double sq = sum(square(grad.to(DType::f64))).item_double();
      (specs.count(item.key()) ? sharded : replicated) += sq;
    }
  }
  Tensor total = from_vector<double>({sharded}, {1});
  if (tp && tp->size() > 1) tp->all_reduce(total);
  total.data_ptr<double>()[0] += replicated;
  pp.all_reduce(total);
  return std::sqrt(total.data_ptr<double>()[0]);
}

// ---- state dicts ----

nn::NamedTensors stage_state_dict(std::vector<GPTModelChunk>& chunks, dist::ProcessGroup* tp) {
  nn::NamedTensors out;
  for (auto& ch : chunks) {
    const nn::NamedTensors sd = tp ? parallel::full_state_dict(*ch, *tp) : ch->state_dict();
    for (const auto& item : sd)
      if (!(ch->holds_embedding_copy() && item.key() == kOutputWeight)) out.insert(item.key(), item.value());
  }
  return out;
}

void load_stage_state_dict(std::vector<GPTModelChunk>& chunks, const nn::NamedTensors& full, dist::ProcessGroup* tp) {
  for (auto& ch : chunks) {
    nn::NamedTensors mine;
    for (const auto& item : ch->state_dict()) {
      const std::string from = ch->holds_embedding_copy() && item.key() == kOutputWeight ? kWordEmbedding : item.key();
      const Tensor* t = full.find(from);
      QK_CHECK(t != nullptr, "load_stage_state_dict: the state dict has no '", from, "', which pipeline stage chunk ",
               ch->vp_stage(), " (layers from ", ch->layer_offset(), ") holds");
      mine.insert(item.key(), *t);
    }
    if (tp)
      parallel::load_full_state_dict(*ch, mine, *tp);
    else
      ch->load_state_dict(mine);
  }
}

}  // namespace qk::transformer
