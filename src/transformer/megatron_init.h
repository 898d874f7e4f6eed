// Linear layers initialized Megatron's way: the local layers' make_linear
// (attention, MLP, multi-latent attention) and the tensor-parallel layers'
// init_method, Megatron's init on the full master weight, so the shards are
// slices of the unsplit module's weights (tensor_parallel.cc, mla_parallel.cc).
#pragma once

#include "qk/nn/linear.h"
#include "qk/parallel/layers.h"
#include "qk/transformer/config.h"

namespace qk::transformer {

// A Linear(in, out) whose weight is from init_scaled_normal (scaled: the
// output projections) or init_normal, its bias (if any) zero.
nn::Linear make_linear(int64_t in, int64_t out, bool bias, bool scaled, const TransformerConfig& c);

// As make_linear: the weight from init_scaled_normal (scaled,
// for the output projections) or init_normal, the bias (if any) zero.
parallel::InitMethod megatron_init(const TransformerConfig& c, bool scaled);

}  // namespace qk::transformer
