// Megatron-LM's learning-rate and weight-decay schedule
// (megatron/core/optimizer_param_scheduler.py: OptimizerParamScheduler).
//
//   qk::optim::ParamSchedulerOptions o;
//   o.max_lr = 3e-4;  o.min_lr = 3e-5;  o.lr_decay_style = "cosine";
//   o.start_wd = o.end_wd = 0.1;
//   qk::optim::set_schedule_steps(o, {.train_iters = 1000, .global_batch_size = 64,
//                                     .lr_warmup_iters = 100});   // counted in samples
//   qk::optim::OptimizerParamScheduler sched(&optimizer, o);       // sets step 0's rates
//   ...  if (update_successful) sched.step(64);                    // += global batch size
//
// Steps are whatever the caller counts: Megatron's trainer counts samples
// (an iteration advances global_batch_size steps, skipped iterations none),
// which set_schedule_steps reproduces from the iteration or sample flags.
//
// The rate at num_steps = s (max_lr/min_lr may be overridden per group):
//   warmup (lr_warmup_steps > 0 and s <= warmup):
//       init_lr + (max_lr - init_lr) * s / warmup
//   constant:  max_lr;   s > lr_decay_steps:  min_lr
//   inverse-square-root:  max(min_lr, max_lr * sqrt(max(warmup, 1)) / sqrt(max(s, 1)))
//   otherwise r = (s - warmup) / (decay - warmup), lr = min_lr + coeff * (max_lr - min_lr):
//       linear  coeff = 1 - r;   cosine  coeff = (cos(pi r) + 1) / 2
//       WSD     coeff = 1 until s <= decay - wsd_decay_steps, then with
//               q = (s - (decay - wsd)) / wsd by lr_wsd_decay_style:
//               exponential 2 * 0.5^q - 1, linear 1 - q, cosine (cos(pi q) + 1) / 2,
//               minus_sqrt 1 - sqrt(q)
// Weight decay: end_wd once s > wd_incr_steps; else with r = s / wd_incr_steps
//   constant end_wd, linear start + r (end - start), cosine start + (cos(pi (1 - r)) + 1) / 2 (end - start);
// each group gets that times its wd_mult (0 for Megatron's no-decay group).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qk/optim/optimizer.h"

namespace qk::optim {

struct ParamSchedulerOptions {
  double init_lr = 0;                          // --lr-warmup-init
  double max_lr = 0;                           // --lr
  double min_lr = 0;                           // --min-lr
  double lr_warmup_steps = 0;                  // may be fractional (--lr-warmup-fraction)
  int64_t lr_decay_steps = 0;                  // > lr_warmup_steps
  std::string lr_decay_style = "linear";       // constant|linear|cosine|inverse-square-root|WSD
  std::optional<int64_t> wsd_decay_steps{};    // WSD's decay phase (required for WSD)
  std::string lr_wsd_decay_style = "exponential";  // exponential|linear|cosine|minus_sqrt
  double start_wd = 0.01;                      // --start-weight-decay (default --weight-decay)
  double end_wd = 0.01;                        // --end-weight-decay
  int64_t wd_incr_steps = 0;                   // Megatron: train_iters * global_batch_size
  std::string wd_incr_style = "constant";      // constant|linear|cosine
  // Megatron's --use-checkpoint-opt_param-scheduler / --override-opt_param-scheduler:
  // neither set, load_state_dict refuses a checkpoint whose settings differ.
  bool use_checkpoint_opt_param_scheduler = false;
  bool override_opt_param_scheduler = false;
};

// Megatron's training flags that size the schedule.
struct TrainingSchedule {
  int64_t train_iters = 0;          // one of train_iters / train_samples
  int64_t train_samples = 0;
  int64_t global_batch_size = 0;
  std::optional<int64_t> lr_decay_iters{}, lr_decay_samples{};    // default: the whole run
  int64_t lr_warmup_iters = 0, lr_warmup_samples = 0;
  std::optional<double> lr_warmup_fraction{};                     // of the decay steps
  std::optional<int64_t> lr_wsd_decay_iters{}, lr_wsd_decay_samples{};
};

// Fills lr_warmup_steps, lr_decay_steps, wsd_decay_steps and wd_incr_steps
// in samples exactly as Megatron's get_optimizer_param_scheduler does.
void set_schedule_steps(ParamSchedulerOptions& o, const TrainingSchedule& t);

// Per parameter group (Megatron's param-group overrides).
struct GroupSchedule {
  std::optional<double> max_lr{}, min_lr{}, start_wd{}, end_wd{};
  double wd_mult = 1.0;
};

// What a checkpoint keeps (Megatron's state_dict keys).
struct ParamSchedulerState {
  double max_lr = 0, min_lr = 0, lr_warmup_steps = 0;
  int64_t lr_decay_steps = 0, num_steps = 0;
  std::string lr_decay_style;
  double start_wd = 0, end_wd = 0;
  int64_t wd_incr_steps = 0;
  std::string wd_incr_style;
};

class OptimizerParamScheduler {
 public:
  // Validates the options (ValueError naming the field) and applies step 0's
  // rates. `optimizer` may be null (the rates are then only computed).
  OptimizerParamScheduler(optim::Optimizer* optimizer, ParamSchedulerOptions o,
                          std::vector<GroupSchedule> groups = {});

  // num_steps += increment, then every group's lr and weight decay are set.
  void step(int64_t increment);
  int64_t num_steps() const { return num_steps_; }
  double get_lr(size_t group = 0) const;
  double get_wd(size_t group = 0) const;  // before the group's wd_mult
  const ParamSchedulerOptions& options() const { return o_; }

  ParamSchedulerState state_dict() const;
  // Megatron's rules: override_opt_param_scheduler keeps this run's settings,
  // use_checkpoint takes the checkpoint's, neither requires them equal.
  // Then jumps to the checkpoint's num_steps.
  void load_state_dict(const ParamSchedulerState& s);

 private:
  const GroupSchedule& group(size_t g) const;
  template <typename T>
  T check_and_set(const T& mine, const T& saved, const char* name) const;
  optim::Optimizer* opt_;
  ParamSchedulerOptions o_;
  std::vector<GroupSchedule> groups_;
  int64_t num_steps_ = 0;
};

}  // namespace qk::optim
