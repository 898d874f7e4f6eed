// Token dispatchers (Megatron's MoETokenDispatcher): move each rank's
// routed tokens to the expert-parallel ranks that hold their experts, and
// the expert outputs back, weighted by the routing probabilities. Both are
// differentiable (backward runs the reverse exchanges) and equal the
// expert-parallel size 1 layer.
//
//   auto d = make_token_dispatcher(config, ep);
//   Tensor rows = d->dispatch(x, probs, routing_map, dropped, {});   // [R, C] by local expert
//   Tensor y = d->combine(experts(rows, d->tokens_per_local_expert()));   // [N, C]
//
// The allgather dispatcher, and padding to capacity, need the same number of
// tokens (the same micro-batch shape) on every rank of the group, as in
// Megatron; the dispatchers check it.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "qk/dist/process_group.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {

class TokenDispatcher {
 public:
  TokenDispatcher(const TransformerConfig& config, std::shared_ptr<dist::ProcessGroup> ep);
  virtual ~TokenDispatcher() = default;

  // hidden [N, C], probs [N, E] f32 and routing_map [N, E] bool for this
  // rank's N tokens; dropped_routes: what the router's capacity removed.
  // Returns the rows of this rank's experts [R, C], sorted by local expert
  // (tokens_per_local_expert() rows each). `overlap` (may be empty) runs while
  // the token exchange is in flight.
  virtual Tensor dispatch(const Tensor& hidden, const Tensor& probs, const Tensor& routing_map,
                          int64_t dropped_routes, const std::function<void()>& overlap) = 0;
  // The experts' output [R, C] (rows as dispatched) -> [N, C]: for each of
  // this rank's tokens, its experts' outputs weighted by probs and summed.
  virtual Tensor combine(const Tensor& expert_output) = 0;

  const std::vector<int64_t>& tokens_per_local_expert() const { return local_rows_; }
  // The last dispatch, over every rank of the expert-parallel group.
  const std::vector<int64_t>& global_tokens_per_expert() const { return global_tokens_; }
  int64_t global_dropped_routes() const { return global_dropped_; }
  // Zero rows among this rank's expert rows (--moe-pad-expert-input-to-capacity).
  int64_t padding_rows() const { return padding_rows_; }

 protected:
  // Whether every rank must dispatch the same number of tokens (the
  // allgather's all-gather does; padding to capacity always does).
  virtual bool needs_equal_tokens() const = 0;
  int ep_size() const { return ep_ ? ep_->size() : 1; }
  int ep_rank() const { return ep_ ? ep_->rank() : 0; }
  // All-gathers every EP rank's kept routes per expert (from its map),
  // dropped routes and token count: fills counts_[rank][e] and the global
  // statistics.
  void exchange_counts(const Tensor& routing_map, int64_t dropped_routes);
  // Each expert's rows from one rank when padding to capacity; 0: no padding.
  int64_t padding_capacity(int64_t num_tokens) const;

  TransformerConfig config_;
  std::shared_ptr<dist::ProcessGroup> ep_;
  int64_t experts_, local_experts_;
  std::vector<std::vector<int64_t>> counts_;  // [ep rank][expert]
  std::vector<int64_t> local_rows_, global_tokens_;
  int64_t global_dropped_ = 0, padding_rows_ = 0;
};

// moe_token_dispatcher_type's dispatcher over `ep` (null: expert-parallel size 1).
std::unique_ptr<TokenDispatcher> make_token_dispatcher(const TransformerConfig& config,
                                                       std::shared_ptr<dist::ProcessGroup> ep);

}  // namespace qk::transformer
