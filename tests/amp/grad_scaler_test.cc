// GradScaler: scaling, unscaling, the skipped step on inf/NaN with back-off,
// growth after growth_interval clean steps, state round trip, misuse errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "qk/amp/grad_scaler.h"
#include "qk/autograd/functions.h"
#include "qk/optim/optim.h"

namespace {

using namespace qk;

struct Fixture {
  Tensor w = from_vector<float>({1.0f, 2.0f}, {2}).requires_grad_();
  optim::SGD opt{{w}, optim::SGDOptions(0.5)};
};

TEST(GradScaler, DefaultsMatchPyTorch) {
  amp::GradScaler s;
  EXPECT_EQ(s.get_scale(), 65536.0);
  auto st = s.state_dict();
  EXPECT_EQ(st.at("growth_factor"), 2.0);
  EXPECT_EQ(st.at("backoff_factor"), 0.5);
  EXPECT_EQ(st.at("growth_interval"), 2000.0);
}

TEST(GradScaler, CleanStepUnscalesAndSteps) {
  Fixture f;
  amp::GradScaler s({.init_scale = 1024.0});
  Tensor loss = sum(mul(f.w, 3.0));  // dloss/dw = 3
  Tensor scaled = s.scale(loss);
  EXPECT_FLOAT_EQ(scaled.item<float>(), loss.item<float>() * 1024.0f);
  scaled.backward();
  EXPECT_FLOAT_EQ(f.w.grad().to_vector<float>()[0], 3.0f * 1024.0f);
  EXPECT_TRUE(s.step(f.opt));
  EXPECT_FALSE(s.found_inf());
  EXPECT_FLOAT_EQ(f.w.grad().to_vector<float>()[0], 3.0f);  // unscaled in place
  EXPECT_FLOAT_EQ(f.w.to_vector<float>()[0], 1.0f - 0.5f * 3.0f);
  s.update();
  EXPECT_EQ(s.get_scale(), 1024.0);
  EXPECT_EQ(s.growth_tracker(), 1);
}

TEST(GradScaler, InfSkipsTheStepAndBacksOff) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    Fixture f;
    amp::GradScaler s;
    s.scale(sum(f.w)).backward();
    // Inject a non-finite gradient, as an f16 overflow would produce.
    f.w.set_grad(from_vector<float>({1.0f, bad}, {2}));
    EXPECT_FALSE(s.step(f.opt));
    EXPECT_TRUE(s.found_inf());
    EXPECT_EQ(f.w.to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));  // untouched
    s.update();
    EXPECT_EQ(s.get_scale(), 32768.0);
    EXPECT_EQ(s.growth_tracker(), 0);
  }
}

TEST(GradScaler, GrowsAfterTheIntervalOfCleanSteps) {
  Fixture f;
  amp::GradScaler s({.init_scale = 8.0, .growth_interval = 3});
  std::vector<double> scales;
  for (int i = 0; i < 7; ++i) {
    f.opt.zero_grad();
    s.scale(sum(f.w)).backward();
    if (i == 4) f.w.set_grad(from_vector<float>({INFINITY, 0.0f}, {2}));
    s.step(f.opt);
    s.update();
    scales.push_back(s.get_scale());
  }
  // clean, clean, clean (x2), clean, inf (x0.5, tracker reset), clean, clean
  EXPECT_EQ(scales, (std::vector<double>{8, 8, 16, 16, 8, 8, 8}));
}

TEST(GradScaler, UnscaleBeforeClippingThenStep) {
  Fixture f;
  amp::GradScaler s({.init_scale = 4.0});
  s.scale(sum(mul(f.w, 2.0))).backward();
  s.unscale_(f.opt);
  EXPECT_FLOAT_EQ(f.w.grad().to_vector<float>()[1], 2.0f);
  EXPECT_THROW(s.unscale_(f.opt), Error);  // twice in one step
  EXPECT_TRUE(s.step(f.opt));               // does not unscale again
  EXPECT_FLOAT_EQ(f.w.to_vector<float>()[1], 2.0f - 0.5f * 2.0f);
  s.update();
  EXPECT_THROW(s.update(), Error);  // no step since the last update
}

TEST(GradScaler, DisabledIsAPassThrough) {
  Fixture f;
  amp::GradScaler s({.enabled = false});
  Tensor loss = sum(f.w);
  EXPECT_TRUE(s.scale(loss).is_same(loss));
  loss.backward();
  EXPECT_TRUE(s.step(f.opt));
  s.update();
  EXPECT_FLOAT_EQ(f.w.to_vector<float>()[0], 0.5f);
}

TEST(GradScaler, StateRoundTripAndBadOptions) {
  amp::GradScaler a({.init_scale = 16.0, .growth_interval = 5});
  amp::GradScaler b;
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.get_scale(), 16.0);
  EXPECT_EQ(b.state_dict(), a.state_dict());
  EXPECT_THROW(b.load_state_dict({{"scale", 1.0}}), Error);
  EXPECT_THROW(amp::GradScaler({.init_scale = 0.0}), Error);
  EXPECT_THROW(amp::GradScaler({.growth_factor = 1.0}), Error);
  EXPECT_THROW(amp::GradScaler({.backoff_factor = 1.5}), Error);
}

}  // namespace
