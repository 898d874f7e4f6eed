// The GPT model split into pipeline stages (Megatron's GPTModel with
// pre_process / post_process, one per model chunk): the embedding on the
// first stage, a run of transformer layers on every stage, the final norm,
// output layer and loss on the last; with virtual stages each rank holds
// several chunks (qk/parallel/pipeline_layout.h says which layers).
//
//   auto split = qk::parallel::PipelineLayerSplit::make({.num_layers = 8, .pipeline_model_parallel_size = 2,
//                                                        .num_virtual_stages_per_pipeline_rank = 2});
//   qk::manual_seed(1234);                                     // the same seed on every rank
//   auto chunks = qk::transformer::build_gpt_model_chunks(config, split, ps->pipeline_model_parallel_rank(),
//                                                         ps->group(GroupKind::tp));   // tp: null or a group
//   // in the schedule's forward step (qk/parallel/pipeline_schedule.h):
//   GPTChunkInput in;
//   if (chunks[c]->pre_process()) in.tokens = b.tokens; else in.hidden = input;
//   if (chunks[c]->post_process()) { in.labels = b.labels; in.loss_mask = b.loss_mask; }
//   Tensor out = chunks[c]->forward(in);                      // hidden [B, T, C], or the loss
//   // after the schedule, before the optimizer:
//   all_reduce_embedding_grads(chunks, ps->group(GroupKind::embedding).get());   // tied embeddings
//
// Initialisation is the unsplit model's: every chunk goes through the
// unsplit constructor's draws in order (embedding, layers 0..L-1, output
// layer) and keeps its own pieces, so with the same seed each parameter
// equals the single-rank model's, at any split (and any tensor-parallel size,
// whose layers draw the full master weights). Pieces of other stages are
// skipped by advancing the generator by what building one drew (measured
// once per kind), so a stage costs its own share plus the skipped counts.
//
// Parameter names are the unsplit model's (decoder.layers.{global index}.*,
// embedding.*, decoder.final_layernorm.*, output_layer.weight), so
// checkpoints do not depend on the split. With tied embeddings the last
// stage holds a copy of the word embedding as output_layer.weight (Megatron's
// shared_embedding_or_output_weight): equal at the start by construction,
// kept equal by summing its gradient with the first stage's over the
// embedding group; it is left out of stage state dicts and loaded from
// embedding.word_embeddings.weight.
//
// config.recompute_granularity full applies to each chunk's own layers
// (qk/transformer/layer_recompute.h): recompute_num_layers counts layers
// per chunk (virtual stage), as in Megatron.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "qk/dist/process_group.h"
#include "qk/nn/module.h"
#include "qk/parallel/pipeline_layout.h"
#include "qk/parallel/sharding.h"
#include "qk/transformer/gpt_model.h"

namespace qk::transformer {

// What a chunk's forward reads: tokens (and position ids) on the first
// stage, the previous stage's hidden states elsewhere; labels and loss mask
// on the last stage (without labels it returns logits).
struct GPTChunkInput {
  Tensor tokens, position_ids;  // [B, T] i64, first stage
  Tensor hidden;                // [B, T, C] ([B, T/tp, C] under sequence parallelism), other stages
  Tensor labels, loss_mask;     // [B, T], last stage
};

class DrawSkipper;

class GPTModelChunkImpl : public nn::Module, public parallel::TensorParallelModule {
 public:
  // Use build_gpt_model_chunks (it positions the generator for each chunk).
  GPTModelChunkImpl(const TransformerConfig& config, const parallel::PipelineLayerSplit& split, int pp_rank,
                    int vp_stage, GPTModelParallel groups, std::shared_ptr<Generator> tp_rng,
                    DrawSkipper& skipper);

  // Not on the last stage: the hidden states after this chunk's layers.
  // On the last stage: the loss sum(ce * loss_mask) / sum(loss_mask) (f32
  // scalar) with labels, else logits [B, T, V_padded] f32.
  Tensor forward(const GPTChunkInput& in);

