// Megatron's OptimizerParamScheduler: every decay style against the formulas
// of megatron/core/optimizer_param_scheduler.py written out again here, a
// few values worked by hand, the weight-decay schedule, the sizes Megatron's
// trainer derives from iteration and sample flags, and the checkpoint rules.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "qk/optim/adam.h"
#include "qk/optim/optimizer_param_scheduler.h"

namespace {

using qk::optim::OptimizerParamScheduler;
using qk::optim::ParamSchedulerOptions;

// get_lr of Megatron, transcribed from the Python (num_steps as an int).
double megatron_lr(const ParamSchedulerOptions& o, int64_t num_steps) {
  const double max_lr = o.max_lr, min_lr = o.min_lr;
  if (o.lr_warmup_steps > 0 && num_steps <= o.lr_warmup_steps)
    return o.init_lr + ((max_lr - o.init_lr) * double(num_steps) / double(o.lr_warmup_steps));
  if (o.lr_decay_style == "constant") return max_lr;
  if (num_steps > o.lr_decay_steps) return min_lr;
  if (o.lr_decay_style == "inverse-square-root") {
    const double warmup_steps = std::max(o.lr_warmup_steps, 1.0);
    const double steps = std::max<double>(double(num_steps), 1.0);
    const double lr = max_lr * std::pow(warmup_steps, 0.5) / std::pow(steps, 0.5);
    return std::max(min_lr, lr);
  }
  const double num_steps_ = double(num_steps) - o.lr_warmup_steps;
  const double decay_steps_ = double(o.lr_decay_steps) - o.lr_warmup_steps;
  const double decay_ratio = num_steps_ / decay_steps_;
  const double delta_lr = max_lr - min_lr;
  double coeff = -1;
  if (o.lr_decay_style == "linear") coeff = 1.0 - decay_ratio;
  if (o.lr_decay_style == "cosine") coeff = 0.5 * (std::cos(std::numbers::pi * decay_ratio) + 1.0);
  if (o.lr_decay_style == "WSD") {
    const int64_t wsd_anneal_start_ = o.lr_decay_steps - *o.wsd_decay_steps;
    if (num_steps <= wsd_anneal_start_) {
      coeff = 1.0;
    } else {
      const double wsd_decay_ratio = double(num_steps - wsd_anneal_start_) / double(*o.wsd_decay_steps);
      if (o.lr_wsd_decay_style == "linear") coeff = 1.0 - wsd_decay_ratio;
      if (o.lr_wsd_decay_style == "cosine") coeff = 0.5 * (std::cos(std::numbers::pi * wsd_decay_ratio) + 1.0);
      if (o.lr_wsd_decay_style == "exponential") coeff = (2.0 * std::pow(0.5, wsd_decay_ratio)) - 1.0;
      if (o.lr_wsd_decay_style == "minus_sqrt") coeff = 1.0 - std::sqrt(wsd_decay_ratio);
    }
  }
  return min_lr + coeff * delta_lr;
}

double megatron_wd(const ParamSchedulerOptions& o, int64_t num_steps) {
  if (num_steps > o.wd_incr_steps) return o.end_wd;
  if (o.wd_incr_style == "constant") return o.end_wd;
  const double incr_ratio = double(num_steps) / double(o.wd_incr_steps);
  const double delta_wd = o.end_wd - o.start_wd;
  const double coeff = o.wd_incr_style == "linear" ? incr_ratio
                                                    : 0.5 * (std::cos(std::numbers::pi * (1 - incr_ratio)) + 1.0);
  return o.start_wd + coeff * delta_wd;
}

ParamSchedulerOptions base(const std::string& style) {
  ParamSchedulerOptions o;
  o.init_lr = 0.0;
  o.max_lr = 1.0;
  o.min_lr = 0.1;
  o.lr_warmup_steps = 10;
  o.lr_decay_steps = 110;
  o.lr_decay_style = style;
  o.start_wd = o.end_wd = 0.01;
  o.wd_incr_steps = 110;
  return o;
}

const std::vector<int64_t> kSteps = {0, 1, 5, 9, 10, 11, 35, 60, 89, 90, 91, 100, 109, 110, 111, 500};

// Steps one at a time through kSteps, comparing with the transcription.
void expect_table(const ParamSchedulerOptions& o) {
  OptimizerParamScheduler s(nullptr, o);
  int64_t at = 0;
  for (int64_t step : kSteps) {
    s.step(step - at);
    at = step;
    const double want = megatron_lr(o, step);
    EXPECT_NEAR(s.get_lr(), want, 1e-15 * std::max(1.0, std::fabs(want)))
        << o.lr_decay_style << "/" << o.lr_wsd_decay_style << " at step " << step;
  }
}

TEST(OptimizerParamScheduler, EveryDecayStyleMatchesMegatronsFormulas) {
  for (const char* style : {"constant", "linear", "cosine", "inverse-square-root"}) expect_table(base(style));
  for (const char* wsd : {"exponential", "linear", "cosine", "minus_sqrt"}) {
    ParamSchedulerOptions o = base("WSD");
    o.wsd_decay_steps = 20;
    o.lr_wsd_decay_style = wsd;
    expect_table(o);
  }
  ParamSchedulerOptions warm = base("cosine");
  warm.init_lr = 0.2;  // --lr-warmup-init
  warm.lr_warmup_steps = 12.5;  // a fraction of the decay steps
  expect_table(warm);
  ParamSchedulerOptions no_warmup = base("linear");
  no_warmup.lr_warmup_steps = 0;
  expect_table(no_warmup);
}

// The same curves worked out by hand (max 1, min 0.1, warmup 10, decay 110).
TEST(OptimizerParamScheduler, HandWorkedValues) {
  auto lr_at = [](ParamSchedulerOptions o, int64_t step) {
    OptimizerParamScheduler s(nullptr, o);
    s.step(step);
    return s.get_lr();
  };
  EXPECT_DOUBLE_EQ(lr_at(base("linear"), 5), 0.5);     // warmup: 5 / 10
  EXPECT_DOUBLE_EQ(lr_at(base("linear"), 35), 0.775);  // ratio 0.25: 0.1 + 0.75 * 0.9
  EXPECT_DOUBLE_EQ(lr_at(base("cosine"), 60), 0.55);   // ratio 0.5: 0.1 + 0.5 * 0.9
  EXPECT_DOUBLE_EQ(lr_at(base("cosine"), 110), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(base("cosine"), 111), 0.1);   // past the decay: min_lr
  EXPECT_DOUBLE_EQ(lr_at(base("constant"), 500), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(base("inverse-square-root"), 40), 0.5);   // sqrt(10 / 40)
  EXPECT_DOUBLE_EQ(lr_at(base("inverse-square-root"), 1000), 0.1);  // 0.1 clamps sqrt(0.01)
  ParamSchedulerOptions wsd = base("WSD");
  wsd.wsd_decay_steps = 20;  // annealing from step 90
  wsd.lr_wsd_decay_style = "linear";
  EXPECT_DOUBLE_EQ(lr_at(wsd, 90), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(wsd, 100), 0.55);
  wsd.lr_wsd_decay_style = "exponential";
  EXPECT_NEAR(lr_at(wsd, 100), 0.1 + 0.9 * (std::sqrt(2.0) - 1.0), 1e-15);
  wsd.lr_wsd_decay_style = "minus_sqrt";
  EXPECT_NEAR(lr_at(wsd, 100), 0.1 + 0.9 * (1.0 - std::sqrt(0.5)), 1e-15);
}

TEST(OptimizerParamScheduler, WeightDecayStylesAndGroupMultipliers) {
  for (const char* style : {"constant", "linear", "cosine"}) {
    ParamSchedulerOptions o = base("linear");
    o.wd_incr_style = style;
    if (std::string(style) != "constant") o.start_wd = 0.0, o.end_wd = 0.1;
    OptimizerParamScheduler s(nullptr, o);
    int64_t at = 0;
    for (int64_t step : kSteps) {
      s.step(step - at);
      at = step;
      EXPECT_NEAR(s.get_wd(), megatron_wd(o, step), 1e-16) << style << " at " << step;
    }
  }
  // Two groups of an optimizer: weight decay x1 and x0 (Megatron's no-decay group).
  qk::Tensor a = qk::zeros({2}).requires_grad_(), b = qk::zeros({2}).requires_grad_();
  qk::optim::AdamW opt({{{a}, qk::optim::AdamWOptions(1.0)}, {{b}, qk::optim::AdamWOptions(1.0)}});
  ParamSchedulerOptions o = base("linear");
  o.start_wd = 0.0, o.end_wd = 0.1, o.wd_incr_style = "linear";
  OptimizerParamScheduler s(&opt, o, {{.wd_mult = 1.0}, {.max_lr = 0.5, .min_lr = 0.05, .wd_mult = 0.0}});
  s.step(35);
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.775);
  EXPECT_DOUBLE_EQ(opt.lr(1), 0.05 + 0.75 * 0.45);
  EXPECT_NEAR(opt.weight_decay(0), 0.1 * 35 / 110, 1e-17);
  EXPECT_EQ(opt.weight_decay(1), 0.0);
}

