// The mixture-of-experts router (Megatron-core's TopKRouter,
// megatron/core/transformer/moe/router.py and moe_utils.py): picks each
// token's top-k experts, weighs them, drops the routes over capacity and
// attaches the load-balancing losses.
//
//   TopKRouter router(config, /*layer_number=*/1);       // weight [E, C] ~ N(0, init_method_std)
//   RoutingDecision d = router(hidden.view({B * T, C}), B);
//   d.probs;        // [N, E] differentiable weights of the kept routes, 0 elsewhere
//   d.routing_map;  // [N, E] bool
//   loss(combine(expert_outputs, d.probs)).backward();   // aux losses' gradients flow too
//   router->update_expert_bias(dp_group);                // after the step (expert bias only)
//
// What the router does, in Megatron's order:
//  1. jitter (training, moe_input_jitter_eps): hidden * U(1 - eps, 1 + eps);
//  2. logits = hidden . weight^T in f32 (f64 when hidden is f64, for gradcheck);
//  3. z-loss (coeff * mean_n logsumexp(logits_n)^2) attached to the logits;
//  4. top-k: softmax (pre-softmax: top-k of softmax(logits); else softmax
//     over the top-k logits), sigmoid (top-k of sigmoid(logits) (+ expert bias
//     for the choice only), weights renormalised over the k when k > 1), or
//     sinkhorn (training: top-k of Sinkhorn-balanced exp(logits); weights
//     softmax(logits), or sigmoid when k == 1); group-limited routing first
//     keeps each token's moe_router_group_topk best groups (a group scores the
//     sum of its top k / group_topk scores); the weights are multiplied by
//     moe_router_topk_scaling_factor;
//  5. capacity (moe_expert_capacity_factor): each expert keeps
//     ceil(N * k / E * factor) routes, the highest-weight ones (drop policy
//     probs) or the earliest tokens (position); with moe_device_level_capacity
//     each device group of E/D experts keeps E/D times that, the same way.
//     Ties go to the earlier token (then the lower expert). Padding to
//     capacity (moe_pad_expert_input_to_capacity) is the dispatcher's: the
//     router's map is the same with or without it;
//  6. load-balancing losses, attached to `probs` with attach_aux_loss (so
//     their gradients flow when the probs' do), training with grad mode only:
//     - aux_loss (switch loss) = coeff * sum_e f_e P_e over the N tokens, with
//       f_e = E / (k T) * #tokens whose plain top-k of the scores holds e, and
//       P_e = mean score of e; scores = softmax(logits), or sigmoid(logits)
//       normalised per token (Megatron's compute_routing_scores_for_aux_loss);
//     - seq_aux_loss: the same per sequence of T = N / B tokens, averaged;
//     - global_aux_loss: f from the counts summed over `global group` ranks
//       and averaged over the micro-batches since reset_global_aux_loss_tracker();
//     - DeepSeek-V2's device-level balance loss a2 * sum_i f'_i P'_i (f'_i the
//       mean of f_e over device group i, P'_i the sum of P_e) and
//       communication balance loss a3 * sum_i f''_i P''_i (f''_i = D / (M T) *
//       #tokens sent to device i, M = moe_router_group_topk when group-limited,
//       else min(k, D); P''_i = P'_i). Their f count the router's own choice
//       (group limits and expert bias included, before capacity drops), per
//       sequence under seq_aux_loss, else over all N tokens. "Devices" are the
//       moe_router_num_groups groups when set, else expert_model_parallel_size
//       groups of consecutive experts.
//
// Refused (ValueError naming the flag), as Megatron's config checks:
// expert bias without the sigmoid score function; top-1 softmax routing
// without pre-softmax (its weight would always be 1, no gradient); sinkhorn
// with moe_aux_loss_coeff.
#pragma once

#include <cstdint>
#include <vector>

#include "qk/nn/module.h"
#include "qk/transformer/config.h"

namespace qk::dist {
class ProcessGroup;
}

