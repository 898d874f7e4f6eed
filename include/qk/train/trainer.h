// Iteration-based training with Megatron-LM's semantics (pretrain() / train()
// in megatron/training/training.py): train_iters or train_samples, consumed
// samples, periodic logging and evaluation, checkpoints (save, save_interval,
// load, no_load_optim, no_load_rng, finetune), and the exit conditions
// exit_interval, exit_duration_in_mins and exit_signal_handler.
//
//   qk::train::TrainerOptions o;
//   o.train_iters = 1000;  o.global_batch_size = 64;  o.micro_batch_size = 4;
//   o.log_interval = 10;  o.eval_interval = 100;  o.eval_iters = 10;
//   o.save = o.load = "ckpt";  o.save_interval = 100;  o.exit_signal_handler = true;
//   o.metrics_file = "ckpt/metrics.jsonl";
//   qk::train::Trainer trainer(*model, opt, sched, o, dp);
//   trainer.load();                                      // every rank, before the data
//   auto train_data = make_iterator(trainer.progress().consumed_train_samples);
//   qk::train::TrainerCallbacks cb;
//   cb.train_step = [&](int64_t) { ...; return qk::train::MicroBatchOutput{loss, {{"lm loss", {l, 1}}}}; };
//   cb.valid_step = ...;                                  // same shape, no gradients
//   cb.on_log = [](const qk::train::LogStats& s) { print_megatron_line(s); };
//   auto result = trainer.train(cb);                     // result.exit_reason
//
// Per iteration (Megatron's order): the step (StepRunner: micro-batches,
// one reduction, the optimizer; the schedule advances global_batch_size
// samples on a successful update), iteration += 1, consumed samples +=
// global_batch_size (skipped iterations too); every log_interval a LogStats;
// every eval_interval an evaluation; then, in this order, the exit signal
// (save and stop), save_interval (save), exit_duration_in_mins (save unless
// just saved, stop), exit_interval (the same). At the end of train_iters a
// last checkpoint unless one was just written. Rank 0 writes checkpoints
// and the metrics file (and hands the metrics to on_metrics, where a recipe
// draws its curves); all ranks read checkpoints and must agree on the
// iteration they resumed at.
//
// With model parallelism (ModelParallel, qk/parallel/model_parallel.h) the
// data-parallel group is one of several: rank 0 of mp.world writes, all of
// its ranks agree on the iteration and on exits, checkpoints gather and
// scatter tensor-parallel shards by name, and LogStats::comm reports the
// bytes each group moved per iteration.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "qk/base/checkpoint_dir.h"
#include "qk/nn/module.h"
#include "qk/train/async_checkpoint.h"
#include "qk/train/checkpoint.h"
#include "qk/optim/optimizer_param_scheduler.h"
#include "qk/train/metrics_log.h"
#include "qk/optim/mixed_precision_optimizer.h"
#include "qk/parallel/model_parallel.h"
#include "qk/train/step_runner.h"
#include "qk/train/traffic_meter.h"

namespace qk::train {

struct TrainerOptions {
  int64_t train_iters = 0;    // one of train_iters / train_samples
  int64_t train_samples = 0;  // train_iters = train_samples / global_batch_size
  int64_t global_batch_size = 0;
  int64_t micro_batch_size = 0;
  std::optional<DType> autocast{};  // forward under autocast (fp32 weights, bf16/f16 compute)

  int64_t log_interval = 100;
  int64_t eval_interval = 1000;   // 0: no periodic evaluation
  int64_t eval_iters = 100;       // iterations (of global batches) per evaluation

  std::string save;               // checkpoint folder ("": no checkpoints)
  int64_t save_interval = 0;      // 0: only at the end and on exit
  bool no_save_optim = false, no_save_rng = false;
  // Megatron's --async-save: a save costs the step a host copy of the state;
  // a background thread writes it (AsyncCheckpointSaver), at most one at a time.
  bool async_save = false;
  int keep_checkpoints = 1 << 30;  // step folders kept (Megatron keeps all)
  std::string load;               // checkpoint folder to resume from ("": none)
  bool no_load_optim = false, no_load_rng = false, finetune = false;

