// TopKRouter against the PyTorch reference of tests/fixtures/gen_moe_router.py
// (probs, routing map, counts, every loss value and the gradients through the
// probs and through each loss), against finite differences, and its own
// behaviours: jitter, expert-bias updates, pad, refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/nn/safetensors.h"
#include "qk/transformer/moe_router.h"
#include "transformer/fixture_params.h"

namespace qk {
namespace {

using transformer::MoELoadBalancing;
using transformer::MoEScoreFunction;
using transformer::RoutingDecision;
using transformer::TopKRouter;
using transformer::TransformerConfig;

const nn::SafetensorsFile& fixture() {
  static const nn::SafetensorsFile f =
      nn::load_safetensors(std::string(QK_SOURCE_DIR) + "/tests/fixtures/torch/moe_router.safetensors");
  return f;
}

// The config gen_moe_router.py wrote for case `name`.
TransformerConfig case_config(const std::string& name) {
  const nn::Metadata& m = fixture().metadata;
  auto get = [&](const char* key) { return m.at(name + "." + key); };
  auto i = [&](const char* key) { return static_cast<int64_t>(std::stoll(get(key))); };
  auto d = [&](const char* key) { return std::stod(get(key)); };
  auto b = [&](const char* key) { return get(key) == "True"; };
  const Tensor& w = fixture().tensors.at(name + ".weight");
  TransformerConfig c;
  c.num_moe_experts = w.size(0);
  c.hidden_size = w.size(1);
  c.moe_router_topk = i("topk");
  c.moe_router_score_function = transformer::parse_moe_score_function(get("score_function"));
  c.moe_router_pre_softmax = b("pre_softmax");
  c.moe_router_num_groups = i("num_groups");
  c.moe_router_group_topk = i("group_topk");
  if (d("scaling_factor") > 0) c.moe_router_topk_scaling_factor = d("scaling_factor");
  c.moe_router_load_balancing_type = transformer::parse_moe_load_balancing(get("load_balancing"));
  c.moe_aux_loss_coeff = d("aux_coeff");
  c.moe_z_loss_coeff = d("z_coeff");
  c.moe_device_level_aux_loss_coeff = d("device_coeff");
  c.moe_comm_aux_loss_coeff = d("comm_coeff");
  c.moe_router_enable_expert_bias = b("expert_bias");
  c.moe_router_bias_update_rate = d("bias_update_rate");
  if (d("capacity_factor") > 0) c.moe_expert_capacity_factor = d("capacity_factor");
  c.moe_token_drop_policy = transformer::parse_moe_token_drop_policy(get("drop_policy"));
  c.moe_pad_expert_input_to_capacity = b("pad");
  c.moe_device_level_capacity = b("device_level_capacity");
  c.expert_model_parallel_size = i("ep_size");
  return c;
}

std::string meta(const std::string& name, const char* key) { return fixture().metadata.at(name + "." + key); }

::testing::AssertionResult same_values(const Tensor& got, const Tensor& want, const std::string& what) {
  if (got.shape() != want.shape() || got.to_vector<double>() != want.to_vector<double>())
    return ::testing::AssertionFailure() << what << " differs: got " << got << ", expected " << want;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult close_value(double got, double want, double rtol, const std::string& what) {
  if (std::fabs(got - want) <= rtol * std::fabs(want) + 1e-12) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": got " << got << ", expected " << want;
}

TopKRouter router_for_case(const std::string& name) {
  TopKRouter router(case_config(name), 1);
  NoGradGuard no_grad;
  router->weight.copy_(fixture().tensors.at(name + ".weight"));
  if (router->expert_bias.defined()) router->expert_bias.copy_(fixture().tensors.at(name + ".expert_bias"));
  if (meta(name, "training") != "True") router->eval();
  router->set_aux_loss_backward_scale(std::stod(meta(name, "backward_scale")));
  return router;
}

class RouterParity : public ::testing::TestWithParam<std::string> {};

TEST_P(RouterParity, MatchesTorchReference) {
  const std::string name = GetParam();
  const auto& t = fixture().tensors;
  TopKRouter router = router_for_case(name);
  const int64_t batch = std::stoll(meta(name, "batch_size"));
  const int64_t steps = std::stoll(meta(name, "steps"));
  const bool training = meta(name, "training") == "True";
  for (int64_t step = 0; step < steps; ++step) {
    const std::string pre = name + "." + std::to_string(step) + ".";
    SCOPED_TRACE(pre);
    const Tensor hidden = t.at(pre + "hidden").clone().requires_grad_();
    router->zero_grad();
    const RoutingDecision d = router(hidden, batch);
    EXPECT_TRUE(test::close_scaled(d.logits, t.at(pre + "logits"), 1e-6, "logits"));
    EXPECT_TRUE(test::close_scaled(d.probs, t.at(pre + "probs"), 1e-5, "probs"));
    EXPECT_TRUE(same_values(d.routing_map, t.at(pre + "routing_map"), "routing_map"));
    EXPECT_EQ(d.routing_map.dtype(), DType::boolean);
    EXPECT_TRUE(same_values(from_vector<int64_t>(d.tokens_per_expert, {router->weight.size(0)}),
                            t.at(pre + "tokens_per_expert"), "tokens_per_expert"));
    EXPECT_EQ(d.dropped_routes, t.at(pre + "dropped_routes").item<int64_t>());
    const std::vector<double> losses = t.at(pre + "losses").to_vector<double>();
    EXPECT_TRUE(close_value(d.load_balancing_loss, losses[0], 1e-5, "load_balancing_loss"));
    EXPECT_TRUE(close_value(d.z_loss, losses[1], 1e-5, "z_loss"));
    EXPECT_TRUE(close_value(d.device_level_aux_loss, losses[2], 1e-5, "device_level_aux_loss"));
    EXPECT_TRUE(close_value(d.comm_aux_loss, losses[3], 1e-5, "comm_aux_loss"));

    sum(d.probs * t.at(pre + "upstream")).backward();
    EXPECT_TRUE(test::close_scaled(hidden.grad(), t.at(pre + "grad_hidden"), 2e-5, "grad of hidden"));
    EXPECT_TRUE(test::close_scaled(router->weight.grad(), t.at(pre + "grad_weight"), 2e-5, "grad of weight"));

    if (t.count(pre + "bias_after")) {
      router->update_expert_bias();
      EXPECT_TRUE(test::close_scaled(router->expert_bias, t.at(pre + "bias_after"), 1e-7, "expert_bias after update"));
    }
  }

  // The losses' gradients alone: a fresh router, the last step's input, no gradient into probs.
  const std::string pre = name + "." + std::to_string(steps - 1) + ".";
  if (!t.count(pre + "loss_grad_hidden")) return;
  TopKRouter fresh = router_for_case(name);
  const Tensor hidden = t.at(pre + "hidden").clone().requires_grad_();
  const RoutingDecision d = fresh(hidden, batch);
  sum(d.probs * 0.0).backward();
  const Tensor want = t.at(pre + "loss_grad_weight");
  const bool any_loss = d.load_balancing_loss != 0 || d.z_loss != 0 || d.device_level_aux_loss != 0 ||
                        d.comm_aux_loss != 0;
  EXPECT_EQ(any_loss, training && amax(abs(want)).item<double>() > 0) << "a loss is on exactly when it has a gradient";
  EXPECT_TRUE(test::close_scaled(hidden.grad(), t.at(pre + "loss_grad_hidden"), 2e-5, "loss-only grad of hidden"));
  EXPECT_TRUE(test::close_scaled(fresh->weight.grad(), want, 2e-5, "loss-only grad of weight"));
}

const std::vector<std::string> kCases = {
    "softmax_aux_z", "softmax_pre_seq", "softmax_group_scaled", "softmax_pre_group_seq", "sigmoid_bias_group_seq",
    "sigmoid_bias_aux", "sigmoid_top1_z", "sinkhorn_k2", "sinkhorn_k1", "sinkhorn_eval", "none_z", "softmax_eval",
    "devcomm_aux", "devcomm_group_seq", "devcomm_only", "capacity_probs", "capacity_probs_pad", "capacity_position",
    "capacity_sigmoid_seq", "device_capacity_probs", "device_capacity_position", "global_aux"};

INSTANTIATE_TEST_SUITE_P(Fixtures, RouterParity, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(RouterParity, CoversEveryFixtureCase) {
  std::set<std::string> in_file;
  for (const auto& [key, value] : fixture().metadata)
    if (test::ends_with(key, ".topk")) in_file.insert(key.substr(0, key.size() - 5));
  EXPECT_EQ(in_file, std::set<std::string>(kCases.begin(), kCases.end()));
  // The capacity cases must drop something, or they test nothing.
  for (const std::string& name : kCases) {
    if (name.find("capacity") == std::string::npos) continue;
    EXPECT_GT(fixture().tensors.at(name + ".0.dropped_routes").item<int64_t>(), 0) << name;
  }
}

}  // namespace
}  // namespace qk
