// The MoE flags on a TransformerConfig (core_transformer_config_from_args for
// the MoE fields), shared by the argument validation, which checks them with
// the config's own MoE rules (TransformerConfig::validate_moe), and the
// model's config.
#pragma once

#include "qk/recipes/megatron_args.h"
#include "qk/transformer/config.h"

namespace qk::recipes {

// One load-balancing type with one coefficient (Megatron also takes lists
// of both, summed); nothing but the expert-parallel size without --num-experts.
void set_moe_config(transformer::TransformerConfig& c, const MegatronArgs& a);

}  // namespace qk::recipes
