// Trainer: Megatron's train() loop over StepRunner, with its logging,
// evaluation, checkpoint and exit rules.
#include "qk/train/trainer.h"

#include <cmath>
#include <set>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"
#include "qk/base/timer.h"
#include "qk/train/exit_signal.h"

namespace qk::train {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The log interval's clock: evaluation and checkpoint writes are left out,
// as Megatron stops its interval timer around them.
class IntervalClock {
 public:
  double seconds() const { return done_ + (running_ ? t_.seconds() : 0.0); }
  void pause() {
    done_ += t_.seconds();
    running_ = false;
  }
  void resume() {
    t_.reset();
    running_ = true;
  }
  void restart() {
    done_ = 0;
    resume();
  }

 private:
  Timer t_;
  double done_ = 0;
  bool running_ = true;
};

// Fields of a "train" record that are not losses.
const std::set<std::string>& train_fields() {
  static const std::set<std::string> f{"consumed_samples",   "elapsed_ms_per_iteration", "learning_rate",
                                       "weight_decay",       "global_batch_size",        "loss_scale",
                                       "grad_norm",          "num_zeros_in_grad",        "skipped_iterations",
                                       "nan_iterations",     "samples_per_second",       "tokens_per_second",
                                       "tflops_per_rank",    "peak_memory_bytes",        "comm_wait_ms"};
  return f;
}

std::map<std::string, double> record_of(const LogStats& s) {
  std::map<std::string, double> r = s.losses;
  r["consumed_samples"] = static_cast<double>(s.consumed_samples);
  r["elapsed_ms_per_iteration"] = s.elapsed_ms_per_iteration;
  r["learning_rate"] = s.learning_rate;
  r["weight_decay"] = s.weight_decay;
  r["global_batch_size"] = static_cast<double>(s.global_batch_size);
  r["loss_scale"] = s.loss_scale;
  r["grad_norm"] = s.grad_norm;
  if (s.num_zeros_in_grad >= 0) r["num_zeros_in_grad"] = static_cast<double>(s.num_zeros_in_grad);
  r["skipped_iterations"] = static_cast<double>(s.skipped_iterations);
  r["nan_iterations"] = static_cast<double>(s.nan_iterations);
  r["samples_per_second"] = s.samples_per_second;
  if (s.tokens_per_second > 0) r["tokens_per_second"] = s.tokens_per_second;
  if (s.tflops_per_rank > 0) r["tflops_per_rank"] = s.tflops_per_rank;
  r["peak_memory_bytes"] = static_cast<double>(s.peak_memory_bytes);
  r["comm_wait_ms"] = s.comm_wait_ms;
  for (const GroupVolume& v : s.comm) {
    const std::string k = "comm/" + v.group + "/";
    r[k + "bytes"] = v.bytes();
    r[k + "all_reduce_bytes"] = v.all_reduce;
    r[k + "all_gather_bytes"] = v.all_gather;
    r[k + "reduce_scatter_bytes"] = v.reduce_scatter;
    r[k + "other_bytes"] = v.other;
    r[k + "calls"] = v.calls;
    r[k + "wire_bytes_sent"] = v.wire_sent;
    r[k + "wire_bytes_received"] = v.wire_received;
  }
  return r;
}

}  // namespace

bool is_loss_field(const std::string& key) {
  return !train_fields().count(key) && key.rfind("comm/", 0) != 0;
}

const char* exit_reason_name(ExitReason r) {
  switch (r) {
    case ExitReason::finished: return "finished";
    case ExitReason::exit_interval: return "exit_interval";
    case ExitReason::exit_duration: return "exit_duration";
    case ExitReason::signal: return "signal";
  }
  return "?";
}

