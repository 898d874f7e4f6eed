// The weights of one expert-style MLP (a routed expert or the shared
// experts): drawn whole as Megatron initialises them, cut to this rank's
// tensor-parallel shard, registered under linear_fc1 / linear_fc2.
#pragma once

#include <vector>

#include "qk/nn/module.h"
#include "qk/parallel/sharding.h"
#include "qk/transformer/config.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {

struct MlpWeights {
  Tensor fc1_weight, fc1_bias, fc2_weight, fc2_bias;  // biases undefined without add_bias_linear
};

// ValueError unless the experts split over the layout (experts over EP,
// moe_ffn_hidden_size and the shared width over TP).
void check_expert_layout(const TransformerConfig& config, const ExpertLayout& layout);

// fc1 [2F or F, C] ~ init_method, fc2 [C, F] ~ output_layer_init_method,
// biases zero; always draws the full weights from the default generator,
// then keeps this rank's shard (fc1 rows with stride 2 for a gated unit, fc2
// columns).
MlpWeights draw_mlp_weights(const TransformerConfig& config, int64_t width, const ExpertLayout& layout);
// Registers linear_fc1.weight/.bias and linear_fc2.weight/.bias under `owner`.
void register_mlp_weights(nn::Module& owner, MlpWeights& w);

// How each weight is split over TP, relative to the MLP.
parallel::ShardSpec fc1_shard_spec(const TransformerConfig& config);
parallel::ShardSpec fc2_shard_spec();

// The fc2 biases to add on this rank: the row-parallel partial outputs are
// summed over TP, so only TP rank 0 adds the bias; the others add zeros
// (a zero gradient: the bias is a partial-gradient parameter there).
std::vector<Tensor> fc2_bias_on_this_rank(const std::vector<Tensor>& biases, const ExpertLayout& layout);

}  // namespace qk::transformer
