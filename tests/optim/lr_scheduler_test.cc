// Learning-rate schedules against PyTorch's (tests/fixtures/gen_optim.py):
// two parameter groups with base rates 0.1 and 0.02.
#include <gtest/gtest.h>

#include "common/fixtures.h"
#include "qk/optim/optim.h"

namespace {

using namespace qk;
using qk::test::load_fixture;

struct TwoGroups {
  Tensor a = zeros({1}).requires_grad_(), b = zeros({1}).requires_grad_();
  optim::SGD opt{{{{a}, optim::SGDOptions(0.1)}, {{b}, optim::SGDOptions(0.02)}}};
};

void expect_schedule(const char* file, optim::LRScheduler& sched, optim::Optimizer& opt) {
  auto fx = load_fixture(file);
  Tensor want = fx.tensor("lr");
  auto w = want.to_vector<double>();
  const int64_t epochs = want.size(0);
  for (int64_t e = 0; e < epochs; ++e) {
    if (e > 0) sched.step();
    EXPECT_EQ(sched.last_epoch(), e);
    for (size_t g = 0; g < 2; ++g) {
      double expect = w[static_cast<size_t>(e) * 2 + g];
      EXPECT_NEAR(sched.get_last_lr()[g], expect, 1e-12 + 1e-12 * expect) << file << " epoch " << e << " group " << g;
      EXPECT_EQ(opt.lr(g), sched.get_last_lr()[g]);
    }
  }
}

TEST(LRScheduler, StepLRMatchesPyTorch) {
  TwoGroups s;
  optim::StepLR sched(s.opt, 7, 0.5);
  expect_schedule("sched_step.json", sched, s.opt);
}

TEST(LRScheduler, CosineAnnealingMatchesPyTorch) {
  TwoGroups s;
  optim::CosineAnnealingLR sched(s.opt, 10, 0.001);
  expect_schedule("sched_cosine.json", sched, s.opt);
}

TEST(LRScheduler, WarmupCosineMatchesLambdaLR) {
  TwoGroups s;
  optim::WarmupCosineLR sched(s.opt, 5, 20, 0.1);
  expect_schedule("sched_warmup_cosine.json", sched, s.opt);
}

TEST(LRScheduler, WarmupCosineShape) {
  EXPECT_DOUBLE_EQ(optim::warmup_cosine_factor(0, 10, 110, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(optim::warmup_cosine_factor(5, 10, 110, 0.0), 0.5);
  EXPECT_DOUBLE_EQ(optim::warmup_cosine_factor(10, 10, 110, 0.0), 1.0);
  EXPECT_NEAR(optim::warmup_cosine_factor(60, 10, 110, 0.0), 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(optim::warmup_cosine_factor(110, 10, 110, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(optim::warmup_cosine_factor(500, 10, 110, 0.1), 0.1);  // held, not rising
}

TEST(LRScheduler, ResumesAtEpochAndRejectsBadArguments) {
  TwoGroups s;
  optim::StepLR sched(s.opt, 3, 0.1);
  sched.set_last_epoch(7);
  EXPECT_NEAR(s.opt.lr(0), 0.1 * 0.01, 1e-15);
  EXPECT_THROW(optim::StepLR(s.opt, 0), ValueError);
  EXPECT_THROW(optim::WarmupCosineLR(s.opt, 10, 5), ValueError);
  EXPECT_THROW(sched.set_last_epoch(-1), ValueError);
  optim::LambdaLR lam(s.opt, [](int64_t e) { return 1.0 / (1 + e); });
  lam.step();
  EXPECT_NEAR(lam.get_last_lr()[1], s.opt.lr(1), 0);
}

}  // namespace
