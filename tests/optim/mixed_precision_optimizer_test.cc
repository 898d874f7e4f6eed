// The fp32-main-weights optimizer: bf16 model weights are the rounded fp32
// main weights after every step, the main weights follow a plain fp32
// optimizer exactly, an inf/NaN step changes nothing, the loss scale is
// divided out, clipping uses the global L2 norm, fp32 accumulation keeps
// what bf16 would lose, and the state saves and loads by parameter name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <unistd.h>

#include "common/scratch_dir.h"
#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/nn/nn.h"
#include "qk/optim/adam.h"
#include "qk/optim/sgd.h"
#include "qk/optim/optimizer_param_scheduler.h"
#include "qk/optim/mixed_precision_optimizer.h"

namespace {

using namespace qk;
using optim::MixedPrecisionOptimizer;
using optim::NamedParam;
using optim::ParamGroupSpec;

// build/test_tmp/train_mpo/<pid>, removed at exit when every test passed.
const qk::test::ScratchRoot kScratch("train_mpo");
std::string tmp_path(const std::string& name) {
  std::filesystem::create_directories(kScratch.root());
  return (kScratch.root() / name).string();
}

// Leaf parameters of the given dtype with deterministic values.
Tensor param(const Shape& shape, uint64_t seed, DType dt) {
  Generator g(seed);
  return randn(shape, {}, g).to(dt).requires_grad_();
}

Tensor grad_like(const Tensor& p, uint64_t seed, double scale = 1.0) {
  Generator g(seed);
  return (randn(p.shape(), {}, g) * scale).to(p.dtype());
}

std::vector<float> values(const Tensor& t) { return t.to(DType::f32).contiguous().to_vector<float>(); }

TEST(MixedPrecisionOptimizer, Bf16WeightsAreTheRoundedFp32MainWeights) {
  Tensor w = param({7, 5}, 1, DType::bf16), b = param({5}, 2, DType::bf16);
  MixedPrecisionOptimizer opt({{{{"w", w}, {"b", b}}}}, optim::adamw(optim::AdamWOptions(1e-2).weight_decay(0.1)),
                              nullptr, {.clip_grad = 0});
  ASSERT_TRUE(opt.has_fp32_copies());
  // The reference: fp32 AdamW on fp32 copies of the same start, fed the
  // same gradients converted to f32.
  Tensor rw = w.detach().to(DType::f32).requires_grad_(), rb = b.detach().to(DType::f32).requires_grad_();
  optim::AdamW ref({rw, rb}, optim::AdamWOptions(1e-2).weight_decay(0.1));
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    w.set_grad(grad_like(w, 100 + step));
    b.set_grad(grad_like(b, 200 + step));
    rw.set_grad(w.grad().to(DType::f32));
    rb.set_grad(b.grad().to(DType::f32));
    const auto r = opt.step();
    ref.step();
    ASSERT_TRUE(r.updated);
    EXPECT_EQ(values(opt.main_params()[0]), values(rw)) << "step " << step;
    EXPECT_EQ(values(opt.main_params()[1]), values(rb)) << "step " << step;
    EXPECT_EQ(values(w), values(opt.main_params()[0].to(DType::bf16))) << "step " << step;
    EXPECT_EQ(values(b), values(opt.main_params()[1].to(DType::bf16))) << "step " << step;
    EXPECT_EQ(w.dtype(), DType::bf16);
  }
  // The main weights keep what bf16 rounds away.
  EXPECT_NE(values(opt.main_params()[0]), values(w));
}

