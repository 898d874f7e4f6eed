// TopKRouter's process groups on two forked ranks: a sequence split over a
// partition group (sequence parallelism) gives the whole sequence's losses
// and gradients; the expert-bias update and the global aux loss count the
// loads of every rank.
#include <gtest/gtest.h>

#include "parallel/tp_ranks.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/generator.h"
#include "qk/transformer/moe_router.h"

namespace qk::transformer {
namespace {

using qk_tp_test::Group;
using qk_tp_test::on_tp_ranks;
using qk_tp_test::require_close;

TransformerConfig config() {
  TransformerConfig c;
  c.num_moe_experts = 8;
  c.hidden_size = 6;
  c.moe_router_topk = 2;
  c.init_method_std = 0.5;
  return c;
}

// Rows [b*T + part*T/parts, ...) of every sequence b: the part-th shard.
Tensor shard(const Tensor& x, int64_t batch, int64_t part, int64_t parts) {
  const int64_t t = x.size(0) / batch, len = t / parts;
  std::vector<Tensor> rows;
  for (int64_t b = 0; b < batch; ++b) rows.push_back(x.narrow(0, b * t + part * len, len));
  return cat(rows);
}

Tensor summed(const Group& g, const Tensor& t) {
  Tensor s = t.detach().clone();
  g->all_reduce(s);
  return s;
}

TEST(TopKRouterDist, SequenceShardsGiveTheWholeSequencesLossesAndGradients) {
  auto r = on_tp_ranks(2, "moe-router-sp", [](int rank, const Group& tp) {
    TransformerConfig c = config();
    c.moe_router_load_balancing_type = MoELoadBalancing::seq_aux_loss;
    c.moe_aux_loss_coeff = 0.02;
    c.moe_z_loss_coeff = 0.01;
    c.moe_device_level_aux_loss_coeff = 0.03;
    c.moe_comm_aux_loss_coeff = 0.04;
    c.expert_model_parallel_size = 4;
    const int64_t batch = 2, tokens = 16;
    manual_seed(11);
    TopKRouter whole(c, 1);
    manual_seed(11);
    TopKRouter part(c, 1);
    part->set_sequence_partition_group(tp.get());
    manual_seed(12);
    const Tensor hidden = randn({tokens, 6}), upstream = randn({tokens, 8});

    const Tensor h = hidden.clone().requires_grad_();
    const RoutingDecision ref = whole(h, batch);
    sum(ref.probs * upstream).backward();
    const Tensor mine = shard(hidden, batch, rank, 2).requires_grad_();
    const RoutingDecision d = part(mine, batch);
    sum(d.probs * shard(upstream, batch, rank, 2)).backward();

    require_close(d.probs, shard(ref.probs, batch, rank, 2), 1e-6, "probs");
    require_close(mine.grad(), shard(h.grad(), batch, rank, 2), 1e-5, "grad of hidden");
    require_close(summed(tp, part->weight.grad()), whole->weight.grad(), 1e-5, "grad of weight (summed)");
    const Tensor losses = summed(tp, from_vector<double>({d.load_balancing_loss, d.device_level_aux_loss,
                                                          d.comm_aux_loss, d.z_loss / 2}, {4}));
    require_close(losses, from_vector<double>({ref.load_balancing_loss, ref.device_level_aux_loss,
                                               ref.comm_aux_loss, ref.z_loss}, {4}), 1e-6, "losses");
    REQUIRE(ref.comm_aux_loss > 0 && ref.z_loss > 0, "losses on");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TopKRouterDist, ExpertBiasUpdateSumsTheGroupsLoads) {
  auto r = on_tp_ranks(2, "moe-router-bias", [](int rank, const Group& dp) {
    TransformerConfig c = config();
    c.moe_router_score_function = MoEScoreFunction::sigmoid;
    c.moe_router_enable_expert_bias = true;
    manual_seed(3);
    TopKRouter router(c, 1);
    manual_seed(30 + static_cast<uint64_t>(rank));
    const RoutingDecision d = router(randn({24, 6}), 1);
    const std::vector<int64_t> load =
        summed(dp, from_vector<int64_t>(d.tokens_per_expert, {8})).to_vector<int64_t>();
    router->update_expert_bias(dp.get());
    double mean = 0;
    for (int64_t l : load) mean += static_cast<double>(l) / 8;
    const std::vector<float> bias = router->expert_bias.to_vector<float>();
    for (int j = 0; j < 8; ++j) {
      const float want = load[j] > mean ? -1e-3f : load[j] < mean ? 1e-3f : 0.0f;
      REQUIRE(bias[j] == want, "expert ", j, ": bias ", bias[j], " for load ", load[j], " of mean ", mean);
    }
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TopKRouterDist, GlobalAuxLossCountsEveryRanksLoad) {
  auto r = on_tp_ranks(2, "moe-router-global", [](int rank, const Group& dp) {
    TransformerConfig c = config();
    c.moe_router_load_balancing_type = MoELoadBalancing::global_aux_loss;
    c.moe_aux_loss_coeff = 0.05;
    manual_seed(4);
    TopKRouter whole(c, 1);
    manual_seed(4);
    TopKRouter part(c, 1);
    part->set_global_aux_loss_group(dp.get());
    manual_seed(40);
    const Tensor hidden = randn({32, 6}), upstream = randn({32, 8});
    const RoutingDecision ref = whole(hidden, 1);
    sum(ref.probs * upstream).backward();
    const RoutingDecision d = part(hidden.narrow(0, rank * 16, 16), 1);
    sum(d.probs * upstream.narrow(0, rank * 16, 16)).backward();
    require_close(summed(dp, from_vector<double>({d.load_balancing_loss}, {1})),
                  from_vector<double>({ref.load_balancing_loss}, {1}), 1e-6, "loss (summed)");
    require_close(summed(dp, part->weight.grad()), whole->weight.grad(), 1e-5, "grad of weight (summed)");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qk::transformer
