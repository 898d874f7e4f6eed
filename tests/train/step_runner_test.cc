// StepRunner: Megatron's micro-batch rule, accumulation over k micro-batches
// equal to one big batch, metrics as (sum, count), skipped and NaN steps,
// and the schedule advancing only on an update.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "qk/optim/sgd.h"
#include "qk/train/step_runner.h"
#include "toy.h"

namespace {

using namespace qk;
using qk_train_test::make_mlp;
using qk_train_test::mse_step;

TEST(NumMicrobatches, MegatronsRuleAndError) {
  EXPECT_EQ(train::num_microbatches(64, 4, 2), 8);
  EXPECT_EQ(train::num_microbatches(8, 8, 1), 1);
  try {
    train::num_microbatches(30, 4, 2);
    ADD_FAILURE() << "30 is not a multiple of 4 x 2";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("global batch size (30) is not divisible by micro batch size (4) times "
                                         "data parallel size (2)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(train::num_microbatches(8, 0, 1), ValueError);
}

std::vector<float> flat_params(nn::Sequential& net) {
  std::vector<float> v;
  for (const Tensor& p : net->parameters()) {
    const auto x = p.to(DType::f32).contiguous().to_vector<float>();
    v.insert(v.end(), x.begin(), x.end());
  }
  return v;
}

// Three SGD-with-momentum steps over global batches of 8 samples, as `k`
// micro-batches of 8 / k: the weights agree to rounding.
std::vector<float> train_with_microbatches(int64_t k) {
  auto net = make_mlp(5, /*dropout=*/0.0);
  optim::MixedPrecisionOptimizer opt(optim::single_param_group(*net),
                                     optim::sgd(optim::SGDOptions(0.05).momentum(0.9)), nullptr, {.clip_grad = 0});
  train::StepRunner runner(opt, {}, {.num_microbatches = k});
  const int64_t mbs = 8 / k;
  for (int64_t step = 0; step < 3; ++step) {
    const auto s = runner.step([&](int64_t micro) { return mse_step(net, step * 8 + micro * mbs, mbs); });
    EXPECT_FALSE(s.skipped);
  }
  return flat_params(net);
}

TEST(StepRunner, AccumulatedMicrobatchesEqualOneBigBatch) {
  const auto one = train_with_microbatches(1);
  for (int64_t k : {2, 4, 8}) {
    const auto acc = train_with_microbatches(k);
    ASSERT_EQ(acc.size(), one.size());
    double worst = 0;
    for (size_t i = 0; i < one.size(); ++i) worst = std::max(worst, std::fabs(double(acc[i]) - one[i]));
    EXPECT_LT(worst, 2e-6) << k << " micro-batches";
  }
}

TEST(StepRunner, MetricsAreSumOverCount) {
  auto net = make_mlp(5, 0.0);
  optim::MixedPrecisionOptimizer opt(optim::single_param_group(*net), optim::sgd(optim::SGDOptions(0.0)));
  train::StepRunner runner(opt, {}, {.num_microbatches = 3});
  auto loss_of = [&](int64_t micro) { return mse_step(net, 0, 2).loss * 0.0 + static_cast<double>(micro + 1); };
  const auto s = runner.step([&](int64_t micro) {
    // Tokens-weighted, as Megatron's lm loss: micro-batch i counts i + 1 tokens.
    return train::MicroBatchOutput{loss_of(micro), {{"lm loss", {double(micro + 1) * (micro + 1), double(micro + 1)}}}};
  });
  EXPECT_DOUBLE_EQ(s.metrics.at("lm loss"), (1.0 + 4.0 + 9.0) / 6.0);
  EXPECT_EQ(s.metrics.size(), 1u);
  EXPECT_DOUBLE_EQ(s.loss, s.metrics.at("lm loss"));
  // Without metrics, "loss" is the mean of the micro-batch losses.
  const auto plain = runner.step([&](int64_t micro) { return train::MicroBatchOutput{loss_of(micro), {}}; });
  EXPECT_DOUBLE_EQ(plain.metrics.at("loss"), 2.0);
}

TEST(StepRunner, NanLossSkipsAndCountsAsNan) {
  auto net = make_mlp(5, 0.0);
  optim::MixedPrecisionOptimizer opt(optim::single_param_group(*net), optim::sgd(optim::SGDOptions(0.1)));
  optim::ParamSchedulerOptions so;
  so.max_lr = 0.1, so.lr_decay_steps = 100, so.lr_decay_style = "linear";
  optim::OptimizerParamScheduler sched(&opt.optimizer(), so);
  train::StepRunner runner(opt, {}, {.num_microbatches = 2});
  runner.set_scheduler(&sched, 8);
  const auto before = flat_params(net);
  const auto bad = runner.step([&](int64_t micro) {
    train::MicroBatchOutput out = mse_step(net, micro * 4, 4);
    if (micro == 1) out.loss = out.loss * std::numeric_limits<double>::quiet_NaN();
    return out;
  });
  EXPECT_TRUE(bad.skipped);
  EXPECT_TRUE(bad.nan);
  EXPECT_EQ(flat_params(net), before);
  EXPECT_EQ(sched.num_steps(), 0);  // no update, no schedule step
  const auto good = runner.step([&](int64_t micro) { return mse_step(net, micro * 4, 4); });
  EXPECT_FALSE(good.skipped);
  EXPECT_FALSE(good.nan);
  EXPECT_GT(good.grad_norm, 0);
  EXPECT_EQ(good.lr, 0.1);
  EXPECT_EQ(sched.num_steps(), 8);
  EXPECT_NE(flat_params(net), before);
}

}  // namespace