// get_optimizer_param_scheduler: iterations become samples (x global batch).
TEST(OptimizerParamScheduler, StepsFromIterationAndSampleFlags) {
  ParamSchedulerOptions o;
  qk::optim::set_schedule_steps(o, {.train_iters = 100, .global_batch_size = 8, .lr_warmup_iters = 10,
                                    .lr_wsd_decay_iters = 20});
  EXPECT_EQ(o.lr_decay_steps, 800);
  EXPECT_EQ(o.wd_incr_steps, 800);
  EXPECT_EQ(o.lr_warmup_steps, 80);
  EXPECT_EQ(o.wsd_decay_steps, 160);
  qk::optim::set_schedule_steps(o, {.train_iters = 100, .global_batch_size = 8, .lr_decay_iters = 50,
                                    .lr_warmup_fraction = 0.01});
  EXPECT_EQ(o.lr_decay_steps, 400);
  EXPECT_DOUBLE_EQ(o.lr_warmup_steps, 4.0);
  ParamSchedulerOptions s;
  qk::optim::set_schedule_steps(s, {.train_samples = 1000, .lr_warmup_samples = 30, .lr_wsd_decay_samples = 70});
  EXPECT_EQ(s.lr_decay_steps, 1000);
  EXPECT_EQ(s.wd_incr_steps, 1000);
  EXPECT_EQ(s.lr_warmup_steps, 30);
  EXPECT_EQ(s.wsd_decay_steps, 70);
  EXPECT_THROW(qk::optim::set_schedule_steps(s, {.train_iters = 1, .train_samples = 1}), qk::ValueError);
}

