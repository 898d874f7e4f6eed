// The router's auxiliary losses, differentiable in the router's scores.
//
// Every load-balancing loss here has one shape: over S scopes (sequences, or
// the whole batch) of T_total tokens each,
//   loss = coeff / S * sum_{s,e} f[s,e] * P[s,e],   P[s,e] = (sum of e's scores in s) / T_total,
// with constant load fractions f: the switch loss (f_e = E/(kT) * routes of
// e), DeepSeek-V2's device-level loss (f'_e = mean of f over e's device) and
// its communication loss (f''_e = D/(MT) * tokens sent to e's device).
#pragma once

#include <cstdint>
#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::transformer::moe {

// Megatron's z_loss_func: coeff * mean_n logsumexp(logits_n)^2, a scalar.
Tensor z_loss(const Tensor& logits, double coeff);

// Per-scope sums of scores [N, E] over each scope's N / scopes rows: [scopes, E].
Tensor scope_score_sums(const Tensor& scores, int64_t scopes);

// coeff / S * sum f[s,e] * score_sums[s,e] / tokens_per_scope (f: S * E values).
Tensor balance_loss(const Tensor& score_sums, const std::vector<double>& load_fractions, int64_t tokens_per_scope,
                    double coeff);

// f[s,e] = E / (k T) * routes[s,e].
std::vector<double> expert_load_fractions(const std::vector<double>& routes, int64_t num_experts, int64_t topk,
                                          int64_t tokens_per_scope);
// f'[s,e] = mean of f[s,.] over e's device group (E / D consecutive experts).
std::vector<double> device_load_fractions(const std::vector<double>& expert_fractions, int64_t num_experts,
                                          int64_t num_devices);
// f''[s,e] = D / (M T) * tokens[s, device of e], tokens [S * D].
std::vector<double> comm_load_fractions(const std::vector<double>& tokens_per_device, int64_t num_experts,
                                        int64_t num_devices, int64_t devices_per_token, int64_t tokens_per_scope);

}  // namespace qk::transformer::moe
