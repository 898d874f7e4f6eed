// OptimizerParamScheduler: Megatron's formulas, term for term (the tests
// write them out again and compare).
#include "qk/optim/optimizer_param_scheduler.h"

#include <cmath>
#include <numbers>

#include "qk/base/error.h"

namespace qk::optim {

namespace {

bool is_one_of(const std::string& v, std::initializer_list<const char*> options) {
  for (const char* o : options)
    if (v == o) return true;
  return false;
}

}  // namespace

void set_schedule_steps(ParamSchedulerOptions& o, const TrainingSchedule& t) {
  QK_CHECK_AS(ValueError, (t.train_iters > 0) != (t.train_samples > 0),
              "Learning-rate schedule: give exactly one of train_iters (--train-iters) and train_samples "
              "(--train-samples), got ", t.train_iters, " and ", t.train_samples);
  if (t.train_iters > 0) {
    QK_CHECK_AS(ValueError, t.global_batch_size > 0,
                "Learning-rate schedule: iteration-based training needs global_batch_size > 0, got ",
                t.global_batch_size);
    const int64_t gbs = t.global_batch_size;
    o.lr_decay_steps = t.lr_decay_iters.value_or(t.train_iters) * gbs;
    o.wd_incr_steps = t.train_iters * gbs;
    o.lr_warmup_steps = t.lr_warmup_fraction ? *t.lr_warmup_fraction * static_cast<double>(o.lr_decay_steps)
                                             : static_cast<double>(t.lr_warmup_iters * gbs);
    if (t.lr_wsd_decay_iters) o.wsd_decay_steps = *t.lr_wsd_decay_iters * gbs;
  } else {
    o.lr_decay_steps = t.lr_decay_samples.value_or(t.train_samples);
    o.wd_incr_steps = t.train_samples;
    o.lr_warmup_steps = t.lr_warmup_fraction ? *t.lr_warmup_fraction * static_cast<double>(o.lr_decay_steps)
                                             : static_cast<double>(t.lr_warmup_samples);
    if (t.lr_wsd_decay_samples) o.wsd_decay_steps = *t.lr_wsd_decay_samples;
  }
}

OptimizerParamScheduler::OptimizerParamScheduler(optim::Optimizer* optimizer, ParamSchedulerOptions o,
                                                 std::vector<GroupSchedule> groups)
    : opt_(optimizer), o_(std::move(o)), groups_(std::move(groups)) {
  QK_CHECK_AS(ValueError, o_.min_lr >= 0, "min_lr (--min-lr) must be >= 0, got ", o_.min_lr);
  QK_CHECK_AS(ValueError, o_.max_lr >= o_.min_lr, "max_lr (--lr) ", o_.max_lr, " must be >= min_lr (--min-lr) ",
              o_.min_lr);
  QK_CHECK_AS(ValueError, o_.init_lr <= o_.max_lr, "init_lr (--lr-warmup-init) ", o_.init_lr,
              " must be <= max_lr (--lr) ", o_.max_lr);
  QK_CHECK_AS(ValueError, o_.lr_decay_steps > 0, "lr_decay_steps must be > 0, got ", o_.lr_decay_steps,
              " (set --train-iters/--train-samples or --lr-decay-iters/--lr-decay-samples)");
  QK_CHECK_AS(ValueError, o_.lr_warmup_steps < static_cast<double>(o_.lr_decay_steps), "lr_warmup_steps ",
              o_.lr_warmup_steps, " must be < lr_decay_steps ", o_.lr_decay_steps,
              " (shorten --lr-warmup-iters/--lr-warmup-fraction or lengthen the decay)");
  QK_CHECK_AS(ValueError, is_one_of(o_.lr_decay_style, {"constant", "linear", "cosine", "inverse-square-root", "WSD"}),
              "lr_decay_style (--lr-decay-style) '", o_.lr_decay_style,
              "' is not one of constant, linear, cosine, inverse-square-root, WSD");
  if (o_.lr_decay_style == "WSD") {
    QK_CHECK_AS(ValueError, o_.wsd_decay_steps.has_value() && *o_.wsd_decay_steps > 0,
                "lr_decay_style WSD needs wsd_decay_steps > 0 (--lr-wsd-decay-iters or --lr-wsd-decay-samples)");
    QK_CHECK_AS(ValueError, is_one_of(o_.lr_wsd_decay_style, {"exponential", "linear", "cosine", "minus_sqrt"}),
                "lr_wsd_decay_style (--lr-wsd-decay-style) '", o_.lr_wsd_decay_style,
                "' is not one of exponential, linear, cosine, minus_sqrt");
  }
  QK_CHECK_AS(ValueError, o_.start_wd >= 0, "start_wd (--start-weight-decay) must be >= 0, got ", o_.start_wd);
  QK_CHECK_AS(ValueError, o_.end_wd >= o_.start_wd, "end_wd (--end-weight-decay) ", o_.end_wd,
              " must be >= start_wd (--start-weight-decay) ", o_.start_wd);
  QK_CHECK_AS(ValueError, is_one_of(o_.wd_incr_style, {"constant", "linear", "cosine"}),
              "wd_incr_style (--weight-decay-incr-style) '", o_.wd_incr_style,
              "' is not one of constant, linear, cosine");
  QK_CHECK_AS(ValueError, o_.wd_incr_style != "constant" || o_.start_wd == o_.end_wd,
              "wd_incr_style constant needs start_wd == end_wd, got ", o_.start_wd, " and ", o_.end_wd);
  QK_CHECK_AS(ValueError, o_.wd_incr_style == "constant" || o_.wd_incr_steps > 0,
              "wd_incr_style ", o_.wd_incr_style, " needs wd_incr_steps > 0, got ", o_.wd_incr_steps);
  QK_CHECK_AS(ValueError, !(o_.override_opt_param_scheduler && o_.use_checkpoint_opt_param_scheduler),
              "both --override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler are set");
  if (opt_) {
    QK_CHECK_AS(ValueError, groups_.empty() || groups_.size() == opt_->num_param_groups(),
                "OptimizerParamScheduler: ", groups_.size(), " group schedules for an optimizer with ",
                opt_->num_param_groups(), " parameter groups");
  }
  step(0);
}

const GroupSchedule& OptimizerParamScheduler::group(size_t g) const {
  static const GroupSchedule kDefault;
  return g < groups_.size() ? groups_[g] : kDefault;
}

double OptimizerParamScheduler::get_wd(size_t g) const {
  const GroupSchedule& gs = group(g);
  const double start_wd = gs.start_wd.value_or(o_.start_wd);
  const double end_wd = gs.end_wd.value_or(o_.end_wd);
  if (num_steps_ > o_.wd_incr_steps) return end_wd;
  if (o_.wd_incr_style == "constant") return end_wd;
  const double incr_ratio = static_cast<double>(num_steps_) / static_cast<double>(o_.wd_incr_steps);
  const double delta_wd = end_wd - start_wd;
  double coeff = 0;
  if (o_.wd_incr_style == "linear") {
    coeff = incr_ratio;
  } else {  // cosine
    coeff = 0.5 * (std::cos(std::numbers::pi * (1 - incr_ratio)) + 1.0);
  }
  return start_wd + coeff * delta_wd;
}

double OptimizerParamScheduler::get_lr(size_t g) const {
  const GroupSchedule& gs = group(g);
  const double max_lr = gs.max_lr.value_or(o_.max_lr);
  const double min_lr = gs.min_lr.value_or(o_.min_lr);
  const double steps = static_cast<double>(num_steps_);

  if (o_.lr_warmup_steps > 0 && steps <= o_.lr_warmup_steps)
    return o_.init_lr + (max_lr - o_.init_lr) * steps / o_.lr_warmup_steps;
  if (o_.lr_decay_style == "constant") return max_lr;
  if (num_steps_ > o_.lr_decay_steps) return min_lr;
  if (o_.lr_decay_style == "inverse-square-root") {
    const double warmup = std::max(o_.lr_warmup_steps, 1.0);
    const double s = std::max(steps, 1.0);
    return std::max(min_lr, max_lr * std::pow(warmup, 0.5) / std::pow(s, 0.5));
  }
  const double decay_ratio =
      (steps - o_.lr_warmup_steps) / (static_cast<double>(o_.lr_decay_steps) - o_.lr_warmup_steps);
  const double delta_lr = max_lr - min_lr;
  double coeff = 0;
  if (o_.lr_decay_style == "linear") {
    coeff = 1.0 - decay_ratio;
  } else if (o_.lr_decay_style == "cosine") {
    coeff = 0.5 * (std::cos(std::numbers::pi * decay_ratio) + 1.0);
  } else {  // WSD
    const int64_t anneal_start = o_.lr_decay_steps - *o_.wsd_decay_steps;
    if (num_steps_ <= anneal_start) {
      coeff = 1.0;
    } else {
      const double q = static_cast<double>(num_steps_ - anneal_start) / static_cast<double>(*o_.wsd_decay_steps);
      const std::string& style = o_.lr_wsd_decay_style;
      if (style == "linear") coeff = 1.0 - q;
      else if (style == "cosine") coeff = 0.5 * (std::cos(std::numbers::pi * q) + 1.0);
      else if (style == "exponential") coeff = 2.0 * std::pow(0.5, q) - 1.0;
      else coeff = 1.0 - std::sqrt(q);  // minus_sqrt
    }
  }
  return min_lr + coeff * delta_lr;
}

void OptimizerParamScheduler::step(int64_t increment) {
  num_steps_ += increment;
  if (!opt_) return;
  for (size_t g = 0; g < opt_->num_param_groups(); ++g) {
    opt_->set_lr(g, get_lr(g));
    opt_->set_weight_decay(g, get_wd(g) * group(g).wd_mult);
  }
}

ParamSchedulerState OptimizerParamScheduler::state_dict() const {
  ParamSchedulerState s;
  s.max_lr = o_.max_lr;
  s.lr_warmup_steps = o_.lr_warmup_steps;
  s.num_steps = num_steps_;
  s.lr_decay_style = o_.lr_decay_style;
  s.lr_decay_steps = o_.lr_decay_steps;
  s.min_lr = o_.min_lr;
  s.start_wd = o_.start_wd;
  s.end_wd = o_.end_wd;
  s.wd_incr_style = o_.wd_incr_style;
  s.wd_incr_steps = o_.wd_incr_steps;
  return s;
}

template <typename T>
T OptimizerParamScheduler::check_and_set(const T& mine, const T& saved, const char* name) const {
  if (o_.override_opt_param_scheduler) return mine;
  QK_CHECK_AS(ValueError, o_.use_checkpoint_opt_param_scheduler || mine == saved,
              "OptimizerParamScheduler: this run's ", name, " (", mine, ") differs from the checkpoint's (", saved,
              "); pass --override-opt_param-scheduler to use this run's values or "
              "--use-checkpoint-opt_param-scheduler to use the checkpoint's");
  return saved;
}

void OptimizerParamScheduler::load_state_dict(const ParamSchedulerState& s) {
  o_.max_lr = check_and_set(o_.max_lr, s.max_lr, "learning rate");
  o_.min_lr = check_and_set(o_.min_lr, s.min_lr, "minimum learning rate");
  o_.lr_warmup_steps = check_and_set(o_.lr_warmup_steps, s.lr_warmup_steps, "warmup steps");
  o_.lr_decay_steps = check_and_set(o_.lr_decay_steps, s.lr_decay_steps, "total number of decay steps");
  o_.lr_decay_style = check_and_set(o_.lr_decay_style, s.lr_decay_style, "learning rate decay style");
  o_.start_wd = check_and_set(o_.start_wd, s.start_wd, "start weight decay");
  o_.end_wd = check_and_set(o_.end_wd, s.end_wd, "end weight decay");
  o_.wd_incr_steps = check_and_set(o_.wd_incr_steps, s.wd_incr_steps, "total number of weight decay steps");
  o_.wd_incr_style = check_and_set(o_.wd_incr_style, s.wd_incr_style, "weight decay incr style");
  QK_CHECK_AS(ValueError, s.num_steps >= 0, "OptimizerParamScheduler: the checkpoint's num_steps is ", s.num_steps);
  num_steps_ = 0;
  step(s.num_steps);
}

}  // namespace qk::optim