Trainer::Trainer(nn::Module& model, optim::MixedPrecisionOptimizer& optimizer,
                 optim::OptimizerParamScheduler& scheduler, TrainerOptions o, DataParallel dp,
                 parallel::ModelParallel mp)
    : model_(model),
      opt_(optimizer),
      sched_(scheduler),
      o_(std::move(o)),
      dp_(dp),
      mp_(std::move(mp)),
      start_s_(now_seconds()) {
  QK_CHECK_AS(ValueError, (o_.train_iters > 0) != (o_.train_samples > 0),
              "Give exactly one of --train-iters and --train-samples (got ", o_.train_iters, " and ",
              o_.train_samples, ")");
  const int64_t k = train::num_microbatches(o_.global_batch_size, o_.micro_batch_size, dp_.size());
  train_iters_ = o_.train_iters > 0 ? o_.train_iters : o_.train_samples / o_.global_batch_size;
  QK_CHECK_AS(ValueError, train_iters_ > 0, "--train-samples ", o_.train_samples,
              " is less than one global batch (", o_.global_batch_size, ")");
  QK_CHECK_AS(ValueError, o_.log_interval > 0, "--log-interval must be > 0, got ", o_.log_interval);
  QK_CHECK_AS(ValueError, o_.eval_interval >= 0 && o_.eval_iters >= 0 && o_.save_interval >= 0 &&
                              o_.exit_interval >= 0 && o_.exit_duration_in_mins >= 0,
              "--eval-interval, --eval-iters, --save-interval, --exit-interval and --exit-duration-in-mins must "
              "be >= 0");
  QK_CHECK_AS(ValueError, o_.keep_checkpoints >= 1, "keep_checkpoints must be >= 1, got ", o_.keep_checkpoints);
  runner_ = std::make_unique<StepRunner>(
      opt_, dp_,
      StepRunnerOptions{.num_microbatches = k,
                        .autocast = o_.autocast,
                        .reduce_metrics = o_.reduce_metrics,
                        .graph_warmup_steps = o_.graph_warmup_steps});
  runner_->set_scheduler(&sched_, o_.global_batch_size);
  traffic_.add("tp", mp_.tp.group);
  traffic_.add("dp", dp_.group);
  traffic_.add("ep", mp_.ep.ep);
  traffic_.add("expert_dp", mp_.ep.expert_dp);
}

Trainer::~Trainer() = default;

std::optional<LoadedCheckpoint> Trainer::load() {
  std::optional<LoadedCheckpoint> out;
  if (!o_.load.empty()) {
    if (auto c = find_checkpoint(o_.load)) {
      LoadOptions lo;
      lo.no_load_optim = o_.no_load_optim;
      lo.no_load_rng = o_.no_load_rng;
      lo.finetune = o_.finetune;
      lo.rank = dp_.rank();
      lo.tp = &mp_.tp;
      lo.pp = &mp_.pp;
      lo.ep = &mp_.ep;
      out = load_train_state(c->path + "/", c->meta, c->path, {&model_, &opt_, &sched_}, lo);
      progress_ = out->meta.progress;
      loaded_user_ = out->meta.user_json;
      loaded_ = true;
    }
  }
  if (const DataParallel all = job(); all.size() > 1) {
    // Every rank must stand at rank 0's iteration: ranks reading different
    // folders (no shared filesystem) would train apart.
    Tensor range = from_vector<int64_t>({progress_.iteration, -progress_.iteration}, {2});
    all.group->all_reduce(range, dist::ReduceOp::max);
    const int64_t hi = range.data_ptr<int64_t>()[0], lo = -range.data_ptr<int64_t>()[1];
    QK_CHECK_AS(ValueError, hi == lo, "The ranks resumed at different iterations (", lo, " to ", hi,
                "; this is rank ", all.rank(), " at ", progress_.iteration,
                "): every rank must read the same checkpoints; is '", o_.load, "' on a filesystem all nodes share?");
  }
  return out;
}

EvalStats Trainer::evaluate(const ForwardStep& valid_step) {
  QK_CHECK_AS(ValueError, valid_step || custom_.evaluate, "Trainer::evaluate: no valid_step");
  const Timer t;
  const bool was_training = model_.is_training();
  model_.eval();
  EvalStats e;
  e.iteration = progress_.iteration;
  // Megatron sums every eval iteration's numerators and denominators, then divides.
  const int64_t microbatches = o_.eval_iters * runner_->options().num_microbatches;
  e.metrics = custom_.evaluate ? custom_.evaluate(microbatches) : runner_->forward_only(valid_step, microbatches);
  model_.train(was_training);
  progress_.consumed_valid_samples += o_.eval_iters * o_.global_batch_size;
  e.consumed_valid_samples = progress_.consumed_valid_samples;
  e.seconds = t.seconds();
  return e;
}

