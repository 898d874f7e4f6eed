// The MoE layer in one process: against a dense reference (every expert on
// every token, weighted by the router's probabilities), its variants
// (grouped GEMM, fused permutation, both dispatchers, padding to capacity,
// shared-expert overlap) against each other, parameter names and
// initialisation at any expert- and tensor-parallel layout, statistics and
// the refused configurations.
#include <gtest/gtest.h>

#include "moe_testing.h"
#include "qk/autograd/functions.h"
#include "qk/parallel/sharding.h"
#include "qk/transformer/functional.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {
namespace {

using moe_test::rel_diff;
using moe_test::seeded_randn;

// Top-2 of 4 experts, capacity factor 1 (drops), a shared expert of width 24.
TransformerConfig dropping_config() {
  TransformerConfig c = moe_test::tiny_moe_config();
  c.moe_expert_capacity_factor = 1.0;
  c.moe_shared_expert_intermediate_size = 24;
  return c;
}

struct LayerRun {
  Tensor out, input_grad;
  nn::NamedTensors grads;
  MoELayerStats stats;
};

// One forward and backward of a fresh layer (seed 1234) on fixed data.
LayerRun run_layer(const TransformerConfig& c, DType dtype = DType::f32) {
  manual_seed(1234);
  MoELayer layer(c, 1);
  if (dtype != DType::f32) layer->to(dtype);
  const Tensor x = seeded_randn({2, 8, c.hidden_size}, 5, dtype).requires_grad_();
  LayerRun r;
  r.out = layer(x);
  r.out.backward(seeded_randn(r.out.shape(), 6, dtype));
  r.input_grad = x.grad();
  for (const auto& p : layer->named_parameters()) r.grads.insert(p.key(), p.value().grad());
  r.stats = layer->last_stats();
  return r;
}

void expect_same_run(const LayerRun& got, const LayerRun& want, double tol, const std::string& what) {
  EXPECT_LE(rel_diff(got.out, want.out), tol) << what << ": output";
  EXPECT_LE(rel_diff(got.input_grad, want.input_grad), tol) << what << ": input gradient";
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  for (const auto& g : want.grads) {
    ASSERT_TRUE(got.grads.contains(g.key())) << what << ": no " << g.key();
    ASSERT_TRUE(got.grads[g.key()].defined()) << what << ": no gradient for " << g.key();
    EXPECT_LE(rel_diff(got.grads[g.key()], g.value()), tol) << what << ": " << g.key();
  }
  EXPECT_EQ(got.stats.tokens_per_expert, want.stats.tokens_per_expert) << what;
  EXPECT_EQ(got.stats.dropped_routes, want.stats.dropped_routes) << what;
}

Tensor dense_mlp(const Tensor& x, const Tensor& w1, const Tensor& w2, const TransformerConfig& c) {
  return linear(mlp_activation(linear(x, w1), c.activation_func, c.gated_linear_unit), w2);
}

TEST(MoELayer, EqualsEveryExpertOnEveryTokenWeightedByTheRouter) {
  const TransformerConfig c = dropping_config();
  const LayerRun got = run_layer(c);
  EXPECT_GT(got.stats.dropped_routes, 0) << "the test wants capacity drops";

  // The dense reference on the same weights: the layer's router, every
  // expert on every token, out = sum_e probs[:, e] * expert_e(x) + shared(x).
  manual_seed(1234);
  MoELayer layer(c, 1);
  const Tensor x = seeded_randn({2, 8, c.hidden_size}, 5).requires_grad_();
  const Tensor flat = x.reshape({16, c.hidden_size});
  const RoutingDecision routing = layer->router->forward(flat, 2);
  Tensor out = dense_mlp(flat, layer->shared_experts->fc1_weight, layer->shared_experts->fc2_weight, c);
  for (int64_t e = 0; e < c.num_moe_experts; ++e) {
    const Tensor expert = dense_mlp(flat, layer->experts->fc1_weight[e], layer->experts->fc2_weight[e], c);
    out = out + routing.probs.narrow(1, e, 1) * expert;
  }
  out = out.reshape({2, 8, c.hidden_size});
  out.backward(seeded_randn(out.shape(), 6));
  LayerRun want{out, x.grad(), {}, {}};
  for (const auto& p : layer->named_parameters()) want.grads.insert(p.key(), p.value().grad());
  want.stats.tokens_per_expert = routing.tokens_per_expert;
  want.stats.dropped_routes = routing.dropped_routes;
  expect_same_run(got, want, 1e-5, "dense reference");
}

TEST(MoELayer, VariantsAgree) {
  TransformerConfig base = dropping_config();
  const LayerRun want = run_layer(base);
  struct Variant {
    const char* name;
    void (*apply)(TransformerConfig&);
  };
  const Variant variants[] = {
      {"grouped gemm", [](TransformerConfig& c) { c.moe_grouped_gemm = true; }},
      {"permute fusion", [](TransformerConfig& c) { c.moe_permute_fusion = true; }},
      {"alltoall", [](TransformerConfig& c) { c.moe_token_dispatcher_type = MoETokenDispatcher::alltoall; }},
      {"pad to capacity", [](TransformerConfig& c) { c.moe_pad_expert_input_to_capacity = true; }},
      {"alltoall, pad, fused, grouped, overlap",
       [](TransformerConfig& c) {
         c.moe_token_dispatcher_type = MoETokenDispatcher::alltoall;
         c.moe_pad_expert_input_to_capacity = c.moe_permute_fusion = c.moe_grouped_gemm = true;
         c.moe_shared_expert_overlap = true;
       }},
  };
  for (const Variant& v : variants) {
    TransformerConfig c = base;
    v.apply(c);
    const LayerRun got = run_layer(c);
    expect_same_run(got, want, 1e-5, v.name);
    if (c.moe_pad_expert_input_to_capacity) {
      // 4 experts x capacity 8 rows, of which 32 - dropped are routes.
      EXPECT_EQ(got.stats.padding_rows, 4 * 8 - (32 - want.stats.dropped_routes)) << v.name;
    }
  }
}

TEST(MoELayer, BiasesAndNonGatedActivation) {
  TransformerConfig c = dropping_config();
  c.add_bias_linear = true;
  c.gated_linear_unit = false;
  c.activation_func = Activation::gelu;
  const LayerRun want = run_layer(c);
  EXPECT_TRUE(want.grads.contains("experts.local_experts.3.linear_fc2.bias"));
  c.moe_grouped_gemm = c.moe_permute_fusion = true;
  c.moe_token_dispatcher_type = MoETokenDispatcher::alltoall;
  expect_same_run(run_layer(c), want, 1e-5, "grouped, fused, alltoall with biases");
}

TEST(MoELayer, Bf16ParametersFollowF32) {
  TransformerConfig c = dropping_config();
  c.moe_expert_capacity_factor.reset();  // rounding must not move a route across the capacity
  c.moe_grouped_gemm = c.moe_permute_fusion = true;
  const LayerRun f32 = run_layer(c), bf16 = run_layer(c, DType::bf16);
  EXPECT_EQ(bf16.out.dtype(), DType::bf16);
  EXPECT_LE(rel_diff(bf16.out, f32.out), 3e-2);
  EXPECT_LE(rel_diff(bf16.input_grad, f32.input_grad), 5e-2);
  EXPECT_LE(rel_diff(bf16.grads["experts.local_experts.1.linear_fc1.weight"],
                     f32.grads["experts.local_experts.1.linear_fc1.weight"]),
            5e-2);
}

TEST(MoELayer, ParameterNamesUseTheGlobalExpertIndex) {
  const TransformerConfig c = dropping_config();
  manual_seed(1234);
  MoELayer layer(c, 1);
  std::vector<std::string> names;
  for (const auto& p : layer->named_parameters()) names.push_back(p.key());
  const std::vector<std::string> want{"router.weight",
                                      "experts.local_experts.0.linear_fc1.weight",
                                      "experts.local_experts.0.linear_fc2.weight",
                                      "experts.local_experts.1.linear_fc1.weight",
                                      "experts.local_experts.1.linear_fc2.weight",
                                      "experts.local_experts.2.linear_fc1.weight",
                                      "experts.local_experts.2.linear_fc2.weight",
                                      "experts.local_experts.3.linear_fc1.weight",
                                      "experts.local_experts.3.linear_fc2.weight",
                                      "shared_experts.linear_fc1.weight",
                                      "shared_experts.linear_fc2.weight"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(layer->experts->fc1_weight[0].shape(), (Shape{32, 16}));  // [2F, C], SwiGLU
  EXPECT_EQ(layer->experts->fc2_weight[0].shape(), (Shape{16, 16}));
  EXPECT_TRUE(is_expert_parameter("decoder.layers.0.mlp.experts.local_experts.7.linear_fc1.weight"));
  EXPECT_TRUE(is_expert_parameter("experts.local_experts.0.linear_fc2.weight"));
  EXPECT_FALSE(is_expert_parameter("decoder.layers.0.mlp.shared_experts.linear_fc1.weight"));
  EXPECT_FALSE(is_expert_parameter("decoder.layers.0.mlp.router.weight"));
  EXPECT_FALSE(is_expert_parameter("decoder.layers.0.mlp.linear_fc1.weight"));
}

TEST(MoELayer, TheSameSeedGivesTheSameExpertAtAnyLayout) {
  TransformerConfig c = dropping_config();
  manual_seed(7);
  Experts all(c);
  SharedExperts shared_all(c);
  c.expert_model_parallel_size = 2;
  manual_seed(7);
  Experts second_half(c, ExpertLayout{.ep_rank = 1, .ep_size = 2});
  EXPECT_EQ(second_half->first_expert(), 2);
  std::vector<std::string> names;
  for (const auto& p : second_half->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names[0], "local_experts.2.linear_fc1.weight");
  for (int64_t l = 0; l < 2; ++l) {
    EXPECT_EQ(rel_diff(second_half->fc1_weight[l], all->fc1_weight[2 + l]), 0.0);
    EXPECT_EQ(rel_diff(second_half->fc2_weight[l], all->fc2_weight[2 + l]), 0.0);
  }
  // Tensor parallel: fc1 keeps matching gate and up rows (stride 2), fc2 columns.
  manual_seed(7);
  const ExpertLayout tp1{.ep_rank = 1, .ep_size = 2, .tp_rank = 1, .tp_size = 2};
  Experts shard(c, tp1);
  SharedExperts shared_shard(c, tp1);
  EXPECT_EQ(rel_diff(shard->fc1_weight[1], parallel::shard_tensor(all->fc1_weight[3], {0, 2}, 1, 2)), 0.0);
  EXPECT_EQ(rel_diff(shard->fc2_weight[1], parallel::shard_tensor(all->fc2_weight[3], {1, 1}, 1, 2)), 0.0);
  EXPECT_EQ(shard->fc1_weight[1].shape(), (Shape{16, 16}));
  EXPECT_EQ(rel_diff(shared_shard->fc1_weight, parallel::shard_tensor(shared_all->fc1_weight, {0, 2}, 1, 2)), 0.0);
}

TEST(MoELayer, StatisticsCountKeptAndDroppedRoutes) {
  const LayerRun r = run_layer(dropping_config());
  ASSERT_EQ(r.stats.tokens_per_expert.size(), 4u);
  int64_t kept = 0;
  for (int64_t t : r.stats.tokens_per_expert) {
    EXPECT_LE(t, 8);  // capacity ceil(16 tokens x 2 / 4 experts)
    kept += t;
  }
  EXPECT_EQ(kept + r.stats.dropped_routes, 16 * 2);
}

TEST(MoELayer, RefusesWhatItCannotRun) {
  TransformerConfig c = dropping_config();
  c.moe_shared_expert_overlap = true;  // needs the alltoall dispatcher
  EXPECT_THROW(MoELayer(c, 1), ValueError);
  c = dropping_config();
  c.expert_model_parallel_size = 2;  // no expert-parallel group of that size
  EXPECT_THROW(MoELayer(c, 1), ValueError);
  c = dropping_config();
  c.moe_ffn_hidden_size = 0;
  EXPECT_THROW(MoELayer(c, 1), ValueError);
  manual_seed(1);
  MoELayer layer(dropping_config(), 1);
  EXPECT_THROW(layer(zeros({2, 8, 15})), ValueError);
}

}  // namespace
}  // namespace qk::transformer