  int64_t exit_interval = 0;           // stop (and save) when iteration % exit_interval == 0
  double exit_duration_in_mins = 0;    // stop (and save) after this long since the Trainer started
  bool exit_signal_handler = false;    // finish the iteration, save and stop on exit_signal
  int exit_signal = SIGTERM;

  std::string metrics_file;       // JSONL ("": none)
  int64_t tokens_per_sample = 0;  // for tokens/s (the sequence length)
  double flops_per_sample = 0;    // for achieved TFLOP/s per rank
  std::string args_json = "{}";   // saved in each checkpoint
  bool reduce_metrics = true;     // average metrics over ranks every iteration
  // Graphed steps (--cuda-graph): the micro-batches' forward and backward
  // recorded as a device graph on this device after graph_warmup_steps
  // eager steps, then replayed (StepRunner::step(GraphedForwardStep)); the
  // callbacks give train_load. One data-parallel rank, no custom steps.
  std::optional<Device> graph_device{};
  int64_t graph_warmup_steps = 3;
};

// What one log_interval reports: Megatron's iteration line, as numbers.
struct LogStats {
  int64_t iteration = 0, train_iters = 0;
  int64_t consumed_samples = 0;
  double elapsed_ms_per_iteration = 0;  // over the interval
  double learning_rate = 0;             // the first group's, after this iteration's update
  double weight_decay = 0;
  int64_t global_batch_size = 0;
  std::map<std::string, double> losses;  // means over the interval's updated iterations
  float loss_scale = 1;
  double grad_norm = 0;                  // this iteration's (NaN when skipped)
  int64_t num_zeros_in_grad = -1;
  int64_t skipped_iterations = 0;        // in the interval
  int64_t nan_iterations = 0;            // skipped with a non-finite loss, in the interval
  double samples_per_second = 0;
  double tokens_per_second = 0;          // 0 without tokens_per_sample
  double tflops_per_rank = 0;            // 0 without flops_per_sample; over every rank of the job
  uint64_t peak_memory_bytes = 0;        // this process's peak RSS
  double comm_wait_ms = 0;               // DDP wait of this iteration
  // Per iteration of the interval: "tp", "dp" and meter_traffic's labels (groups of 2+ ranks).
  std::vector<GroupVolume> comm;
};

struct EvalStats {
  int64_t iteration = 0;
  std::map<std::string, double> metrics;  // over eval_iters iterations and ranks
  int64_t consumed_valid_samples = 0;
  double seconds = 0;
};

struct TrainerCallbacks {
  ForwardStep train_step;                            // required
  // With TrainerOptions::graph_device: micro-batch i's inputs into the
  // tensors train_step reads, and its metrics' host parts (GraphedForwardStep::load).
  std::function<std::map<std::string, Metric>(int64_t microbatch)> train_load;
  ForwardStep valid_step;                            // optional
  std::function<void(const LogStats&)> on_log;       // every rank; rank 0 usually prints
  // Every rank, at each log before the record is written (it may reduce over
  // ranks): more values for LogStats::losses, e.g. the MoE auxiliary losses.
  std::function<std::map<std::string, double>(int64_t iteration)> log_losses;
  std::function<void(const EvalStats&)> on_eval;
  std::function<void(int64_t iteration, const StepStats&)> on_step;  // every iteration
  std::function<std::string()> user_state;           // JSON saved with each checkpoint
  std::function<void(const CheckpointInfo&)> on_save;  // rank 0, after a commit
  // Rank 0 of the job, with a metrics file: the records so far, after each
  // checkpoint and at the end (recipes::plot_metrics draws them as curves).
  std::function<void(const MetricsLog&)> on_metrics;
};

// Steps the Trainer runs in place of its StepRunner (pipeline parallelism,
// whose schedule interleaves micro-batches over stages): `train` one
// iteration (gradients, reduction, optimizer, scheduler), `evaluate` the
// metrics of forward-only passes over that many micro-batches of the
// validation data. Either may be empty (StepRunner's then).
struct CustomSteps {
  std::function<StepStats()> train;
  std::function<std::map<std::string, double>(int64_t microbatches)> evaluate;
};

// Whether a value of a "train" record in the metrics file is a loss (the
// losses of LogStats) rather than one of the trainer's statistics.
bool is_loss_field(const std::string& key);

enum class ExitReason { finished, exit_interval, exit_duration, signal };
const char* exit_reason_name(ExitReason r);

struct TrainResult {
  ExitReason exit_reason = ExitReason::finished;
  TrainProgress progress;
  std::optional<CheckpointInfo> last_checkpoint;  // rank 0: the newest it wrote
};

class Trainer {
 public:
  Trainer(nn::Module& model, optim::MixedPrecisionOptimizer& optimizer, optim::OptimizerParamScheduler& scheduler,
          TrainerOptions o, DataParallel dp = {}, parallel::ModelParallel mp = {});
  ~Trainer();

