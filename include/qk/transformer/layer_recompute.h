// A run of transformer layers with Megatron's full activation recompute
// (TransformerBlock._checkpointed_forward), shared by the unsplit model's
// decoder (gpt_model.h) and the pipeline's chunks (gpt_pipeline.h), which
// apply it to their own layers: recompute_num_layers counts layers per
// chunk, as Megatron's per-stage TransformerBlock does.
//
//   const qk::transformer::LayerRecompute r = qk::transformer::LayerRecompute::of(config);
//   h = qk::transformer::run_layers_with_recompute(layers, h, ctx, r, is_training());
//
// With granularity full, in training, with grad mode on and no KV cache:
// uniform runs groups of num_layers consecutive layers as one checkpointed
// region each (the last group may be shorter); block checkpoints the first
// num_layers layers one by one and keeps the rest's activations. Otherwise
// (selective recompute lives inside attention) the layers simply run. The
// regions restore the default generator and the context's dropout
// generators in their re-run, so dropout masks match the forward's.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "qk/nn/module.h"
#include "qk/transformer/config.h"
#include "qk/transformer/layers.h"

namespace qk::transformer {

struct LayerRecompute {
  RecomputeGranularity granularity = RecomputeGranularity::none;
  RecomputeMethod method = RecomputeMethod::none;
  int64_t num_layers = 0;  // >= 1 under granularity full (TransformerConfig::validate)
  static LayerRecompute of(const TransformerConfig& c) {
    return {c.recompute_granularity, c.recompute_method, c.recompute_num_layers};
  }
};

// Runs layers[0..n) in order on `hidden`; ctx.layer is each layer's index
// in `layers`. pre_hook (empty: none) is called with each layer right
// before its region runs (the distributed optimizer's parameter wait).
Tensor run_layers_with_recompute(const std::vector<std::shared_ptr<TransformerLayerImpl>>& layers,
                                 const Tensor& hidden, const AttentionContext& ctx, const LayerRecompute& recompute,
                                 bool training, const std::function<void(const nn::Module&)>& pre_hook = {});

}  // namespace qk::transformer
