// The router's non-differentiable half: which experts each token picks, and
// which routes the capacity keeps. Plain loops over the score rows, threaded
// over tokens (qk::parallel_for); the weights are computed from the chosen
// indices with autograd ops (router.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "qk/tensor/tensor.h"
#include "qk/transformer/config.h"

namespace qk::transformer::moe {

// Row-wise top-k of scores [N, E] (f32 or f64, any device) -> i64 [N, k] on
// the host (the router's counts and maps read it there), each row by
// decreasing score + bias (bias: E floats or null; it steers the choice
// only), ties to the lower expert, NaN above everything (as torch.topk).
// num_groups > 0: group-limited (Megatron's group_limited_topk): a group
// scores the sum of its top k / group_topk values, the group_topk best
// groups are kept, the top k is taken among their experts.
Tensor topk_indices(const Tensor& scores, int64_t topk, const float* bias = nullptr, int64_t num_groups = 0,
                    int64_t group_topk = 0);

// Megatron's sinkhorn(logits) (cost = exp(logits), alternate row and column
// normalisation until the mean change of the column factors is <= tol; at
// most max_iterations rounds, so a degenerate input cannot hang), then the
// row-wise top-k of the balanced matrix -> i64 [N, k] on the host.
Tensor sinkhorn_topk_indices(const Tensor& logits, int64_t topk, double tol = 1e-4, int max_iterations = 1000);

// Which routes of top_idx [N, k] (weights top_probs [N, k]) the capacity
// keeps (1) or drops (0), row-major [N * k]. Experts are taken in buckets of
// experts_per_bucket consecutive ones (1: per expert; E / D: device-level);
// each bucket keeps at most bucket_capacity routes: the highest weights
// (probs) or the earliest tokens (position); ties go to the earlier token,
// then the lower expert.
std::vector<uint8_t> capacity_keep(const Tensor& top_idx, const Tensor& top_probs, int64_t num_experts,
                                   int64_t experts_per_bucket, int64_t bucket_capacity, MoETokenDropPolicy policy);

// Routes per (scope, expert), [scopes * E]: scope s holds rows
// [s * N / scopes, (s + 1) * N / scopes). keep (null: all) masks the routes.
std::vector<int64_t> count_routes(const Tensor& top_idx, int64_t num_experts, int64_t scopes,
                                  const uint8_t* keep = nullptr);
// Tokens with at least one route into device group d, per (scope, d), [scopes * D].
std::vector<int64_t> count_tokens_per_device(const Tensor& top_idx, int64_t num_experts, int64_t num_devices,
                                             int64_t scopes);

// The kept routes as a bool [N, E] map (on the host), and as 0/1 weights
// [N, k] of `dtype` (on the host: the caller moves them to its device).
// These helpers read top_idx on the host (copied there once when it is on a
// device: pass the host copy to several).
Tensor routing_map_of(const Tensor& top_idx, const std::vector<uint8_t>& keep, int64_t num_experts);
Tensor keep_weights(const std::vector<uint8_t>& keep, const Shape& shape, DType dtype);

}  // namespace qk::transformer::moe
