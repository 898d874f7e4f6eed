// Training checkpoints: a step folder of qk/base/checkpoint_dir.h (written
// under a temporary name, checksummed, renamed whole) holding
//   model.safetensors   the model's state dict, whole and by name
//   optim.safetensors   fp32 main weights and optimizer state, by name
//                       (MixedPrecisionOptimizer::save_state)
//   manifest.json       checksums and the JSON below
// The JSON: {"format", "iteration", "consumed_train_samples",
// "consumed_valid_samples", "weights", "optimizer_state", "scheduler",
// "grad_scaler" (the loss scaler), "rng": [{"seed", "offset"} per data-parallel rank],
// "tp_rng": [the same per tensor-parallel rank: its dropout generator],
// "args": the run's arguments, "user": the caller's own state}.
// Nothing depends on how the model was split over ranks: under tensor
// parallelism the shards of the weights, the fp32 main weights and the
// optimizer's moments are gathered into whole tensors on save
// (train_tensors) and each rank cuts its shards on load (LoadOptions::tp),
// so a checkpoint saved at one tensor x data-parallel layout loads at any other.
//
//   // tensor parallel: every rank of tp gathers, one rank of the job writes
//   const qk::train::TrainTensors whole = qk::train::train_tensors(st, tp);
//   m.tp_rng = qk::train::gather_tensor_parallel_rng_states(tp);
//   if (job_rank == 0) qk::train::save_checkpoint(ckpts, name, st, m, &whole);
//   ... load_train_state(dir, json, where, st, {.rank = dp.rank(), .tp = &tp});
//
//   qk::train::TrainState st{model.get(), &opt, &sched};
//   qk::train::CheckpointMeta m;
//   m.progress = {iteration, consumed_samples};
//   m.rng = qk::train::gather_rng_states(dp);           // collective
//   if (dp.rank() == 0) qk::train::save_checkpoint(ckpts, qk::train::iteration_folder(iteration), st, m);
//   ...
//   if (auto c = qk::train::find_checkpoint("runs/x/checkpoints"))      // every rank
//     auto loaded = qk::train::load_train_state(c->path + "/", c->meta, c->path, st, {.rank = dp.rank()});
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qk/base/checkpoint_dir.h"
#include "qk/nn/module.h"
#include "qk/nn/safetensors.h"
#include "qk/optim/optimizer_param_scheduler.h"
#include "qk/optim/mixed_precision_optimizer.h"
#include "qk/parallel/model_parallel.h"
#include "qk/train/step_runner.h"