TEST(OptimizerParamScheduler, BadSettingsNameTheField) {
  auto message = [](ParamSchedulerOptions o) {
    try {
      OptimizerParamScheduler s(nullptr, o);
    } catch (const qk::ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ParamSchedulerOptions o = base("cosine");
  o.lr_warmup_steps = 200;
  EXPECT_NE(message(o).find("lr_warmup_steps"), std::string::npos) << message(o);
  o = base("WSD");
  EXPECT_NE(message(o).find("wsd_decay_steps"), std::string::npos) << message(o);
  o = base("step");
  EXPECT_NE(message(o).find("lr_decay_style"), std::string::npos) << message(o);
  o = base("linear");
  o.min_lr = 2;
  EXPECT_NE(message(o).find("--min-lr"), std::string::npos) << message(o);
}

// Megatron's _check_and_set: a changed setting on resume is refused unless
// one of the two flags says which to keep; num_steps always comes back.
TEST(OptimizerParamScheduler, StateDictRoundTripAndOverrideRules) {
  OptimizerParamScheduler saved(nullptr, base("cosine"));
  saved.step(37);
  const auto state = saved.state_dict();
  OptimizerParamScheduler same(nullptr, base("cosine"));
  same.load_state_dict(state);
  EXPECT_EQ(same.num_steps(), 37);
  EXPECT_EQ(same.get_lr(), saved.get_lr());

  ParamSchedulerOptions changed = base("cosine");
  changed.max_lr = 2.0;
  OptimizerParamScheduler refuse(nullptr, changed);
  EXPECT_THROW(refuse.load_state_dict(state), qk::ValueError);
  changed.use_checkpoint_opt_param_scheduler = true;
  OptimizerParamScheduler take(nullptr, changed);
  take.load_state_dict(state);
  EXPECT_EQ(take.options().max_lr, 1.0);
  EXPECT_EQ(take.get_lr(), saved.get_lr());
  changed.use_checkpoint_opt_param_scheduler = false;
  changed.override_opt_param_scheduler = true;
  OptimizerParamScheduler keep(nullptr, changed);
  keep.load_state_dict(state);
  EXPECT_EQ(keep.options().max_lr, 2.0);
  EXPECT_EQ(keep.num_steps(), 37);
}

}  // namespace