namespace qk::transformer {

struct RoutingDecision {
  Tensor probs;        // [N, E] f32 (f64 for f64 hidden), differentiable: weight of each kept route, 0 elsewhere
  // [N, E] DType::boolean: token n goes to expert e (after capacity drops).
  // A host tensor whatever the router's device: the dispatchers build their
  // permutations from it on the host.
  Tensor routing_map;
  Tensor logits;       // [N, E], no grad (for logs)
  std::vector<int64_t> tokens_per_expert;  // [E] kept routes per expert
  int64_t dropped_routes = 0;              // routes removed by the capacity
  // Loss values already multiplied by their coefficients, for logs (0 when off
  // or outside training with grad mode). load_balancing_loss is the loss of
  // moe_router_load_balancing_type (aux, seq_aux or global_aux).
  double load_balancing_loss = 0, z_loss = 0, device_level_aux_loss = 0, comm_aux_loss = 0;
};

class TopKRouterImpl : public nn::Module {
 public:
  TopKRouterImpl(const TransformerConfig& config, int64_t layer_number);

  // hidden [N, C] (any floating dtype), batch_size B with N = B * T tokens
  // in batch-major order (seq_aux_loss reads sequence b as rows [b*T, (b+1)*T)).
  RoutingDecision forward(const Tensor& hidden, int64_t batch_size);

  // DeepSeek-V3's aux-loss-free balancing, after the optimizer step:
  // expert_bias += rate * sign(mean load - load), the loads being the kept
  // routes counted by training forwards (with grad mode) since the last call,
  // summed over `group` (the data-parallel ranks) when given. Resets the counts.
  void update_expert_bias(dist::ProcessGroup* group = nullptr);
  // The gradient each attached loss receives (Megatron's
  // MoEAuxLossAutoScaler.main_loss_backward_scale: loss_scale / num_microbatches).
  void set_aux_loss_backward_scale(double scale);
  double aux_loss_backward_scale() const { return aux_loss_backward_scale_; }

  // Megatron's tp_cp group under sequence parallelism: the ranks holding the
  // other shards of the same sequences. The balance losses count tokens over
  // it and the z-loss coefficient is divided by its size. Null: none.
  void set_sequence_partition_group(dist::ProcessGroup* group) { sequence_partition_group_ = group; }
  // global_aux_loss: the ranks (Megatron's tp_dp_cp group) whose counts make
  // the global load; null: this rank only. Reset once per global batch.
  void set_global_aux_loss_group(dist::ProcessGroup* group) { global_aux_loss_group_ = group; }
  void reset_global_aux_loss_tracker();

  // The expert bias stays f32 whatever Module::to() made of it (Megatron's
  // _maintain_float32_expert_bias); forward and update_expert_bias call it, a
  // caller loading an f32 checkpoint into a converted model calls it first.
  void keep_expert_bias_f32();
  // Kept routes per expert counted since the last update_expert_bias.
  const std::vector<int64_t>& local_tokens_per_expert() const { return local_tokens_per_expert_; }

  void pretty_print(std::ostream& os) const override;

  Tensor weight;       // [E, C] parameter "weight" (Megatron: mlp.router.weight)
  Tensor expert_bias;  // [E] f32 buffer "expert_bias" (only with moe_router_enable_expert_bias)

 private:
  // Attaches the enabled load-balancing losses to probs; their values go to d.
  Tensor attach_balance_losses(Tensor probs, const Tensor& logits, const Tensor& scores, const Tensor& top_idx,
                               int64_t batch_size, RoutingDecision& d);

  TransformerConfig config_;
  int64_t layer_number_;
  int64_t num_devices_;  // the device groups of the DeepSeek-V2 terms and device-level capacity
  double aux_loss_backward_scale_ = 1.0;
  dist::ProcessGroup* sequence_partition_group_ = nullptr;
  dist::ProcessGroup* global_aux_loss_group_ = nullptr;
  std::vector<int64_t> local_tokens_per_expert_;
  std::vector<double> global_tokens_per_expert_;  // global_aux_loss: summed counts
  int64_t global_aux_loss_steps_ = 0;
};
QK_MODULE(TopKRouter);

// Identity on x; in backward, also gives `loss` (a scalar) the gradient
// `backward_scale` (Megatron's MoEAuxLossAutoScaler). The loss's gradient
// flows only when x's does.
Tensor attach_aux_loss(const Tensor& x, const Tensor& loss, double backward_scale);

// Megatron's get_capacity: ceil(num_tokens / num_experts * capacity_factor).
int64_t moe_capacity(int64_t num_tokens, int64_t num_experts, double capacity_factor);

}  // namespace qk::transformer
