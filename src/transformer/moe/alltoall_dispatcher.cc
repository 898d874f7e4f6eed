// The alltoall dispatcher (Megatron's MoEAlltoAllTokenDispatcher): tokens
// permuted by expert locally, so each expert-parallel rank's share is one
// contiguous block; a variable all-to-all sends every block to its rank,
// which sorts what it received by local expert; the way back is the reverse.
//
// Received rows arrive as (source rank, local expert) blocks; the experts
// want (local expert, source rank), so permute_row_blocks reorders them.
#include <numeric>

#include "moe/token_dispatcher.h"
#include "qk/autograd/autograd.h"
#include "qk/tensor/ops/view.h"

namespace qk::transformer {

namespace {

int64_t sum_of(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// Rows of x: in_splits[j] to rank j; out_splits[j] come from rank j.
// Differentiable: backward sends the gradients the reverse way. `overlap`
// runs while the exchange is in flight.
Tensor all_to_all_v(const Tensor& x, dist::ProcessGroup& group, const std::vector<int64_t>& out_splits,
                    const std::vector<int64_t>& in_splits, const std::function<void()>& overlap) {
  const Tensor in = ops::contiguous(x.detach());
  Shape shape = x.shape();
  shape[0] = sum_of(out_splits);
  Tensor out = empty(shape, TensorOptions(x.dtype()).device(x.device()));
  const dist::WorkPtr work = group.all_to_all_v_async(out, in, out_splits, in_splits);
  if (overlap) overlap();
  work->wait();
  dist::ProcessGroup* g = &group;
  const Shape in_shape = x.shape();
  autograd::record("AllToAllVBackward", {x}, {out},
                   [g, in_shape, out_splits, in_splits](const std::vector<Tensor>& grads) {
                     Tensor back = empty(in_shape, TensorOptions(grads[0].dtype()).device(grads[0].device()));
                     g->all_to_all_v(back, ops::contiguous(grads[0]), in_splits, out_splits);
                     return std::vector<Tensor>{back};
                   });
  return out;
}

class AllToAllDispatcher final : public TokenDispatcher {
 public:
  using TokenDispatcher::TokenDispatcher;
  bool needs_equal_tokens() const override { return false; }

  Tensor dispatch(const Tensor& hidden, const Tensor& probs, const Tensor& routing_map, int64_t dropped_routes,
                  const std::function<void()>& overlap) override {
    exchange_counts(routing_map, dropped_routes);
    const int64_t capacity = padding_capacity(hidden.size(0));
    perm_ = make_token_permutation(routing_map, capacity);
    probs_ = probs;
    const Tensor permuted = permute_tokens(hidden, perm_, config_.moe_permute_fusion);
    if (!ep_) {
      local_rows_ = perm_->tokens_per_expert;
      padding_rows_ = perm_->num_rows() - sum_of(global_tokens_);
      if (overlap) overlap();
      return permuted;
    }
    const int ranks = ep_size();
    const int64_t me = ep_rank(), local = local_experts_;
    in_splits_.assign(static_cast<size_t>(ranks), 0);
    out_splits_.assign(static_cast<size_t>(ranks), 0);
    received_blocks_.assign(static_cast<size_t>(ranks * local), 0);
    local_rows_.assign(static_cast<size_t>(local), 0);
    int64_t real = 0;
    for (int r = 0; r < ranks; ++r) {
      for (int64_t l = 0; l < local; ++l) {
        in_splits_[static_cast<size_t>(r)] += perm_->tokens_per_expert[static_cast<size_t>(r * local + l)];
        const int64_t routes = counts_[static_cast<size_t>(r)][static_cast<size_t>(me * local + l)];
        const int64_t rows = capacity > 0 ? capacity : routes;
        received_blocks_[static_cast<size_t>(r * local + l)] = rows;
        out_splits_[static_cast<size_t>(r)] += rows;
        local_rows_[static_cast<size_t>(l)] += rows;
        real += routes;
      }
    }
    padding_rows_ = sum_of(local_rows_) - real;
    const Tensor received = all_to_all_v(permuted, *ep_, out_splits_, in_splits_, overlap);
    // (source rank, local expert) blocks -> (local expert, source rank).
    by_expert_.clear();
    for (int64_t l = 0; l < local; ++l)
      for (int r = 0; r < ranks; ++r) by_expert_.push_back(r * local + l);
    return permute_row_blocks(received, received_blocks_, by_expert_);
  }

  Tensor combine(const Tensor& expert_output) override {
    Tensor back = expert_output;
    if (ep_) {
      std::vector<int64_t> sorted_blocks(by_expert_.size()), inverse(by_expert_.size());
      for (size_t i = 0; i < by_expert_.size(); ++i) {
        sorted_blocks[i] = received_blocks_[static_cast<size_t>(by_expert_[i])];
        inverse[static_cast<size_t>(by_expert_[i])] = static_cast<int64_t>(i);
      }
      const Tensor by_source = permute_row_blocks(expert_output, sorted_blocks, inverse);
      back = all_to_all_v(by_source, *ep_, in_splits_, out_splits_, {});
    }
    return unpermute_tokens(back, probs_, perm_, config_.moe_permute_fusion);
  }

 private:
  TokenPermutationPtr perm_;
  Tensor probs_;
  std::vector<int64_t> in_splits_, out_splits_, received_blocks_, by_expert_;
};

}  // namespace

std::unique_ptr<TokenDispatcher> make_alltoall_dispatcher(const TransformerConfig& config,
                                                          std::shared_ptr<dist::ProcessGroup> ep) {
  return std::make_unique<AllToAllDispatcher>(config, std::move(ep));
}

}  // namespace qk::transformer
