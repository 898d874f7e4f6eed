// Megatron's loss scalers: backoff only after `hysteresis` overflows (and
// then on every one), growth after growth_interval clean iterations in a
// row, the lower bound, the constant scaler, and the checkpoint state.
#include <gtest/gtest.h>

#include "qk/base/error.h"
#include "qk/optim/loss_scaler.h"

namespace {

using qk::optim::DynamicLossScaler;
using qk::optim::DynamicLossScalerOptions;

TEST(DynamicLossScaler, MegatronDefaults) {
  DynamicLossScaler s;
  EXPECT_EQ(s.scale(), 4294967296.0f);
  EXPECT_EQ(s.options().min_scale, 1.0f);
  EXPECT_EQ(s.options().growth_interval, 1000);
  EXPECT_EQ(s.options().hysteresis, 2);
  EXPECT_EQ(s.inv_scale(), 1.0f / 4294967296.0f);
}

TEST(DynamicLossScaler, OverflowBacksOffAfterHysteresis) {
  DynamicLossScaler s({.initial_scale = 1024.0f, .growth_interval = 4, .hysteresis = 2});
  // (found_inf, scale after, hysteresis tracker after), as Megatron's update() goes.
  const struct {
    bool inf;
    float scale;
    int64_t hysteresis;
  } seq[] = {
      {true, 1024, 1},   // the first overflow spends hysteresis only
      {false, 1024, 1},  // a clean iteration does not give it back
      {true, 512, 0},    // hysteresis used up: back off
      {true, 256, -1},   // and on every overflow from now on
      {false, 256, -1}, {false, 256, -1}, {false, 256, -1},
      {false, 512, 2},   // 4 clean in a row: grow, hysteresis restored
      {true, 512, 1},
      {false, 512, 1}, {false, 512, 1}, {false, 512, 1},
      {true, 256, 0},    // the growth count restarted at the overflow
  };
  int i = 0;
  for (const auto& step : seq) {
    s.update(step.inf);
    EXPECT_EQ(s.scale(), step.scale) << "update " << i;
    EXPECT_EQ(s.hysteresis_tracker(), step.hysteresis) << "update " << i;
    ++i;
  }
}

TEST(DynamicLossScaler, GrowsAfterTheWindowAndStopsAtTheMinimum) {
  DynamicLossScaler s;  // window 1000
  for (int i = 0; i < 999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 4294967296.0f);
  EXPECT_EQ(s.growth_tracker(), 999);
  s.update(false);
  EXPECT_EQ(s.scale(), 8589934592.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  DynamicLossScaler low({.initial_scale = 4.0f, .min_scale = 1.0f, .hysteresis = 1});
  for (int i = 0; i < 5; ++i) low.update(true);
  EXPECT_EQ(low.scale(), 1.0f);  // 4, 2, 1, 1, 1
}

TEST(DynamicLossScaler, StateRoundTrip) {
  DynamicLossScaler a({.initial_scale = 64.0f, .growth_interval = 3, .hysteresis = 3});
  a.update(true);
  a.update(false);
  DynamicLossScaler b({.initial_scale = 64.0f, .growth_interval = 3, .hysteresis = 3});
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.growth_tracker(), 1);
  EXPECT_EQ(b.hysteresis_tracker(), 2);
  for (bool inf : {false, true, true, false, false, false}) a.update(inf), b.update(inf);
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_THROW(b.load_state_dict({{"scale", 2.0}}), qk::IoError);
}

TEST(ConstantLossScaler, NeverChanges) {
  qk::optim::ConstantLossScaler s(128.0f);
  s.update(true);
  s.update(false);
  EXPECT_EQ(s.scale(), 128.0f);
  EXPECT_TRUE(s.state_dict().empty());
  EXPECT_THROW(qk::optim::ConstantLossScaler(0.0f), qk::ValueError);
  EXPECT_THROW(DynamicLossScaler({.initial_scale = 1.0f, .min_scale = 2.0f}), qk::ValueError);
}

}  // namespace
