// TopKRouter's behaviours outside the PyTorch fixtures: gradients against
// finite differences, jitter, the expert-bias update, pad, the global-loss
// reset, when losses apply, the refusals, and attach_aux_loss itself.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/tensor/generator.h"
#include "qk/transformer/moe_router.h"

namespace qk::transformer {
namespace {

TransformerConfig small_config(int64_t experts = 4, int64_t hidden = 5, int64_t topk = 2) {
  TransformerConfig c;
  c.num_moe_experts = experts;
  c.hidden_size = hidden;
  c.moe_router_topk = topk;
  c.init_method_std = 0.5;  // logits of order 1: decisive routing
  return c;
}

double total_loss(const RoutingDecision& d) {
  return d.load_balancing_loss + d.z_loss + d.device_level_aux_loss + d.comm_aux_loss;
}

// f = sum(probs * g) + every loss (backward scale 1): its backward is the
// router's gradient, its finite differences (the losses' values included)
// must agree. Both sides run in training with grad mode, in f64.
void expect_matches_finite_differences(const TransformerConfig& c, int64_t batch) {
  manual_seed(7);
  TopKRouter router(c, 1);
  router->to(DType::f64);
  const int64_t n = batch * 4;
  Tensor hidden = randn({n, c.hidden_size}, DType::f64).requires_grad_();
  const Tensor g = randn({n, c.num_moe_experts}, DType::f64);
  auto f = [&] {
    const RoutingDecision d = router(hidden, batch);
    return std::make_pair(sum(d.probs * g), total_loss(d));
  };
  auto [y, losses] = f();
  EXPECT_GT(losses, 0) << "the configuration has losses";
  y.backward();
  for (const Tensor& x : {hidden, router->weight}) {
    const std::vector<double> analytic = x.grad().to_vector<double>();
    Tensor flat = x.detach().view({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const double orig = flat.slice(0, i, i + 1).item<double>();
      const double eps = 1e-6;
      auto at = [&](double v) {
        flat.slice(0, i, i + 1).fill_(v);
        auto [yy, ll] = f();
        return yy.item<double>() + ll;
      };
      const double numeric = (at(orig + eps) - at(orig - eps)) / (2 * eps);
      flat.slice(0, i, i + 1).fill_(orig);
      EXPECT_NEAR(analytic[i], numeric, 1e-6 + 1e-5 * std::fabs(numeric)) << "element " << i;
    }
  }
}

TEST(TopKRouter, GradientsMatchFiniteDifferencesSoftmax) {
  TransformerConfig c = small_config();
  c.moe_router_pre_softmax = true;
  c.moe_router_load_balancing_type = MoELoadBalancing::seq_aux_loss;
  c.moe_aux_loss_coeff = 0.1;
  c.moe_z_loss_coeff = 0.05;
  c.moe_device_level_aux_loss_coeff = 0.1;
  c.moe_comm_aux_loss_coeff = 0.1;
  c.expert_model_parallel_size = 2;
  c.moe_expert_capacity_factor = 1.0;
  expect_matches_finite_differences(c, 2);
}

TEST(TopKRouter, GradientsMatchFiniteDifferencesSigmoidGroups) {
  TransformerConfig c = small_config(8, 3, 3);
  c.moe_router_score_function = MoEScoreFunction::sigmoid;
  c.moe_router_num_groups = 4;
  c.moe_router_group_topk = 2;
  c.moe_router_topk_scaling_factor = 2.5;
  c.moe_aux_loss_coeff = 0.1;
  c.moe_comm_aux_loss_coeff = 0.2;
  expect_matches_finite_differences(c, 1);
}

TEST(TopKRouter, JittersTheInputOnlyInTraining) {
  TransformerConfig c = small_config(4, /*hidden=*/1);  // one input feature: logits / (x w) is the jitter factor
  c.moe_router_pre_softmax = true;
  c.moe_input_jitter_eps = 0.1;
  TopKRouter router(c, 1);
  const Tensor hidden = randn({256, 1});
  const std::vector<float> x = hidden.to_vector<float>(), w = router->weight.to_vector<float>();
  std::vector<double> plain;
  for (float xn : x)
    for (float we : w) plain.push_back(xn * we);
  auto factors = [&] { return router(hidden, 1).logits.to_vector<double>(); };

  router->eval();
  EXPECT_EQ(factors(), plain);
  router->train();
  for (bool grad : {true, false}) {  // with or without grad mode (checkpointed re-runs jitter alike)
    autograd::set_grad_mode(grad);
    const std::vector<double> jittered = factors();
    autograd::set_grad_mode(true);
    double spread = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
      const double u = jittered[i] / plain[i];
      ASSERT_GE(u, 0.9 - 1e-6);
      ASSERT_LE(u, 1.1 + 1e-6);
      EXPECT_NEAR(u, jittered[i - i % 4] / plain[i - i % 4], 1e-5) << "one factor per input element";
      spread = std::max(spread, std::fabs(u - 1));
    }
    EXPECT_GT(spread, 0.05) << "jitter applied";
  }
}

TEST(TopKRouter, ExpertBiasMovesTowardBalanceByTheRate) {
  TransformerConfig c = small_config(4, 6, 1);
  c.moe_router_score_function = MoEScoreFunction::sigmoid;
  c.moe_router_enable_expert_bias = true;
  c.moe_router_bias_update_rate = 0.01;
  TopKRouter router(c, 1);
  {
    NoGradGuard no_grad;  // expert 0 takes most tokens
    router->weight.narrow(1, 0, 1).fill_(0.0);
    router->weight.select(0, 0).narrow(0, 0, 1).fill_(5.0);
  }
  const Tensor x1 = randn({32, 6}), x2 = randn({32, 6});
  x1.narrow(1, 0, 1).fill_(1.0);
  const RoutingDecision a = router(x1, 1), b = router(x2, 1);
  std::vector<int64_t> load(4);
  for (int j = 0; j < 4; ++j) load[j] = a.tokens_per_expert[j] + b.tokens_per_expert[j];
  EXPECT_EQ(router->local_tokens_per_expert(), load);
  router->eval();
  router(x1, 1);  // evaluation does not count
  router->train();
  {
    NoGradGuard no_grad;  // nor does a forward without grad mode (a checkpoint's first pass)
    router(x1, 1);
  }
  EXPECT_EQ(router->local_tokens_per_expert(), load);

  router->update_expert_bias();
  const std::vector<float> bias = router->expert_bias.to_vector<float>();
  double mean = 0;
  for (int64_t l : load) mean += static_cast<double>(l) / 4;
  EXPECT_GT(load[0], mean) << "expert 0 is overloaded";
  for (int j = 0; j < 4; ++j) {
    const float want = load[j] > mean ? -0.01f : load[j] < mean ? 0.01f : 0.0f;
    EXPECT_EQ(bias[j], want) << "expert " << j << " load " << load[j] << " mean " << mean;
  }
  EXPECT_EQ(router->local_tokens_per_expert(), std::vector<int64_t>(4, 0));

  // The bias steers the choice only: a large one takes every token, the weights stay unbiased.
  {
    NoGradGuard no_grad;
    router->expert_bias.fill_(0.0);
    router->expert_bias.narrow(0, 3, 1).fill_(10.0);
  }
  const RoutingDecision d = router(x2, 1);
  EXPECT_EQ(d.tokens_per_expert, (std::vector<int64_t>{0, 0, 0, 32}));
  const Tensor unbiased = sigmoid(d.logits).narrow(1, 3, 1).squeeze(1);
  EXPECT_LT(amax(abs(d.probs.narrow(1, 3, 1).squeeze(1) - unbiased)).item<double>(), 1e-6);
}

TEST(TopKRouter, KeepsTheExpertBiasInF32) {
  TransformerConfig c = small_config();
  c.moe_router_score_function = MoEScoreFunction::sigmoid;
  c.moe_router_enable_expert_bias = true;
  TopKRouter router(c, 1);
  router->to(DType::bf16);
  EXPECT_EQ(router->expert_bias.dtype(), DType::bf16);
  router->keep_expert_bias_f32();
  EXPECT_EQ(router->expert_bias.dtype(), DType::f32);
  EXPECT_EQ(router->named_buffers()["expert_bias"].dtype(), DType::f32) << "the registered buffer itself";
  const RoutingDecision d = router(randn({8, 5}).to(DType::bf16), 2);
  EXPECT_EQ(d.probs.dtype(), DType::f32);
}

TEST(TopKRouter, PadToCapacityLeavesTheRoutingAlone) {
  TransformerConfig c = small_config(4, 5, 2);
  c.moe_expert_capacity_factor = 0.5;
  c.moe_aux_loss_coeff = 0.01;
  manual_seed(3);
  TopKRouter plain(c, 1);
  c.moe_pad_expert_input_to_capacity = true;
  TopKRouter padded(c, 1);
  {
    NoGradGuard no_grad;
    padded->weight.copy_(plain->weight);
  }
  const Tensor x = randn({16, 5});
  const RoutingDecision a = plain(x, 2), b = padded(x, 2);
  EXPECT_GT(a.dropped_routes, 0);
  EXPECT_EQ(a.dropped_routes, b.dropped_routes);
  EXPECT_EQ(a.routing_map.to_vector<double>(), b.routing_map.to_vector<double>());
  EXPECT_EQ(a.probs.to_vector<double>(), b.probs.to_vector<double>());
  EXPECT_EQ(a.tokens_per_expert, b.tokens_per_expert);
}

TEST(TopKRouter, GlobalAuxLossAveragesLoadsUntilReset) {
  TransformerConfig c = small_config();
  c.moe_router_load_balancing_type = MoELoadBalancing::global_aux_loss;
  c.moe_aux_loss_coeff = 0.01;
  manual_seed(5);
  TopKRouter router(c, 1);
  manual_seed(5);
  TopKRouter fresh(c, 1);
  const Tensor x1 = randn({16, 5}), x2 = randn({16, 5});
  router(x1, 1);
  const double accumulated = router(x2, 1).load_balancing_loss;
  const double alone = fresh(x2, 1).load_balancing_loss;
  EXPECT_NE(accumulated, alone) << "the first micro-batch's load counts";
  router->reset_global_aux_loss_tracker();
  EXPECT_EQ(router(x2, 1).load_balancing_loss, alone);
}

TEST(TopKRouter, LossesOnlyInTrainingWithGradMode) {
  TransformerConfig c = small_config();
  c.moe_aux_loss_coeff = 0.1;
  c.moe_z_loss_coeff = 0.1;
  c.moe_device_level_aux_loss_coeff = 0.1;
  c.moe_comm_aux_loss_coeff = 0.1;
  c.expert_model_parallel_size = 2;
  TopKRouter router(c, 1);
  const Tensor x = randn({8, 5});
  const RoutingDecision train = router(x, 1);
  EXPECT_GT(train.load_balancing_loss, 0);
  EXPECT_GT(train.z_loss, 0);
  EXPECT_GT(train.device_level_aux_loss, 0);
  EXPECT_GT(train.comm_aux_loss, 0);
  {
    NoGradGuard no_grad;
    EXPECT_EQ(total_loss(router(x, 1)), 0.0);
  }
  router->eval();
  const RoutingDecision eval = router(x, 1);
  EXPECT_EQ(total_loss(eval), 0.0);
  EXPECT_EQ(eval.probs.to_vector<double>(), train.probs.to_vector<double>()) << "losses do not change the probs";
}

void expect_value_error(const TransformerConfig& c, const std::string& flag) {
  try {
    TopKRouter router(c, 1);
    ADD_FAILURE() << "no error for " << flag;
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
  }
}

TEST(TopKRouter, RefusesWhatMegatronRefuses) {
  TransformerConfig bias = small_config();
  bias.moe_router_enable_expert_bias = true;  // softmax
  expect_value_error(bias, "moe_router_enable_expert_bias");
  expect_value_error(small_config(4, 5, 1), "moe_router_pre_softmax");
  TransformerConfig sinkhorn = small_config();
  sinkhorn.moe_router_load_balancing_type = MoELoadBalancing::sinkhorn;
  sinkhorn.moe_aux_loss_coeff = 0.01;
  expect_value_error(sinkhorn, "moe_aux_loss_coeff");
  TransformerConfig groups = small_config(8, 5, 4);
  groups.moe_router_num_groups = 4;
  groups.moe_router_group_topk = 1;  // 2 experts cannot hold 4
  expect_value_error(groups, "moe_router_group_topk");

  TopKRouter router(small_config(), 1);
  EXPECT_THROW(router(randn({8, 4}), 1), ValueError);  // hidden size 5
  EXPECT_THROW(router(randn({9, 5}), 2), ValueError);  // 9 tokens are not 2 sequences
  EXPECT_THROW(router->update_expert_bias(), ValueError);  // no expert bias
}

TEST(AttachAuxLoss, GivesTheLossItsScaleWhenTheOutputGetsAGradient) {
  const Tensor x = randn({3, 2}).requires_grad_();
  const Tensor w = randn({4}).requires_grad_();
  const Tensor y = transformer::attach_aux_loss(x, sum(w * w), 0.25);
  EXPECT_EQ(y.to_vector<double>(), x.to_vector<double>());
  sum(y * 3.0).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>(6, 3.0));
  const std::vector<double> wv = w.to_vector<double>(), gw = w.grad().to_vector<double>();
  for (size_t i = 0; i < wv.size(); ++i) EXPECT_NEAR(gw[i], 0.25 * 2 * wv[i], 1e-6);

  // No gradient into the output: none for the loss either.
  const Tensor v = randn({4}).requires_grad_();
  const Tensor z = transformer::attach_aux_loss(x, sum(v * v), 1.0);
  sum(x * 2.0).backward();
  EXPECT_FALSE(v.grad().defined() && amax(abs(v.grad())).item<double>() > 0);
  (void)z;
  EXPECT_THROW(transformer::attach_aux_loss(x, w, 1.0), ValueError);  // not a scalar
}

}  // namespace
}  // namespace qk::transformer