std::optional<CheckpointInfo> Trainer::save(const TrainerCallbacks& cb) {
  if (o_.save.empty()) return std::nullopt;
  CheckpointMeta m;
  m.progress = progress_;
  if (!o_.no_save_rng) m.rng = gather_rng_states(dp_);
  m.args_json = o_.args_json;
  if (cb.user_state) m.user_json = cb.user_state();
  if (o_.no_save_optim) m.optimizer_file.clear();
  opt_.finish_param_sync();                              // the weights rank 0 writes
  if (!o_.no_save_optim) opt_.gather_state_for_save(0);  // the distributed optimizer's shards, collective
  const TrainState st{&model_, o_.no_save_optim ? nullptr : &opt_, o_.no_save_optim ? nullptr : &sched_};
  // The tensor-parallel group of data-parallel rank 0 puts its shards
  // together (the other replicas hold the same); rank 0 of the job writes.
  std::optional<TrainTensors> whole;
  // Expert parallelism: the ranks of data-parallel rank 0's expert-parallel
  // group (expert-data-parallel rank 0) hold every expert once between
  // them; they send theirs to it, by name.
  const bool expert_holder = mp_.ep.active() && mp_.ep.expert_dp_rank() == 0;
  if (expert_holder) {
    QK_CHECK(mp_.ep.rank() != 0 || dp_.rank() == 0, "Trainer::save: expert-parallel rank 0 of expert-data-parallel "
             "rank 0 must be data-parallel rank 0 (Megatron's rank layout)");
    whole = train_tensors(st, mp_.tp);
    gather_expert_parallel(*whole, mp_.ep, o_.no_save_optim ? nullptr : &opt_);
    if (dp_.rank() != 0) whole.reset();
  }
  if (dp_.rank() == 0) {
    if (!whole) whole = train_tensors(st, mp_.tp);
    if (!o_.no_save_rng) m.tp_rng = gather_tensor_parallel_rng_states(mp_.tp);
    // Pipeline stages: tensor-parallel rank 0 of each sends its whole
    // tensors to the first stage (job rank 0 among them).
    if (mp_.tp.rank() == 0) gather_pipeline_stages(*whole, m, mp_.pp, o_.no_save_optim ? nullptr : &opt_);
    if (o_.no_save_rng) m.pp_rng.clear();
  }
  std::optional<CheckpointInfo> info;
  if (job().rank() == 0) {
    const CheckpointDir ckpts(o_.save, o_.keep_checkpoints);
    const std::string name = iteration_folder(progress_.iteration);
    if (o_.async_save) {
      if (!saver_) saver_ = std::make_unique<AsyncCheckpointSaver>(ckpts);
      info = finish_async_save(/*wait=*/true, cb);  // at most one in flight
      saver_->save(name, snapshot_train_state(st, m, whole ? &*whole : nullptr));
      saving_iteration_ = progress_.iteration;
    } else {
      info = save_checkpoint(ckpts, name, st, m, whole ? &*whole : nullptr);
      after_save(*info, progress_.iteration, cb);
    }
  }
  if (const DataParallel all = job(); all.size() > 1) all.group->barrier();
  return info;
}

std::optional<CheckpointInfo> Trainer::finish_async_save(bool wait, const TrainerCallbacks& cb) {
  if (!saver_) return std::nullopt;
  std::optional<CheckpointInfo> done = wait ? saver_->wait() : saver_->poll();
  if (done) after_save(*done, saving_iteration_, cb);
  return done;
}

void Trainer::after_save(const CheckpointInfo& info, int64_t iteration, const TrainerCallbacks& cb) {
  // Megatron's tracker file, for people and scripts that look for it.
  atomic_write_file(o_.save + "/latest_checkpointed_iteration.txt", std::to_string(iteration) + "\n");
  QK_DEBUG("saved checkpoint {} at iteration {}", info.path, iteration);
  if (cb.on_save) cb.on_save(info);
  if (cb.on_metrics && metrics_) cb.on_metrics(*metrics_);
}

