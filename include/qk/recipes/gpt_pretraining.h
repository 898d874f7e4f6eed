// pretrain_gpt() in Megatron-LM's stages (megatron/training/training.py's
// pretrain): each stage is a call, so a C++ program can run the recipe step
// by step and look at, or change, what a stage built before the next one.
//
//   qk::recipes::GptPretraining run(args, {.notes = parsed.notes});
//   run.initialize();                  // initialize_megatron: device, job, rank grid, output folder
//   run.setup_model_and_optimizer();   // tokenizer, model, optimizer, scheduler, Trainer, --load
//   run.build_data_iterators();        // datasets and the train/validation iterators
//   run.trainer().meter_traffic("my-group", group);   // e.g. between stages
//   if (run.train() == qk::train::ExitReason::finished)   // the loop, with evaluation and checkpoints
//     run.evaluate();                  // the final validation and test
//   const qk::recipes::PretrainGptResult& r = run.result();
//
// Stages run once each, in this order (a stage called out of order throws
// qk::Error naming the one missing). Everything a stage built stays where it
// is until the GptPretraining is destroyed: the object cannot be copied or
// moved.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "qk/dist/process_group.h"
#include "qk/nn/module.h"
#include "qk/optim/mixed_precision_optimizer.h"
#include "qk/optim/optimizer_param_scheduler.h"
#include "qk/parallel/model_parallel.h"
#include "qk/parallel/parallel_state.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/recipes/gpt_pretrain_moe.h"
#include "qk/recipes/gpt_pretrain_pipeline.h"
#include "qk/tensor/device.h"
#include "qk/train/trainer.h"
#include "qk/transformer/gpt_model.h"

namespace qk::recipes {

// The job of this process (Megatron's initialize_megatron): qk run's or
// torchrun's environment, Megatron's rank grid over it and this rank's
// groups (null where the job has one rank, or the size is 1), and where the
// run's files go.
struct GptJob {
  Device device = kCPU;
  int rank = 0, size = 1;
  std::shared_ptr<parallel::ParallelState> ps;          // null for one rank
  std::shared_ptr<dist::ProcessGroup> tp, dp;           // this rank's groups
  std::shared_ptr<dist::ProcessGroup> pp, embedding;    // pipeline (embedding: first and last stage only)
  std::shared_ptr<dist::ProcessGroup> ep, expert_dp;    // experts (null below expert-parallel size 2)
  dist::ProcessGroup* world = nullptr;                  // every rank (null for one rank)
  std::string output_dir;                               // metrics.jsonl, training_curves.png, ...
  bool lead() const { return rank == 0; }
  int tp_size() const { return tp ? tp->size() : 1; }
  int dp_rank() const { return dp ? dp->rank() : 0; }
  int dp_size() const { return dp ? dp->size() : 1; }
  int pp_rank() const { return pp ? pp->rank() : 0; }
  int pp_size() const { return pp ? pp->size() : 1; }
  int ep_size() const { return ep ? ep->size() : 1; }
  train::DataParallel data_parallel() const { return {dp.get(), nullptr}; }
};

class GptPretraining {
 public:
  // `a` must come from parse_megatron_args / validate_megatron_args with
  // this job's world size; it is copied.
  explicit GptPretraining(const MegatronArgs& a, PretrainGptOptions o = {});
  ~GptPretraining();
  GptPretraining(const GptPretraining&) = delete;
  GptPretraining& operator=(const GptPretraining&) = delete;

  // ---- the stages, in order

  // The device (a device this machine lacks stops the run before anything
  // is read or written), the job and its rank grid, one compute thread per
  // core of this rank's share, the output folder; logs the arguments and
  // the layout.
  void initialize();
  // Tokenizer; model (this rank's pipeline stage under pipeline
  // parallelism), seeded as Megatron seeds it; the MoE layers' hooks; model
  // parallelism; optimizer, scheduler and Trainer; then --load (Hugging
  // Face weights before the optimizer copies them, or a checkpoint of any
  // layout; a missing one is a warning unless --exit-on-missing-checkpoint).
  void setup_model_and_optimizer();
  // The three splits' datasets (rank 0 builds and caches the indices first)
  // and the train and validation iterators at the resumed position; the
  // GEMM peak for MFU when PretrainGptOptions::measure_gemm_peak.
  void build_data_iterators();
  // The loop with periodic evaluation and checkpoints (the pipeline
  // schedule under pipeline parallelism), Megatron's log lines, the MoE
  // statistics and heat map, the --profile trace. Returns why it stopped.
  train::ExitReason train();
  // Megatron's final evaluation: validation continuing where it was, the
  // test split from its start. Only after train() finished.
  void evaluate();

  // ---- what the stages built

  const MegatronArgs& args() const;
  const PretrainGptOptions& options() const;
  const GptJob& job() const;                              // initialize
  const data::Tokenizer& tokenizer() const;               // setup_model_and_optimizer ...
  const transformer::TransformerConfig& config() const;
  nn::Module& model();                                    // the GPT, or this rank's stage
  transformer::GPTModel gpt();                            // null under pipeline parallelism
  GptPipelineStage* pipeline_stage();                     // null without pipeline parallelism
  const parallel::ModelParallel& model_parallel() const;
  optim::MixedPrecisionOptimizer& optimizer();
  optim::OptimizerParamScheduler& scheduler();
  train::Trainer& trainer();
  const GptDatasets& datasets() const;                    // build_data_iterators
  const PretrainGptResult& result() const;                // filled in as the stages run

 private:
  struct State;
  void require(int stage, const char* caller) const;
  void say(const std::string& line) const;
  void say_datetime(const std::string& what) const;
  void build_model();
  void build_optimizer();
  void load_checkpoint();
  void check_loss(double value, int64_t iteration) const;
  train::MicroBatchOutput forward(GptBatchIterator& it);
  std::map<std::string, train::Metric> load_graph_inputs(int64_t microbatch);
  train::MicroBatchOutput graphed_forward(int64_t microbatch);
  void set_up_pipeline_steps();
  train::TrainerCallbacks callbacks();
  void on_log(const train::LogStats& s);
  void write_moe_heatmap_and_trace();
  std::unique_ptr<State> s_;
};

}  // namespace qk::recipes
