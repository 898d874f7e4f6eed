// INTERIM: a minimal softmax top-k router with the interface of MOE_API.md
// section 1, so the MoE layer (qk/transformer/moe.h) builds and is tested
// before the real router (qk/transformer/moe_router.h) lands. At integration
// this header and src/transformer/moe/interim_router.cc are deleted and
// moe.h includes moe_router.h instead.
//
// What it does: logits = hidden . weight^T (f32); top-k of the logits,
// softmax over the k (Megatron's default, moe_router_pre_softmax off); with
// moe_expert_capacity_factor, each expert keeps its `capacity` routes with the
// highest probabilities (drop policy probs) or the first ones (position).
// No auxiliary losses, jitter, groups, scaling or expert bias (refused).
#pragma once

#include <cstdint>
#include <vector>

#include "qk/nn/module.h"
#include "qk/transformer/config.h"

namespace qk::transformer {

struct RoutingDecision {
  Tensor probs;        // [N, E] f32, differentiable: weight of each kept route, 0 elsewhere
  Tensor routing_map;  // [N, E] bool: token n goes to expert e (after capacity drops)
  Tensor logits;       // [N, E] f32
  std::vector<int64_t> tokens_per_expert;  // [E] kept routes per expert
  int64_t dropped_routes = 0;              // routes removed by the capacity
  double load_balancing_loss = 0, z_loss = 0, device_level_aux_loss = 0, comm_aux_loss = 0;
};

class TopKRouterImpl : public nn::Module {
 public:
  TopKRouterImpl(const TransformerConfig& config, int64_t layer_number);
  // hidden [N, C] -> the routing of its N tokens (batch_size unused here).
  RoutingDecision forward(const Tensor& hidden, int64_t batch_size);

  Tensor weight;  // [E, C] ~ N(0, init_method_std)

 private:
  TransformerConfig config_;
};
QK_MODULE(TopKRouter);

}  // namespace qk::transformer
