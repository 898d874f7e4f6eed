// What both token dispatchers share: the per-expert counts every
// expert-parallel rank needs, and the choice of dispatcher.
#include "moe/token_dispatcher.h"

#include <numeric>

#include "qk/tensor/ops/view.h"

namespace qk::transformer {

std::unique_ptr<TokenDispatcher> make_allgather_dispatcher(const TransformerConfig& config,
                                                           std::shared_ptr<dist::ProcessGroup> ep);
std::unique_ptr<TokenDispatcher> make_alltoall_dispatcher(const TransformerConfig& config,
                                                          std::shared_ptr<dist::ProcessGroup> ep);

TokenDispatcher::TokenDispatcher(const TransformerConfig& config, std::shared_ptr<dist::ProcessGroup> ep)
    : config_(config), ep_(ep && ep->size() > 1 ? std::move(ep) : nullptr), experts_(config.num_moe_experts) {
  QK_CHECK(experts_ > 0 && experts_ % ep_size() == 0, "token dispatcher: ", experts_,
           " experts do not split over ", ep_size(), " expert-parallel ranks");
  local_experts_ = experts_ / ep_size();
}

void TokenDispatcher::exchange_counts(const Tensor& routing_map, int64_t dropped_routes) {
  const Tensor map = ops::contiguous(routing_map).to(kCPU);  // counted on the host
  const int64_t n = map.size(0);
  QK_CHECK(map.dim() == 2 && map.size(1) == experts_, "token dispatcher: expected a routing map [N, ", experts_,
           "], got ", shape_str(map.shape()));
  // [kept routes per expert..., dropped routes, tokens]
  const int64_t width = experts_ + 2;
  Tensor mine = zeros({width}, DType::i64);
  int64_t* m = mine.data_ptr<int64_t>();
  const bool* routed = map.data_ptr<bool>();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < experts_; ++e) m[e] += routed[t * experts_ + e] ? 1 : 0;
  m[experts_] = dropped_routes;
  m[experts_ + 1] = n;
  Tensor all = mine;
  if (ep_) {
    all = empty({ep_size() * width}, DType::i64);
    ep_->all_gather(all, mine);
  }
  const int64_t* a = all.data_ptr<int64_t>();
  counts_.assign(static_cast<size_t>(ep_size()), std::vector<int64_t>(static_cast<size_t>(experts_)));
  global_tokens_.assign(static_cast<size_t>(experts_), 0);
  global_dropped_ = 0;
  for (int r = 0; r < ep_size(); ++r) {
    const int64_t* row = a + r * width;
    for (int64_t e = 0; e < experts_; ++e) {
      counts_[static_cast<size_t>(r)][static_cast<size_t>(e)] = row[e];
      global_tokens_[static_cast<size_t>(e)] += row[e];
    }
    global_dropped_ += row[experts_];
    // Every rank learns every rank's token count, so all of them refuse
    // together (rather than one hanging in a collective the others skip).
    QK_CHECK(row[experts_ + 1] == n || !(needs_equal_tokens() || config_.moe_pad_expert_input_to_capacity),
             "MoE token dispatcher: expert-parallel rank ", r, " routes ", row[experts_ + 1],
             " tokens and this rank ", n, "; the ", to_string(config_.moe_token_dispatcher_type),
             " dispatcher", config_.moe_pad_expert_input_to_capacity ? " with padding to capacity" : "",
             " needs the same micro-batch shape on every rank");
  }
}

int64_t TokenDispatcher::padding_capacity(int64_t num_tokens) const {
  if (!config_.moe_pad_expert_input_to_capacity) return 0;
  QK_CHECK(config_.moe_expert_capacity_factor, "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
  // The router's capacity (on the same tokens), so no expert has more routes.
  return moe_capacity(num_tokens * config_.moe_router_topk, experts_, *config_.moe_expert_capacity_factor);
}

std::unique_ptr<TokenDispatcher> make_token_dispatcher(const TransformerConfig& config,
                                                       std::shared_ptr<dist::ProcessGroup> ep) {
  if (config.moe_token_dispatcher_type == MoETokenDispatcher::alltoall)
    return make_alltoall_dispatcher(config, std::move(ep));
  return make_allgather_dispatcher(config, std::move(ep));
}

}  // namespace qk::transformer
