// What the sim layer's files share.
#pragma once

#include "qk/recipes/megatron_args.h"
#include "qk/sim/simulate.h"
#include "qk/transformer/config.h"

namespace qk::sim {

// The model the flags build; the vocabulary from --vocab-size,
// --padded-vocab-size or the tokenizer's files.
transformer::TransformerConfig sim_transformer_config(const recipes::MegatronArgs& a);
Layout layout_of(const recipes::MegatronArgs& a);

}  // namespace qk::sim
