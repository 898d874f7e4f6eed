// What one micro-batch costs on one rank: each decoder layer's forward and
// backward (GEMMs, attention, the streaming kernels, the tensor-, context-
// and expert-parallel collectives), the embedding and the output side, and
// the recompute the flags ask for. Every term is written out in
// model_costs.cc; docs/sim.md lists them.
#pragma once

#include "costs.h"
#include "qk/recipes/megatron_args.h"
#include "qk/sim/simulate.h"
#include "qk/transformer/config.h"

namespace qk::sim {

// Seconds by kind.
struct Cost {
  double compute = 0, tp = 0, cp = 0, ep = 0;
  double total() const { return compute + tp + cp + ep; }
  Cost& operator+=(const Cost& o) {
    compute += o.compute;
    tp += o.tp;
    cp += o.cp;
    ep += o.ep;
    return *this;
  }
};

struct PassCosts {
  Cost forward, backward;
  Cost recompute;  // re-run inside the backward (full: the whole forward; selective: the attention core)
};

// The layout-dependent context every cost needs.
struct CostContext {
  const recipes::MegatronArgs& args;
  const Cluster& cluster;
  const transformer::TransformerConfig& config;
  const Layout& layout;
  const DeviceRates& rates;
  double moe_imbalance = 1.0;
  GroupPlacement tp, cp, ep;
};

// Layer `layer_number` (from 1), one micro-batch; recompute filled when the
// layer is recomputed (full: as `recomputed` says; selective: the core).
PassCosts layer_costs(const CostContext& x, int64_t layer_number, bool recomputed);
// The first stage's embedding and the last stage's output layer and loss.
PassCosts embedding_costs(const CostContext& x);
PassCosts output_costs(const CostContext& x);

}  // namespace qk::sim