namespace qk::train {

inline constexpr const char* kTrainCheckpointFormat = "qk-train-checkpoint-v1";

// Megatron's counters: iterations done and samples consumed (the data
// position: a resumed sampler starts at consumed_train_samples).
struct TrainProgress {
  int64_t iteration = 0;
  int64_t consumed_train_samples = 0;
  int64_t consumed_valid_samples = 0;
};

struct RngState {
  uint64_t seed = 0, offset = 0;  // the default generator's (seed, counter)
};

// What is saved and restored; null members are left out.
struct TrainState {
  nn::Module* model = nullptr;
  optim::MixedPrecisionOptimizer* optimizer = nullptr;
  optim::OptimizerParamScheduler* scheduler = nullptr;
};

struct CheckpointMeta {
  std::string format = kTrainCheckpointFormat;
  TrainProgress progress;
  std::vector<RngState> rng;        // one per data-parallel rank (gather_rng_states)
  std::vector<RngState> tp_rng;     // one per tensor-parallel rank (gather_tensor_parallel_rng_states);
                                    // under pipeline parallelism stage by stage (stage x tp size)
  std::vector<RngState> pp_rng;     // one per pipeline stage: its default generator (gather_pipeline_stages)
  std::string args_json = "{}";     // the run's arguments, a JSON value
  std::string user_json = "null";   // the caller's own state, a JSON value
  std::string weights_file = "model.safetensors";
  std::string optimizer_file = "optim.safetensors";  // "": no optimizer state (--no-save-optim)
  nn::Metadata weights_metadata;    // extra entries for the weights' safetensors header
};

// "iter_0000000100": the step folder of an iteration (sorts in order).
std::string iteration_folder(int64_t iteration);

// Every data-parallel rank's default-generator state, rank order. Collective.
std::vector<RngState> gather_rng_states(const DataParallel& dp);

// Every tensor-parallel rank's dropout-generator state, rank order (empty
// without a generator). Collective over tp.group.
std::vector<RngState> gather_tensor_parallel_rng_states(const parallel::TensorParallel& tp);

// What a checkpoint stores of a TrainState's model and optimizer: whole
// tensors by name. Without tensor parallelism the model's state dict and
// the optimizer's state as they are; with it, every shard gathered
// (collective: every rank of tp.group calls it).
struct TrainTensors {
  nn::TensorMap weights;
  std::optional<optim::MixedPrecisionOptimizer::StateByName> optimizer;  // when the TrainState has one
};
TrainTensors train_tensors(const TrainState& s, const parallel::TensorParallel& tp = {});

// Pipeline parallelism: every stage's whole tensors (the tied embedding
// copy left out) and its generators into stage 0's `t` and `m` (pp_rng, and
// tp_rng stage by stage), so the checkpoint holds the unsplit model by name;
// `opt` (when the tensors hold its state): its groups' parameter counts are
// summed over the stages. Collective over pp.group (point to point to
// stage 0); a no-op for one stage.
void gather_pipeline_stages(TrainTensors& t, CheckpointMeta& m, const parallel::PipelineParallel& pp,
                            const optim::MixedPrecisionOptimizer* opt = nullptr);

// Expert parallelism: every expert-parallel rank's routed experts (weights,
// optimizer tensors and their "KEY/NAME" metadata) into rank 0's `t`, the
// optimizer groups' "group.G.num_params" counting them (`opt`: whose
// groups, when the tensors hold its state). Collective over ep.ep (point to
// point to its rank 0); run before gather_pipeline_stages; a no-op for one rank.
void gather_expert_parallel(TrainTensors& t, const parallel::ExpertParallel& ep,
                            const optim::MixedPrecisionOptimizer* opt = nullptr);

// Writes the weights and optimizer files into `dir` (each under a temporary
// name, then renamed) and returns the checkpoint's JSON, which names them.
// `tensors`: what train_tensors gathered (null: the TrainState's own).
std::string write_train_state(const std::string& dir, const TrainState& s, const CheckpointMeta& m,
                              const TrainTensors* tensors = nullptr);

// A committed step folder ROOT/name. Run by one rank.
CheckpointInfo save_checkpoint(const CheckpointDir& ckpts, const std::string& name, const TrainState& s,
                               const CheckpointMeta& m, const TrainTensors* tensors = nullptr);

// What save_checkpoint writes, apart from the training state: host copies of
// the tensors and the scheduler's and loss scaler's state as they were when
// it was taken, so training may go on while it is written (AsyncCheckpointSaver).
struct CheckpointSnapshot {
  TrainTensors tensors;
  CheckpointMeta meta;
  bool with_optimizer = false;   // the optimizer file is written
  std::string scheduler_json;    // "": no scheduler
  std::string grad_scaler_json;  // "": no loss scaler
};
// Takes the snapshot (copies every tensor to the host; `tensors` as for
// save_checkpoint). Run by the rank that writes.
CheckpointSnapshot snapshot_train_state(const TrainState& s, const CheckpointMeta& m,
                                        const TrainTensors* tensors = nullptr);
// write_train_state and save_checkpoint of a snapshot: the same files, byte for byte.
std::string write_snapshot(const std::string& dir, const CheckpointSnapshot& snap);
CheckpointInfo save_snapshot(const CheckpointDir& ckpts, const std::string& name, const CheckpointSnapshot& snap);

struct LoadOptions {
  bool load_model = true;
  bool no_load_optim = false;  // fresh optimizer, scheduler and loss scaler
  bool no_load_rng = false;
  bool finetune = false;       // weights only; iteration and consumed samples back to 0
  int rank = 0;                // whose RNG state this process takes
  // Tensor parallelism: each rank keeps its shards of the whole tensors and
  // takes its rank's dropout generator (when the checkpoint has one per rank
  // of this size; another layout's generators are left as seeded).
  const parallel::TensorParallel* tp = nullptr;
  // Pipeline parallelism: each stage takes its own parameters from the
  // whole tensors (the tied copy from pp->tied_source) and its own
  // generators when the checkpoint has one per stage of this size.
  const parallel::PipelineParallel* pp = nullptr;
  // Expert parallelism: each rank takes its own experts from the whole tensors.
  const parallel::ExpertParallel* ep = nullptr;
};

struct LoadedCheckpoint {
  std::string where;           // the folder or sidecar, for messages
  CheckpointMeta meta;         // as saved (progress zeroed under finetune)
  bool optimizer_loaded = false;
  bool rng_loaded = false;
};

// Restores from a checkpoint's JSON; file names in it are relative to
// `dir` (which ends in '/' or is empty). Every rank calls it.
LoadedCheckpoint load_train_state(const std::string& dir, const std::string& json, const std::string& where,
                                  const TrainState& s, const LoadOptions& o);

// What --load names: the newest valid step folder under it, or the folder
// itself when it is one (holds manifest.json). nullopt: nothing there yet.
std::optional<CheckpointInfo> find_checkpoint(const std::string& load, std::vector<std::string>* skipped = nullptr);

}  // namespace qk::train
