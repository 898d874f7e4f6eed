#include "qk/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>

#include "qk/base/error.h"

namespace qk::optim {

LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt) {
  for (size_t g = 0; g < opt.num_param_groups(); ++g) base_lrs_.push_back(opt.lr(g));
}

void LRScheduler::init() { apply(); }

void LRScheduler::step() {
  ++last_epoch_;
  apply();
}

void LRScheduler::set_last_epoch(int64_t epoch) {
  QK_CHECK(epoch >= 0, "LRScheduler: expected a non-negative epoch, got ", epoch);
  last_epoch_ = epoch;
  apply();
}

void LRScheduler::apply() {
  QK_CHECK(opt_.num_param_groups() == base_lrs_.size(), "LRScheduler: the optimizer had ",
           base_lrs_.size(), " parameter groups when the scheduler was built, now ",
           opt_.num_param_groups(), "; build the scheduler after adding every group");
  last_lr_.resize(base_lrs_.size());
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    last_lr_[g] = lr_at(last_epoch_, base_lrs_[g]);
    opt_.set_lr(g, last_lr_[g]);
  }
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  QK_CHECK(step_size > 0, "StepLR: expected step_size > 0, got ", step_size);
  init();
}

double StepLR::lr_at(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> factor)
    : LRScheduler(opt), factor_(std::move(factor)) {
  QK_CHECK(static_cast<bool>(factor_), "LambdaLR: the factor function is empty");
  init();
}

double LambdaLR::lr_at(int64_t epoch, double base_lr) const { return base_lr * factor_(epoch); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min)
    : LRScheduler(opt), t_max_(T_max), eta_min_(eta_min) {
  QK_CHECK(T_max > 0, "CosineAnnealingLR: expected T_max > 0, got ", T_max);
  init();
}

double CosineAnnealingLR::lr_at(int64_t epoch, double base_lr) const {
  double c = std::cos(std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max_));
  return eta_min_ + (base_lr - eta_min_) * (1.0 + c) / 2.0;
}

double warmup_cosine_factor(int64_t t, int64_t warmup, int64_t total, double min_ratio) {
  if (t < warmup) return static_cast<double>(t) / static_cast<double>(std::max<int64_t>(1, warmup));
  double progress = static_cast<double>(t - warmup) /
                    static_cast<double>(std::max<int64_t>(1, total - warmup));
  if (progress >= 1.0) return min_ratio;
  return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

WarmupCosineLR::WarmupCosineLR(Optimizer& opt, int64_t warmup_steps, int64_t total_steps,
                               double min_lr_ratio)
    : LRScheduler(opt), warmup_(warmup_steps), total_(total_steps), min_ratio_(min_lr_ratio) {
  QK_CHECK(warmup_steps >= 0 && total_steps >= warmup_steps,
           "WarmupCosineLR: expected 0 <= warmup_steps <= total_steps, got warmup_steps ",
           warmup_steps, " and total_steps ", total_steps);
  QK_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1,
           "WarmupCosineLR: expected min_lr_ratio in [0, 1], got ", min_lr_ratio);
  init();
}

double WarmupCosineLR::lr_at(int64_t epoch, double base_lr) const {
  return base_lr * warmup_cosine_factor(epoch, warmup_, total_, min_ratio_);
}

}  // namespace qk::optim
