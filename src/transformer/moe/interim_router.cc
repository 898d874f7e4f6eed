// INTERIM softmax top-k router (see qk/transformer/moe_interim_router.h):
// deleted when the real router (qk/transformer/moe_router.h) lands.
#include <algorithm>
#include <numeric>

#include "qk/autograd/functions.h"
#include "qk/tensor/ops/view.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {

TopKRouterImpl::TopKRouterImpl(const TransformerConfig& c, int64_t /*layer_number*/) : config_(c) {
  QK_CHECK(c.num_moe_experts > 0, "TopKRouter: num_moe_experts must be set");
  QK_CHECK(c.moe_router_score_function == MoEScoreFunction::softmax && !c.moe_router_pre_softmax &&
               c.moe_router_num_groups == 0 && !c.moe_router_topk_scaling_factor &&
               !c.moe_router_enable_expert_bias && c.moe_input_jitter_eps == 0 && !c.moe_device_level_capacity,
           "the interim TopKRouter supports plain softmax top-k routing with capacity only (no pre-softmax, "
           "groups, scaling, expert bias, jitter or device-level capacity)");
  weight = register_parameter("weight", empty({c.num_moe_experts, c.hidden_size}));
  NoGradGuard no_grad;
  init_normal(weight, c);
}

RoutingDecision TopKRouterImpl::forward(const Tensor& hidden, int64_t /*batch_size*/) {
  const int64_t n = hidden.size(0), e = config_.num_moe_experts, k = config_.moe_router_topk;
  RoutingDecision d;
  const Tensor logits = linear(hidden.to(DType::f32), weight.to(DType::f32));  // [N, E]
  auto [top_logits, top_index] = topk(logits, k, 1);
  Tensor probs = scatter_add(zeros({n, e}), 1, top_index, softmax(top_logits, 1));

  // The map, then each expert's routes beyond its capacity dropped.
  std::vector<uint8_t> keep(static_cast<size_t>(n * e), 0);
  const Tensor idx = ops::contiguous(top_index);
  for (int64_t i = 0; i < n * k; ++i) keep[static_cast<size_t>((i / k) * e + idx.data_ptr<int64_t>()[i])] = 1;
  if (config_.moe_expert_capacity_factor) {
    const int64_t capacity = expert_capacity(n, e, k, *config_.moe_expert_capacity_factor);
    const Tensor p = ops::contiguous(probs.detach());
    const float* pp = p.data_ptr<float>();
    for (int64_t col = 0; col < e; ++col) {
      std::vector<int64_t> tokens;
      for (int64_t t = 0; t < n; ++t)
        if (keep[static_cast<size_t>(t * e + col)]) tokens.push_back(t);
      if (static_cast<int64_t>(tokens.size()) <= capacity) continue;
      if (config_.moe_token_drop_policy == MoETokenDropPolicy::probs)  // highest probabilities first
        std::stable_sort(tokens.begin(), tokens.end(),
                         [&](int64_t a, int64_t b) { return pp[a * e + col] > pp[b * e + col]; });
      for (size_t i = static_cast<size_t>(capacity); i < tokens.size(); ++i) {
        keep[static_cast<size_t>(tokens[i] * e + col)] = 0;
        ++d.dropped_routes;
      }
    }
  }
  Tensor mask = empty({n, e});
  Tensor map = empty({n, e}, DType::boolean);
  d.tokens_per_expert.assign(static_cast<size_t>(e), 0);
  for (int64_t i = 0; i < n * e; ++i) {
    mask.data_ptr<float>()[i] = keep[static_cast<size_t>(i)];
    map.data_ptr<bool>()[i] = keep[static_cast<size_t>(i)] != 0;
    d.tokens_per_expert[static_cast<size_t>(i % e)] += keep[static_cast<size_t>(i)];
  }
  d.probs = d.dropped_routes > 0 ? probs * mask : probs;
  d.routing_map = map;
  d.logits = logits.detach();
  return d;
}

}  // namespace qk::transformer
