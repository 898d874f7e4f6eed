// YaRN RoPE for multi-latent attention, as Megatron-core's YarnRotaryEmbedding
// (in f32 where Megatron computes in f32) and MLA's softmax scale.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "qk/base/error.h"
#include "qk/transformer/mla.h"

namespace qk::transformer {

namespace {

// _yarn_find_correction_dim: the dim whose frequency turns num_rotations
// times over max_position_embeddings positions.
double correction_dim(double num_rotations, int64_t dim, double base, int64_t max_position_embeddings) {
  return static_cast<double>(dim) *
         std::log(static_cast<double>(max_position_embeddings) / (num_rotations * 2 * std::numbers::pi)) /
         (2 * std::log(base));
}

// _yarn_get_concentration_factor with both mscales given: what cos and sin are multiplied by.
double concentration_factor(const TransformerConfig& c) {
  return yarn_get_mscale(c.rotary_scaling_factor, c.mscale) /
         yarn_get_mscale(c.rotary_scaling_factor, c.mscale_all_dim);
}

}  // namespace

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

double mla_softmax_scale(const TransformerConfig& c) {
  const double m = yarn_get_mscale(c.rotary_scaling_factor, c.mscale_all_dim);
  return m * m / std::sqrt(static_cast<double>(c.qk_head_dim + c.qk_pos_emb_head_dim));
}

RotaryTables mla_rotary_tables(const TransformerConfig& c, int64_t offset, int64_t length) {
  const int64_t dim = c.qk_pos_emb_head_dim, half = dim / 2;
  QK_CHECK(dim >= 2 && dim % 2 == 0, "mla_rotary_tables: qk_pos_emb_head_dim must be positive and even, got ", dim);
  QK_CHECK(offset >= 0 && length >= 0, "mla_rotary_tables: offset (", offset, ") and length (", length,
           ") must be non-negative");
  // _yarn_find_correction_range (rounded to integers, clamped to [0, dim - 1])
  // and _yarn_linear_ramp_mask over the dim / 2 frequencies.
  const double low = std::max(std::floor(correction_dim(c.beta_fast, dim, c.rotary_base,
                                                        c.original_max_position_embeddings)), 0.0);
  double high = std::min(std::ceil(correction_dim(c.beta_slow, dim, c.rotary_base, c.original_max_position_embeddings)),
                         static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // Megatron's guard against a zero-width ramp
  const auto factor = static_cast<float>(c.rotary_scaling_factor);
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float power =
        std::pow(static_cast<float>(c.rotary_base), static_cast<float>(2 * i) / static_cast<float>(dim));
    const float extra = 1.0f / power, inter = 1.0f / (factor * power);
    const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low),
                                  0.0f, 1.0f);
    const float extrapolate = 1.0f - ramp;  // 1: the fast dims keep their frequency
    inv_freq[static_cast<size_t>(i)] = inter * (1.0f - extrapolate) + extra * extrapolate;
  }
  const auto m = static_cast<float>(concentration_factor(c));
  RotaryTables r{empty({length, dim}), empty({length, dim})};
  float* cs = r.cos.data_ptr<float>();
  float* sn = r.sin.data_ptr<float>();
  for (int64_t p = 0; p < length; ++p) {
    const auto pos = static_cast<float>(offset + p);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[static_cast<size_t>(i)];
      cs[p * dim + i] = cs[p * dim + half + i] = std::cos(angle) * m;
      sn[p * dim + i] = sn[p * dim + half + i] = std::sin(angle) * m;
    }
  }
  return r;
}

}  // namespace qk::transformer
