// Helpers for the PyTorch parity fixtures of tests/fixtures/gen_transformer.py:
// the parameter values both sides draw (the script's param_values), the
// model config from a fixture's metadata, and a scaled closeness check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "qk/nn/safetensors.h"
#include "qk/transformer/config.h"

namespace qk::test {

inline uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// gen_transformer.py's param_values: f32 values of a parameter, keyed by name.
inline Tensor fixture_param(const std::string& name, const Shape& shape) {
  double center = 0.0, half = 0.2;
  if (ends_with(name, "layernorm.weight")) {
    center = 1.0;
  } else if (ends_with(name, ".bias")) {
    half = 0.1;
  }
  const uint64_t seed = fnv1a64(name);
  const int64_t n = shape_numel(shape);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(splitmix64(seed + static_cast<uint64_t>(i)) >> 40) / 16777216.0;
    v[static_cast<size_t>(i)] = static_cast<float>(center + (2.0 * u - 1.0) * half);
  }
  return from_vector<float>(v, shape);
}

// The config gen_transformer.py wrote into the fixture's metadata.
inline transformer::TransformerConfig config_from_metadata(const nn::Metadata& m) {
  auto i = [&](const char* k) { return static_cast<int64_t>(std::stoll(m.at(k))); };
  auto d = [&](const char* k) { return std::stod(m.at(k)); };
  auto b = [&](const char* k) { return m.at(k) == "True"; };
  transformer::TransformerConfig c;
  c.num_layers = i("num_layers");
  c.hidden_size = i("hidden_size");
  c.num_attention_heads = i("num_attention_heads");
  c.num_query_groups = i("num_query_groups");
  c.ffn_hidden_size = i("ffn_hidden_size");
  c.seq_length = i("seq_length");
  c.max_position_embeddings = i("max_position_embeddings");
  c.vocab_size = i("vocab_size");
  c.make_vocab_size_divisible_by = i("make_vocab_size_divisible_by");
  c.hidden_dropout = d("hidden_dropout");
  c.attention_dropout = d("attention_dropout");
  c.layernorm_epsilon = d("layernorm_epsilon");
  c.normalization = transformer::parse_normalization(m.at("normalization"));
  c.activation_func = transformer::parse_activation(m.at("activation_func"));
  c.gated_linear_unit = b("gated_linear_unit");
  c.add_bias_linear = b("add_bias_linear");
  c.qk_layernorm = b("qk_layernorm");
  c.position_embedding_type = transformer::parse_position_embedding_type(m.at("position_embedding_type"));
  if (m.count("rotary_base")) c.rotary_base = d("rotary_base");
  c.share_embeddings_and_output_weights = b("share_embeddings_and_output_weights");
  return c;
}

// |a - b| <= rtol * (|b| + max|b|) elementwise: relative to each value and to
// the tensor's scale, so near-zero entries of a large gradient are judged on
// the gradient's scale. Reports the worst element.
inline ::testing::AssertionResult close_scaled(const Tensor& a, const Tensor& b, double rtol,
                                               const std::string& what) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << what << ": shapes differ: " << shape_str(a.shape()) << " vs "
                                         << shape_str(b.shape());
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  double scale = 0;
  for (double x : vb) scale = std::max(scale, std::fabs(x));
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    const double excess = std::fabs(va[i] - vb[i]) / (std::fabs(vb[i]) + scale + 1e-30);
    if (std::isnan(excess))
      return ::testing::AssertionFailure() << what << ": element " << i << " is " << va[i] << ", expected " << vb[i];
    if (excess > worst) {
      worst = excess;
      worst_i = i;
    }
  }
  if (worst <= rtol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": element " << worst_i << " is " << va[worst_i]
                                       << ", expected " << vb[worst_i] << " (relative error " << worst
                                       << " > " << rtol << ", max|expected| " << scale << ")";
}

}  // namespace qk::test