TrainResult Trainer::train(const TrainerCallbacks& cb) {
  QK_CHECK_AS(ValueError, cb.train_step || custom_.train, "Trainer::train: no train_step callback");
  const bool graphed = o_.graph_device.has_value();
  QK_CHECK_AS(ValueError, !graphed || (cb.train_load && !custom_.train),
              "Trainer::train: graphed steps (graph_device) need a train_load callback and StepRunner's steps (not "
              "custom ones, e.g. a pipeline schedule)");
  const DataParallel all = job();
  const bool lead = all.rank() == 0;
  if (lead && !o_.metrics_file.empty())
    metrics_ = std::make_unique<MetricsLog>(o_.metrics_file, loaded_ ? progress_.iteration : -1);
  std::optional<ExitSignal> signal;
  if (o_.exit_signal_handler) signal.emplace(o_.exit_signal);
  model_.train();

  TrainResult result;
  IntervalClock interval;
  int64_t in_interval = 0, advanced = 0, skipped = 0, nans = 0;
  std::map<std::string, double> loss_sums;
  bool ran = false, saved = false;
  auto do_save = [&] {
    interval.pause();
    if (auto info = save(cb)) result.last_checkpoint = info;
    interval.resume();
    saved = true;
  };
  while (progress_.iteration < train_iters_ &&
         (o_.train_samples == 0 || progress_.consumed_train_samples < o_.train_samples)) {
    traffic_.begin_step();
    const StepStats st = custom_.train   ? custom_.train()
                         : graphed       ? runner_->step(GraphedForwardStep{*o_.graph_device, cb.train_load,
                                                                            cb.train_step})
                                         : runner_->step(cb.train_step);
    traffic_.end_step();
    ran = true;
    saved = false;
    progress_.iteration += 1;
    progress_.consumed_train_samples += o_.global_batch_size;
    ++in_interval;
    if (st.skipped) {
      ++skipped;
      nans += st.nan;
    } else {
      ++advanced;
      for (const auto& [k, v] : st.metrics) loss_sums[k] += v;
    }
    if (cb.on_step) cb.on_step(progress_.iteration, st);
    if (auto done = finish_async_save(/*wait=*/false, cb)) result.last_checkpoint = done;

    if (progress_.iteration % o_.log_interval == 0) {
      LogStats s;
      const double secs = interval.seconds();
      s.iteration = progress_.iteration;
      s.train_iters = train_iters_;
      s.consumed_samples = progress_.consumed_train_samples;
      s.elapsed_ms_per_iteration = 1e3 * secs / static_cast<double>(in_interval);
      s.learning_rate = opt_.optimizer().lr(0);
      s.weight_decay = opt_.optimizer().weight_decay(0);
      s.global_batch_size = o_.global_batch_size;
      for (const auto& [k, v] : loss_sums) s.losses[k] = v / static_cast<double>(std::max<int64_t>(advanced, 1));
      if (advanced == 0)
        for (const auto& kv : st.metrics) s.losses[kv.first] = std::nan("");
      s.loss_scale = st.loss_scale;
      s.grad_norm = st.grad_norm;
      s.num_zeros_in_grad = st.num_zeros_in_grad;
      s.skipped_iterations = skipped;
      s.nan_iterations = nans;
      s.samples_per_second = static_cast<double>(in_interval * o_.global_batch_size) / std::max(secs, 1e-9);
      s.tokens_per_second = s.samples_per_second * static_cast<double>(o_.tokens_per_sample);
      if (o_.flops_per_sample > 0)
        s.tflops_per_rank = o_.flops_per_sample * s.samples_per_second / (1e12 * all.size());
      s.peak_memory_bytes = peak_rss_bytes();
      s.comm_wait_ms = st.comm_wait_ms;
      s.comm = traffic_.take();
      if (cb.log_losses)
        for (const auto& [k, v] : cb.log_losses(s.iteration)) s.losses[k] = v;
      if (metrics_) metrics_->write("train", s.iteration, record_of(s));
      if (cb.on_log) cb.on_log(s);
      interval.restart();
      in_interval = advanced = skipped = nans = 0;
      loss_sums.clear();
    }
    if (o_.eval_interval > 0 && o_.eval_iters > 0 && (cb.valid_step || custom_.evaluate) &&
        progress_.iteration % o_.eval_interval == 0) {
      interval.pause();
      const EvalStats e = evaluate(cb.valid_step);
      if (metrics_) {
        std::map<std::string, double> r = e.metrics;
        r["consumed_valid_samples"] = static_cast<double>(e.consumed_valid_samples);
        metrics_->write("valid", e.iteration, r);
      }
      if (cb.on_eval) cb.on_eval(e);
      interval.resume();
    }

    // Megatron's checkpoint_and_decide_exit, in its order.
    if (signal && signal->received_any(all)) {
      do_save();
      result.exit_reason = ExitReason::signal;
      break;
    }
    if (o_.save_interval > 0 && progress_.iteration % o_.save_interval == 0) do_save();
    if (o_.exit_duration_in_mins > 0) {
      const bool late = (now_seconds() - start_s_) / 60.0 > o_.exit_duration_in_mins;
      Tensor done = from_vector<int64_t>({late ? int64_t{1} : int64_t{0}}, {1});
      if (all.size() > 1) all.group->all_reduce(done, dist::ReduceOp::max);
      if (done.data_ptr<int64_t>()[0]) {
        if (!saved) do_save();
        result.exit_reason = ExitReason::exit_duration;
        break;
      }
    }
    if (o_.exit_interval > 0 && progress_.iteration % o_.exit_interval == 0) {
      if (!saved) do_save();
      if (all.size() > 1) all.group->barrier();
      result.exit_reason = ExitReason::exit_interval;
      break;
    }
  }
  if (result.exit_reason == ExitReason::finished && ran && !saved) do_save();
  // The last asynchronous save is on disk before train() returns.
  if (auto done = finish_async_save(/*wait=*/true, cb)) result.last_checkpoint = done;
  if (lead && cb.on_metrics && metrics_) cb.on_metrics(*metrics_);
  opt_.finish_param_sync();  // the caller reads the final weights
  result.progress = progress_;
  return result;
}

}  // namespace qk::train
