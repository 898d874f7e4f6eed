// The allgather dispatcher (Megatron's MoEAllGatherTokenDispatcher): every
// expert-parallel rank gathers all ranks' tokens, probabilities and routing
// maps, computes its own experts' rows, and the summed outputs are
// reduce-scattered back to the ranks the tokens came from.
#include <numeric>

#include "moe/token_dispatcher.h"
#include "qk/parallel/mappings.h"
#include "qk/tensor/ops/view.h"

namespace qk::transformer {

namespace {

class AllGatherDispatcher final : public TokenDispatcher {
 public:
  using TokenDispatcher::TokenDispatcher;
  bool needs_equal_tokens() const override { return true; }

  Tensor dispatch(const Tensor& hidden, const Tensor& probs, const Tensor& routing_map, int64_t dropped_routes,
                  const std::function<void()>& overlap) override {
    exchange_counts(routing_map, dropped_routes);
    if (overlap) overlap();
    // The gathered tokens' gradients come from this rank's experts only, and
    // the reduce-scatter of the gathers' backward sums them over the group.
    Tensor all_hidden = hidden, all_probs = probs, all_map = routing_map;
    if (ep_) {
      all_hidden = parallel::gather_from_sequence_parallel_region(hidden, *ep_, 0, true);
      all_probs = parallel::gather_from_sequence_parallel_region(probs, *ep_, 0, true);
      all_map = parallel::all_gather_along(routing_map, *ep_, 0);
    }
    const int64_t first = ep_rank() * local_experts_;
    local_probs_ = all_probs.narrow(1, first, local_experts_);
    const Tensor local_map = ops::contiguous(ops::narrow(all_map, 1, first, local_experts_));
    // Each rank sends at most `capacity` routes per expert: pad to that many per rank.
    perm_ = make_token_permutation(local_map, padding_capacity(hidden.size(0)) * ep_size());
    local_rows_ = perm_->tokens_per_expert;
    int64_t real = 0;
    for (int64_t e = first; e < first + local_experts_; ++e) real += global_tokens_[static_cast<size_t>(e)];
    padding_rows_ = perm_->num_rows() - real;
    return permute_tokens(all_hidden, perm_, config_.moe_permute_fusion);
  }

  Tensor combine(const Tensor& expert_output) override {
    const Tensor y = unpermute_tokens(expert_output, local_probs_, perm_, config_.moe_permute_fusion);
    return ep_ ? parallel::reduce_scatter_to_sequence_parallel_region(y, *ep_, 0) : y;
  }

 private:
  Tensor local_probs_;  // [ep * N, local experts]
  TokenPermutationPtr perm_;
};

}  // namespace

std::unique_ptr<TokenDispatcher> make_allgather_dispatcher(const TransformerConfig& config,
                                                           std::shared_ptr<dist::ProcessGroup> ep) {
  return std::make_unique<AllGatherDispatcher>(config, std::move(ep));
}

}  // namespace qk::transformer