  // Resumes from options().load when it holds a checkpoint (every rank; the
  // ranks must find the same iteration). nullopt: nothing to load.
  std::optional<LoadedCheckpoint> load();
  // Before train(): steps that replace StepRunner's (see CustomSteps).
  void set_custom_steps(CustomSteps s) { custom_ = std::move(s); }
  // Before train(): LogStats::comm reports `group`'s bytes per iteration
  // too, under `label` (beside "tp" and "dp"; one label sums its groups).
  void meter_traffic(std::string label, dist::ProcessGroup* group) { traffic_.add(std::move(label), group); }
  TrainResult train(const TrainerCallbacks& cb);
  // eval_iters iterations of valid_step in eval mode without gradients.
  EvalStats evaluate(const ForwardStep& valid_step);
  // A checkpoint of the current state (collective; rank 0 writes). With
  // async_save rank 0 takes a snapshot, starts writing it and returns the
  // earlier save it waited for, if any; train() reports each one (on_save)
  // when it is on disk and waits for the last before it returns.
  std::optional<CheckpointInfo> save(const TrainerCallbacks& cb = {});

  const TrainProgress& progress() const { return progress_; }
  int64_t train_iters() const { return train_iters_; }
  int64_t num_microbatches() const { return runner_->options().num_microbatches; }
  const TrainerOptions& options() const { return o_; }
  StepRunner& runner() { return *runner_; }
  // The user state of the checkpoint load() restored ("null" if none).
  const std::string& loaded_user_state() const { return loaded_user_; }

 private:
  // Every rank of the job (the data-parallel group without model parallelism).
  DataParallel job() const { return {parallel::job_group(mp_, dp_.group), nullptr}; }
  // Rank 0, once a checkpoint is committed: Megatron's tracker file, the callbacks.
  void after_save(const CheckpointInfo& info, int64_t iteration, const TrainerCallbacks& cb);
  // An asynchronous save that finished (poll) or, with wait, the one in flight: after_save for it.
  std::optional<CheckpointInfo> finish_async_save(bool wait, const TrainerCallbacks& cb);
  nn::Module& model_;
  optim::MixedPrecisionOptimizer& opt_;
  optim::OptimizerParamScheduler& sched_;
  TrainerOptions o_;
  DataParallel dp_;
  parallel::ModelParallel mp_;
  TrafficMeter traffic_;
  std::unique_ptr<StepRunner> runner_;
  CustomSteps custom_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<AsyncCheckpointSaver> saver_;  // rank 0 with async_save
  int64_t saving_iteration_ = 0;                 // the iteration of the save in flight
  TrainProgress progress_;
  int64_t train_iters_ = 0;
  double start_s_ = 0;
  std::string loaded_user_ = "null";
  bool loaded_ = false;
};

}  // namespace qk::train
