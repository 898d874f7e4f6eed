// The tensor-parallel layers' init_method: Megatron's init on the full master
// weight, so the shards are slices of the unsplit module's weights. Shared by
// the tensor-parallel attention and MLP (tensor_parallel.cc) and the
// tensor-parallel multi-latent attention (mla_parallel.cc).
#pragma once

#include "qk/parallel/layers.h"
#include "qk/transformer/config.h"

namespace qk::transformer {

// As layers.cc's make_linear: the weight from init_scaled_normal (scaled,
// for the output projections) or init_normal, the bias (if any) zero.
parallel::InitMethod megatron_init(const TransformerConfig& c, bool scaled);

}  // namespace qk::transformer
