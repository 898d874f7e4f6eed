// Learning-rate schedules, stepped once per iteration (or epoch), as
// torch.optim.lr_scheduler: construction sets the epoch-0 rate, each step()
// advances one epoch and writes the new rate into every parameter group.
//
//   qk::optim::AdamW opt(model->parameters(), qk::optim::AdamWOptions(3e-4));
//   qk::optim::WarmupCosineLR sched(opt, /*warmup_steps=*/100, /*total_steps=*/5000,
//                                   /*min_lr_ratio=*/0.1);
//   for (int it = 0; it < 5000; ++it) { ...; opt.step(); sched.step(); }
//   sched.get_last_lr();   // one rate per group
//
// Rates are computed in closed form from each group's base rate (the rate
// the group had when the scheduler was built), so resuming from
// (last_epoch, base_lrs) is exact.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "qk/optim/optimizer.h"

namespace qk::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  // Advances one epoch and applies the new rates.
  void step();
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // For checkpoints: jumps to `epoch` (the base rates stay) and applies its rates.
  void set_last_epoch(int64_t epoch);

 protected:
  explicit LRScheduler(Optimizer& opt);
  // Call at the end of a derived constructor (epoch 0's rates).
  void init();
  // The rate of group g at epoch `epoch`, given its base rate.
  virtual double lr_at(int64_t epoch, double base_lr) const = 0;

 private:
  void apply();
  Optimizer& opt_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = 0;
};

// lr = base_lr * gamma ^ floor(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);

 private:
  double lr_at(int64_t epoch, double base_lr) const override;
  int64_t step_size_;
  double gamma_;
};

// lr = base_lr * factor(epoch).
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& opt, std::function<double(int64_t)> factor);

 private:
  double lr_at(int64_t epoch, double base_lr) const override;
  std::function<double(int64_t)> factor_;
};

// torch's CosineAnnealingLR: eta_min + (base - eta_min) * (1 + cos(pi * t / T_max)) / 2.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0.0);

 private:
  double lr_at(int64_t epoch, double base_lr) const override;
  int64_t t_max_;
  double eta_min_;
};

// Linear warmup then cosine decay, as Megatron-LM and Hugging Face's
// get_cosine_schedule_with_warmup: factor = t / warmup for t < warmup, then
// min_lr_ratio + (1 - min_lr_ratio) * (1 + cos(pi * progress)) / 2 with
// progress = (t - warmup) / (total - warmup), held at min_lr_ratio once
// progress reaches 1 (Megatron's clamp; HF's curve would rise again).
double warmup_cosine_factor(int64_t t, int64_t warmup_steps, int64_t total_steps,
                            double min_lr_ratio);

class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& opt, int64_t warmup_steps, int64_t total_steps,
                 double min_lr_ratio = 0.0);

 private:
  double lr_at(int64_t epoch, double base_lr) const override;
  int64_t warmup_, total_;
  double min_ratio_;
};

}  // namespace qk::optim
