// Which transformer layers each pipeline stage holds: Megatron's layer split
// (get_num_layers_to_build, get_transformer_layer_offset) for plain,
// interleaved (virtual stages) and uneven first/last-stage pipelines. Pure
// arithmetic; the GPT model chunks (qk/transformer/gpt_pipeline.h) and the
// schedules (qk/parallel/pipeline_schedule.h) are built from it.
//
//   qk::parallel::PipelineSplitOptions o;
//   o.num_layers = 8;  o.pipeline_model_parallel_size = 2;
//   o.num_layers_per_virtual_pipeline_stage = 2;      // --num-layers-per-virtual-pipeline-stage
//   auto split = qk::parallel::PipelineLayerSplit::make(o);   // ValueError naming the flags
//   split.virtual_pipeline_size();                    // 2 model chunks per rank
//   split.layer_offset(/*pp_rank=*/1, /*vp_stage=*/0);  // 2: rank 1 holds [2 3] and [6 7]
//   split.num_layers(1, 1);                            // 2
//   split.is_first_stage(0, 0);  split.is_last_stage(1, 1);   // embedding / output layer + loss
//   std::cout << split.format();                       // "pp 0: [0-1] [4-5]; pp 1: [2-3] [6-7]"
//
// Model chunk vp of pipeline rank r holds n_r / v consecutive layers starting
// at vp * (L / v) + sum over r' < r of n_r' / v, where n_r is the rank's
// share (L / p, or --decoder-first/last-pipeline-num-layers on the first and
// last rank and the rest split evenly over the middle ranks). Layers are
// numbered globally, so parameter names do not depend on the split.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace qk::parallel {

// Megatron's flags that shape the split.
struct PipelineSplitOptions {
  int64_t num_layers = 0;                    // --num-layers
  int64_t pipeline_model_parallel_size = 1;  // --pipeline-model-parallel-size
  // --num-layers-per-virtual-pipeline-stage (0: unset).
  int64_t num_layers_per_virtual_pipeline_stage = 0;
  // --num-virtual-stages-per-pipeline-rank (0: unset).
  int64_t num_virtual_stages_per_pipeline_rank = 0;
  // --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers.
  std::optional<int64_t> decoder_first_pipeline_num_layers;
  std::optional<int64_t> decoder_last_pipeline_num_layers;
  // --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split
  // (Megatron's standalone embedding and loss): the split is of num_layers + 1
  // (+ 1) slots, and the first chunk of the first stage (the last chunk of
  // the last stage) holds one layer fewer: the embedding (the loss) takes it.
  bool account_for_embedding = false;
  bool account_for_loss = false;
};

class PipelineLayerSplit {
 public:
  // Validates as Megatron's arguments and TransformerConfig do: ValueError
  // naming the flags (sizes that do not divide, both virtual-stage flags,
  // uneven stages that leave a stage without layers, ...).
  static PipelineLayerSplit make(const PipelineSplitOptions& options);

  int64_t num_layers() const { return num_layers_; }
  int pipeline_size() const { return pipeline_size_; }
  // Model chunks per rank (Megatron's virtual_pipeline_model_parallel_size; 1: no interleaving).
  int virtual_pipeline_size() const { return virtual_size_; }
  bool interleaved() const { return virtual_size_ > 1; }

  // Layers of pipeline rank pp_rank's model chunk vp_stage, and the global
  // index of its first layer (Megatron's get_transformer_layer_offset).
  int64_t num_layers(int pp_rank, int vp_stage) const;
  int64_t layer_offset(int pp_rank, int vp_stage) const;
  // Layers on a pipeline rank over all its chunks.
  int64_t num_layers_on_rank(int pp_rank) const;
  // Megatron's pre_process (embedding) and post_process (final norm, output layer, loss).
  bool is_first_stage(int pp_rank, int vp_stage) const { return pp_rank == 0 && vp_stage == 0; }
  bool is_last_stage(int pp_rank, int vp_stage) const {
    return pp_rank == pipeline_size_ - 1 && vp_stage == virtual_size_ - 1;
  }
  // The (pp_rank, vp_stage) holding global layer `layer`.
  std::pair<int, int> owner(int64_t layer) const;

  // "pp 0: [0-1] [4-5]; pp 1: [2-3] [6-7]" (the layers of each chunk).
  std::string format() const;

 private:
  int64_t num_layers_ = 0;
  int pipeline_size_ = 1, virtual_size_ = 1;
  // Layers of each chunk, in the model's order: chunk vp of every rank, then vp + 1.
  std::vector<int64_t> chunk_layers_;
  std::vector<int64_t> chunk_offset_;
  void set_chunks(const std::vector<int64_t>& rank_layers, int64_t less_first, int64_t less_last);
};

}  // namespace qk::parallel