TEST(MixedPrecisionOptimizer, InfOrNanStepChangesNothing) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    Tensor w = param({4, 3}, 3, DType::bf16);
    MixedPrecisionOptimizer opt({{{{"w", w}}}}, optim::adamw(optim::AdamWOptions(1e-2)),
                                std::make_unique<optim::DynamicLossScaler>(
                                    optim::DynamicLossScalerOptions{.initial_scale = 1024.0f, .hysteresis = 1}));
    opt.zero_grad();
    w.set_grad(grad_like(w, 5));
    ASSERT_TRUE(opt.step().updated);
    const auto state = opt.optimizer().state_dict();
    const auto before_w = values(w), before_main = values(opt.main_params()[0]);
    opt.zero_grad();
    Tensor g = grad_like(w, 6).to(DType::f32);
    g.data_ptr<float>()[4] = bad;
    w.set_grad(g.to(DType::bf16));
    const auto r = opt.step();
    EXPECT_FALSE(r.updated);
    EXPECT_TRUE(r.found_inf);
    EXPECT_TRUE(std::isnan(r.grad_norm));
    EXPECT_EQ(values(w), before_w);
    EXPECT_EQ(values(opt.main_params()[0]), before_main);
    const auto after = opt.optimizer().state_dict();
    EXPECT_EQ(after.scalars, state.scalars);  // the step count did not move
    for (const auto& [k, t] : state.tensors) EXPECT_EQ(values(after.tensors.at(k)), values(t)) << k;
    EXPECT_EQ(opt.loss_scale(), 512.0f);  // backed off (hysteresis 1)
  }
}

// Gradients of (loss * scale) step exactly like the unscaled ones when the
// scale is a power of two.
TEST(MixedPrecisionOptimizer, LossScaleIsDividedOut) {
  Tensor a = param({3, 3}, 7, DType::f32), b = a.detach().clone().requires_grad_();
  MixedPrecisionOptimizer scaled({{{{"p", a}}}}, optim::sgd(optim::SGDOptions(0.1).momentum(0.9)),
                                 std::make_unique<optim::ConstantLossScaler>(4096.0f));
  MixedPrecisionOptimizer plain({{{{"p", b}}}}, optim::sgd(optim::SGDOptions(0.1).momentum(0.9)));
  for (int step = 0; step < 3; ++step) {
    scaled.zero_grad();
    plain.zero_grad();
    (sum(square(a)) * static_cast<double>(scaled.loss_scale())).backward();
    sum(square(b)).backward();
    const auto ra = scaled.step(), rb = plain.step();
    EXPECT_EQ(ra.grad_norm, rb.grad_norm);
  }
  EXPECT_EQ(values(a), values(b));
}

TEST(MixedPrecisionOptimizer, ClipsByTheGlobalL2Norm) {
  // Gradients (3, 0) and (4): global norm 5.
  Tensor x = zeros({2}).requires_grad_(), y = zeros({1}).requires_grad_();
  MixedPrecisionOptimizer opt({{{{"x", x}, {"y", y}}}}, optim::sgd(optim::SGDOptions(1.0)), nullptr,
                              {.clip_grad = 1.0});
  opt.zero_grad();
  x.set_grad(from_vector<float>({3, 0}, {2}));
  y.set_grad(from_vector<float>({4}, {1}));
  const auto r = opt.step();
  EXPECT_DOUBLE_EQ(r.grad_norm, 5.0);
  const float c = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_FLOAT_EQ(x.to_vector<float>()[0], -3 * c);
  EXPECT_FLOAT_EQ(y.to_vector<float>()[0], -4 * c);
  // Below the threshold nothing is scaled.
  MixedPrecisionOptimizer loose({{{{"x", x}, {"y", y}}}}, optim::sgd(optim::SGDOptions(1.0)), nullptr,
                                {.clip_grad = 10.0});
  const auto before = values(x);
  loose.zero_grad();
  x.set_grad(from_vector<float>({3, 0}, {2}));
  y.set_grad(from_vector<float>({4}, {1}));
  EXPECT_DOUBLE_EQ(loose.step().grad_norm, 5.0);
  EXPECT_FLOAT_EQ(x.to_vector<float>()[0], before[0] - 3);
}

