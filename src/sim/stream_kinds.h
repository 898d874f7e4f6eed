// The streaming (non-GEMM) pieces of a layer by kind, and the bytes the
// model counts for each. model_costs.cc prices them; calibrate.cc runs the
// real op of each kind at two sizes and fits a per-call overhead and a rate
// against the same bytes, so a calibrated kind predicts its own op's time
// (host overhead, copies and slow math included) instead of the device's
// one streaming bandwidth. Kinds a cluster has not calibrated (every
// published preset) fall back to that bandwidth.
#pragma once

#include <string>
#include <vector>

namespace qk::sim::streams {

enum class Pass { forward, backward };

// Every kind the model prices by name.
inline const std::vector<std::string>& kinds() {
  static const std::vector<std::string> k = {"layer_norm", "rms_norm", "residual", "dropout_add", "gelu",
                                             "swiglu", "rope", "softmax", "softmax_dropout", "cross_entropy",
                                             "embedding", "moe_dispatch", "linear"};
  return k;
}

// Kinds priced once per parameter rather than per layer pass (keys without a pass).
inline const std::vector<std::string>& parameter_kinds() {
  static const std::vector<std::string> k = {"grad_accumulate", "grad_norm"};
  return k;
}

inline std::string key(const std::string& kind, Pass p) {
  return kind + (p == Pass::forward ? ".forward" : ".backward");
}

// Element size e; mask: 1 where a dropout mask byte is written, else 0.
// A norm over rows x h.
inline double norm(Pass p, double e, double elems) { return (p == Pass::forward ? 2 : 3) * e * elems; }
// residual + dropout(x) over rows x h.
inline double residual(Pass p, double e, double mask, double elems) {
  return (p == Pass::forward ? 3 * e + mask : 2 * e + mask) * elems;
}
// The MLP's non-linearity over tokens x width (gated: over 2 x width inputs).
inline double activation(Pass p, bool gated, double e, double elems) {
  return (p == Pass::forward ? (gated ? 3 : 2) : (gated ? 5 : 3)) * e * elems;
}
// Rotary embedding over the rotated elements (each way).
inline double rope(double e, double elems) { return 2 * e * elems; }
// The unfused attention core beyond its two batched GEMMs: scale, mask and
// softmax over the score matrix (and dropout over it when on).
inline double softmax(Pass p, double e, bool dropout, double scores) {
  return ((p == Pass::forward ? 2 * e : 3 * e) + (dropout ? 2 * e + 1 : 0)) * scores;
}
// The loss beyond the logits GEMM, over tokens x vocabulary: to f32, max,
// sum of exponentials, the target's logit, the softmax kept for the backward.
inline double cross_entropy(Pass p, double e, double elems) {
  return (p == Pass::forward ? 12 + e : 4 + 2 * e) * elems;
}
// The embedding lookup over tokens x h (learned positions: a second table);
// the backward scatters into the f32 gradient of the table.
inline double embedding(Pass p, double e, bool learned, double mask, double elems) {
  return (p == Pass::forward ? 2 * e + (learned ? 2 * e : 0) + mask : e + 8 + mask) * elems;
}

// An MoE layer beyond its router and expert GEMMs and the experts'
// activation, each way: the router's scores (softmax, top-k, the auxiliary
// loss) over tokens x experts, and the routed rows permuted to their experts
// and back. On a device without the kind: three pieces at the streaming
// bandwidth.
inline double moe_scores(double tokens, double experts) { return 3 * 4.0 * tokens * experts; }
inline double moe_permute(double e, double routed_rows, double h) { return 2 * e * routed_rows * h; }

// A linear layer's work beyond its three GEMMs as the trainer runs it over
// rows x out: the bias added (forward) and summed for its gradient
// (backward); a calibrated rate also holds what the GEMMs take there beyond
// their rates alone (reshapes, the call). Fused into the GEMMs on the
// published GPU stacks (Megatron with Transformer Engine): priced only where
// calibrated, and only with biases.
inline double linear(Pass p, double e, double elems) { return (p == Pass::forward ? 2 : 1) * e * elems; }
// A micro-batch's gradients added into those of the micro-batches before it
// (its own grad of `e` bytes read, the sum of grad_bytes read and written).
// Fused into the weight-gradient GEMMs on the published stacks (Megatron's
// gradient accumulation fusion): priced only where calibrated.
inline double grad_accumulate(double e, double grad_bytes, double params) { return (e + 2 * grad_bytes) * params; }
// The gradients' norm for clipping (and the fp16 overflow check): each read once.
inline double grad_norm(double grad_bytes, double params) { return grad_bytes * params; }

}  // namespace qk::sim::streams
