// Shared pieces of the MoE tests: a tiny MoE config, seeded data, and the
// relative difference the comparisons use.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "qk/tensor/generator.h"
#include "qk/tensor/ops/view.h"
#include "qk/transformer/config.h"

namespace qk::transformer::moe_test {

// max |a - b| / max |b| over all elements, in f64 (b the reference).
inline double rel_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  const Tensor x = ops::contiguous(ops::cast(a.detach(), DType::f64));
  const Tensor y = ops::contiguous(ops::cast(b.detach(), DType::f64));
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    num = std::max(num, std::abs(x.data_ptr<double>()[i] - y.data_ptr<double>()[i]));
    den = std::max(den, std::abs(y.data_ptr<double>()[i]));
  }
  return den > 0 ? num / den : num;
}

inline Tensor seeded_randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator g(seed);
  return ops::cast(randn(shape, DType::f32, g), dtype);
}

// 4 experts of width 16, top-2, hidden 16, SwiGLU, no biases; validated.
inline TransformerConfig tiny_moe_config() {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.seq_length = 8;
  c.vocab_size = 64;
  c.set_swiglu();
  c.ffn_hidden_size = 32;
  c.add_bias_linear = false;
  c.hidden_dropout = 0;
  c.attention_dropout = 0;
  c.num_moe_experts = 4;
  c.moe_router_topk = 2;
  c.moe_ffn_hidden_size = 16;
  c.init_method_std = 0.2;  // larger weights: outputs well away from rounding noise
  c.validate();
  return c;
}

}  // namespace qk::transformer::moe_test