// 1 + 256 * 2^-9: in bf16 (8 bits of mantissa) every 2^-9 added to 1 is lost;
// the fp32 buffer keeps the exact 1.5.
TEST(MixedPrecisionOptimizer, Fp32AccumulationKeepsWhatBf16Loses) {
  for (bool fp32 : {true, false}) {
    Tensor w = zeros({1}, TensorOptions(DType::bf16)).requires_grad_();
    MixedPrecisionOptimizer opt({{{{"w", w}}}}, optim::sgd(optim::SGDOptions(1.0)), nullptr,
                                {.clip_grad = 0, .accumulate_allreduce_grads_in_fp32 = fp32});
    opt.zero_grad();
    for (int micro = 0; micro < 257; ++micro) {
      const float g = micro == 0 ? 1.0f : 1.0f / 512;
      (sum(w * from_vector<float>({g}, {1}).to(DType::bf16))).backward();
      opt.accumulate_grads();
    }
    const auto r = opt.step();
    EXPECT_DOUBLE_EQ(r.grad_norm, fp32 ? 1.5 : 1.0) << (fp32 ? "fp32 buffer" : "bf16 grads");
  }
}

TEST(MixedPrecisionOptimizer, MegatronGroupsDecayMatricesOnly) {
  nn::Sequential net(nn::Linear(3, 4), nn::LayerNorm(nn::LayerNormOptions({4})), nn::Linear(4, 2));
  const auto groups = optim::megatron_param_groups(*net);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].wd_mult, 1.0);
  EXPECT_EQ(groups[1].wd_mult, 0.0);
  std::vector<std::string> decay, none;
  for (const auto& [n, p] : groups[0].params) decay.push_back(n);
  for (const auto& [n, p] : groups[1].params) none.push_back(n);
  EXPECT_EQ(decay, (std::vector<std::string>{"0.weight", "2.weight"}));
  EXPECT_EQ(none, (std::vector<std::string>{"0.bias", "1.weight", "1.bias", "2.bias"}));
  MixedPrecisionOptimizer opt(groups, optim::adamw(optim::AdamWOptions(1e-3)));
  optim::ParamSchedulerOptions so;
  so.max_lr = 1e-3, so.lr_decay_steps = 10, so.start_wd = so.end_wd = 0.1;
  optim::OptimizerParamScheduler sched(&opt.optimizer(), so, opt.group_schedules());
  EXPECT_EQ(opt.optimizer().weight_decay(0), 0.1);
  EXPECT_EQ(opt.optimizer().weight_decay(1), 0.0);
}

// Saved from one parameter order, loaded into another: names decide.
TEST(MixedPrecisionOptimizer, StateLoadsByNameNotPosition) {
  Tensor a = param({2, 3}, 11, DType::bf16), b = param({4}, 12, DType::bf16);
  MixedPrecisionOptimizer opt({{{{"a", a}, {"b", b}}}}, optim::adamw(optim::AdamWOptions(1e-2)));
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    a.set_grad(grad_like(a, 30 + s));
    b.set_grad(grad_like(b, 40 + s));
    opt.step();
  }
  const std::string path = tmp_path("state.safetensors");
  opt.save_state(path);

  Tensor a2 = a.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  MixedPrecisionOptimizer other({{{{"b", b2}, {"a", a2}}}}, optim::adamw(optim::AdamWOptions(1e-2)));
  other.load_state(path);
  EXPECT_EQ(values(other.main_params()[0]), values(opt.main_params()[1]));  // b
  EXPECT_EQ(values(other.main_params()[1]), values(opt.main_params()[0]));  // a
  // One more identical step on both: the same weights.
  for (auto* o : {&opt, &other}) o->zero_grad();
  a.set_grad(grad_like(a, 50)), a2.set_grad(grad_like(a, 50));
  b.set_grad(grad_like(b, 60)), b2.set_grad(grad_like(b, 60));
  opt.step();
  other.step();
  EXPECT_EQ(values(a2), values(a));
  EXPECT_EQ(values(b2), values(b));

  Tensor c = param({4}, 13, DType::bf16);
  MixedPrecisionOptimizer stranger({{{{"a", a2}, {"c", c}}}}, optim::adamw(optim::AdamWOptions(1e-2)));
  try {
    stranger.load_state(path);
    ADD_FAILURE() << "loading state of another model must fail";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
}

}  // namespace
