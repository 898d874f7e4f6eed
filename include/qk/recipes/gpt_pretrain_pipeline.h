// Pipeline parallelism in `qk pretrain-gpt` (Megatron's pretrain with
// --pipeline-model-parallel-size > 1): this rank's model chunks, one module
// over them with the unsplit model's names (what the optimizer, the
// tensor-parallel specs and checkpoints see), and the schedule's training
// and evaluation steps for the Trainer (qk/train/trainer.h CustomSteps).
//
//   GptPipelineStage stage = build_gpt_pipeline_stage(a, cfg, pp->rank(), tp);
//   auto opt = build_gpt_stage_optimizer(args, stage, dp.get());
//   opt->set_pipeline_parallel(stage.pipeline_parallel(pp.get(), embedding.get()));
//   GptPipelineSteps steps(stage, *opt, {...});
//   trainer.set_custom_steps({[&] { return steps.step(train_it); },
//                             [&](int64_t n) { return steps.forward_only(*valid_it, n); }});
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "qk/parallel/pipeline_schedule.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/transformer/gpt_pipeline.h"

namespace qk::recipes {

struct GptPipelineStage {
  parallel::PipelineLayerSplit split;
  std::vector<transformer::GPTModelChunk> chunks;
  std::shared_ptr<nn::Module> model;  // the chunks' parameters under the unsplit names
  // Tensor parallelism over the chunks (their shard specs by unsplit name).
  parallel::TensorParallel tensor_parallel(dist::ProcessGroup* tp) const;
  // The optimizer's and checkpoints' view (tied embedding, groups).
  parallel::PipelineParallel pipeline_parallel(dist::ProcessGroup* pp, dist::ProcessGroup* embedding) const;
};

// The split from the flags (--num-layers, --pipeline-model-parallel-size,
// the virtual-stage and uneven-stage flags) and this pipeline rank's chunks,
// initialised as the unsplit model (the default generator must hold the
// seed); then Megatron's per-stage seed (seed + 100 x pipeline rank) for
// the stages after the first.
// ep: the MoE layers' expert-parallel group (null: none).
GptPipelineStage build_gpt_pipeline_stage(const MegatronArgs& a, const transformer::TransformerConfig& cfg,
                                          int pp_rank, std::shared_ptr<dist::ProcessGroup> tp,
                                          std::shared_ptr<dist::ProcessGroup> ep = nullptr);

// The stage's optimizer (gpt_build_optimizer over the stage's parameters):
// the plain one, or with --use-distributed-optimizer / --overlap-grad-reduce
// one ParamAndGradBuffer over all of this rank's chunks, reduced over `dp`,
// the tied weight in a bucket of its own; with --overlap-param-gather each
// chunk's parts wait for their own buckets' all-gather in the forward.
std::unique_ptr<optim::MixedPrecisionOptimizer> build_gpt_stage_optimizer(const MegatronArgs& a,
                                                                          GptPipelineStage& stage,
                                                                          dist::ProcessGroup* dp,
                                                                          const parallel::ExpertParallel& expert = {});

struct GptPipelineOptions {
  dist::ProcessGroup* pp = nullptr;  // required
  dist::ProcessGroup* dp = nullptr;  // null: one data-parallel rank
  int64_t num_microbatches = 1;
  int64_t micro_batch_size = 1;
  int64_t seq_length = 0;             // per rank under sequence parallelism
  int64_t hidden_size = 0;
  DType dtype = DType::f32;           // the activations stages exchange
  Device device = kCPU;               // the stage's model, its batches and the activations it receives
  std::optional<DType> autocast;
  bool overlap_p2p_comm = false;
  // --profile: the first max_profiled_steps steps' spans (forward, backward,
  // send, recv, optimizer) and the measured bubble of each.
  parallel::Timeline* timeline = nullptr;
  int64_t max_profiled_steps = 20;
  std::function<void(double loss)> check_loss;  // the last stage's loss of each micro-batch
  std::function<void()> after_training_forward;  // after each chunk's forward in training (MoE statistics)
};

class GptPipelineSteps {
 public:
  GptPipelineSteps(GptPipelineStage& stage, optim::MixedPrecisionOptimizer& opt, GptPipelineOptions o);
  ~GptPipelineSteps();
  void set_scheduler(optim::OptimizerParamScheduler* scheduler, int64_t increment);
  // One iteration as StepRunner::step: the schedule (1F1B or interleaved)
  // over num_microbatches micro-batches, the data-parallel reduction, the
  // optimizer (pipeline-wide norm and inf check), the scheduler; metrics
  // from the last stage on every rank, averaged over data-parallel ranks.
  train::StepStats step(GptBatchIterator& data);
  // The forward-only schedule over `microbatches` micro-batches.
  std::map<std::string, double> forward_only(GptBatchIterator& data, int64_t microbatches);
  // --profile: the measured bubble (idle / step time inside the window
  // common to the stages, averaged over them) summed over the profiled
  // steps since the last take, and how many; zeroes it.
  std::pair<double, int64_t> take_bubble();
  int64_t profiled_steps() const { return profiled_; }
  // The schedule's activation and gradient communicators (for the traffic line).
  std::vector<dist::ProcessGroup*> p2p_groups() const { return schedule_->p2p_groups(); }

 private:
  parallel::ForwardStepResult forward(int chunk, int64_t microbatch, const Tensor& input);
  std::map<std::string, double> reduce(const parallel::StepMetrics& last_stage) const;
  const GptBatch& batch(int64_t microbatch);
  GptPipelineStage& stage_;
  optim::MixedPrecisionOptimizer& opt_;
  GptPipelineOptions o_;
  std::unique_ptr<parallel::PipelineSchedule> schedule_;
  optim::OptimizerParamScheduler* sched_ = nullptr;
  int64_t increment_ = 0;
  GptBatchIterator* data_ = nullptr;  // this step's
  std::vector<GptBatch> batches_;     // this step's micro-batches read so far
  int64_t profiled_ = 0;
  double bubble_sum_ = 0;
  int64_t bubble_steps_ = 0;
};

}  // namespace qk::recipes