  bool pre_process() const { return pre_process_; }
  bool post_process() const { return post_process_; }
  int vp_stage() const { return vp_stage_; }
  int64_t layer_offset() const { return layer_offset_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  const TransformerConfig& config() const { return config_; }
  // Megatron's shared_embedding_or_output_weight: the word embedding (first
  // stage) or its copy (last stage) with tied embeddings; else undefined.
  Tensor shared_embedding_or_output_weight() const;
  // The last stage's copy of the word embedding (undefined elsewhere).
  bool holds_embedding_copy() const { return output_copy_.defined(); }
  // The per-rank dropout generator under tensor parallelism (null without).
  Generator* tensor_parallel_generator() const { return tp_rng_.get(); }

  std::vector<std::pair<std::string, parallel::ShardSpec>> shard_specs() const override;
  std::vector<std::string> partial_gradient_parameters() const override;

  // Called with each part that holds parameters (the embedding, each layer,
  // the final norm, the output layer or the tied copy) right before it runs:
  // the distributed optimizer's wait for that part's all-gather under
  // --overlap-param-gather (GPTModel::set_forward_pre_hook's). Empty: none.
  void set_forward_pre_hook(ForwardPreHook hook) { forward_pre_hook_ = std::move(hook); }

  LanguageModelEmbedding embedding{nullptr};   // first stage
  std::shared_ptr<nn::Module> decoder;         // "decoder": layers.{global}, final_layernorm (last stage)
  Norm final_layernorm{nullptr};
  nn::Linear output_layer{nullptr};            // untied, no tensor parallelism
  parallel::ColumnParallelLinear parallel_output_layer{nullptr};  // untied under tensor parallelism

 private:
  Tensor output_weight() const;
  Tensor head(const Tensor& hidden, const GPTChunkInput& in);

  TransformerConfig config_;
  std::shared_ptr<dist::ProcessGroup> tp_, ep_;
  std::shared_ptr<Generator> tp_rng_;
  bool pre_process_ = false, post_process_ = false;
  int vp_stage_ = 0;
  int64_t layer_offset_ = 0;
  std::vector<std::shared_ptr<TransformerLayerImpl>> layers_;
  Tensor output_copy_;  // tied embeddings, last stage (not first)
  std::shared_ptr<nn::Module> output_copy_holder_;  // "output_layer" holding output_copy_
  ForwardPreHook forward_pre_hook_;
};
QK_MODULE(GPTModelChunk);

// This pipeline rank's model chunks (virtual stages 0..v-1), initialised as
// the unsplit model (see above). tp: the tensor-parallel group (null: none);
// config.tensor_model_parallel_size must be its size. Validates the config
// against the split (--num-layers) and the tensor-parallel sizes (ValueError
// naming the flags). Leaves the default generator where the unsplit
// constructor would.
std::vector<GPTModelChunk> build_gpt_model_chunks(const TransformerConfig& config,
                                                  const parallel::PipelineLayerSplit& split, int pp_rank,
                                                  std::shared_ptr<dist::ProcessGroup> tp = nullptr);
// The same with the MoE layers' experts split over groups.ep (as GPTModel's
// GPTModelParallel constructor; config.expert_model_parallel_size its size).
std::vector<GPTModelChunk> build_gpt_model_chunks(const TransformerConfig& config,
                                                  const parallel::PipelineLayerSplit& split, int pp_rank,
                                                  GPTModelParallel groups);

// Megatron's _allreduce_word_embedding_grads: sums the tied weight's
// gradient (.grad) of the first and last stage over the embedding group, so
// both copies take the same step. A no-op without tied embeddings, for
// ranks outside the group (null: middle stages) and for one stage.
void all_reduce_embedding_grads(std::vector<GPTModelChunk>& chunks, dist::ProcessGroup* embedding_group);
// The name of the tied weight on this rank ("embedding.word_embeddings.weight"
// or "output_layer.weight"; "" when none), for reducing another gradient
// buffer (an optimizer's fp32 main gradients) instead of .grad.
std::string shared_embedding_parameter_name(const std::vector<GPTModelChunk>& chunks);
// The first stage's word embedding into the last stage's copy (broadcast
// over the embedding group), e.g. after loading weights on the first stage only.
void sync_embedding_copies(std::vector<GPTModelChunk>& chunks, dist::ProcessGroup* embedding_group);

// The L2 norm of the whole model's gradient over every stage (Megatron's
// get_grad_norm_fp32 over the model-parallel group): tensor-parallel shards
// summed over tp, replicated parameters once, the tied copy not again.
// Collective over tp (if given) and pp.
double pipeline_grad_norm(std::vector<GPTModelChunk>& chunks, dist::ProcessGroup* tp, dist::ProcessGroup& pp);

// This rank's parameters by their unsplit names, the tied copy left out;
// shards gathered over tp when given (collective over it). The union over
// the stages is the unsplit model's state dict.
nn::NamedTensors stage_state_dict(std::vector<GPTModelChunk>& chunks, dist::ProcessGroup* tp = nullptr);
// Loads this rank's parameters from an unsplit state dict (the tied copy
// from embedding.word_embeddings.weight; each rank keeps its shards under
// tensor parallelism). A missing or mismatched key is a ValueError naming it.
void load_stage_state_dict(std::vector<GPTModelChunk>& chunks, const nn::NamedTensors& full,
                           dist::ProcessGroup* tp = nullptr);

}  // namespace qk::transformer
