// The transformer's compute steps: the fused ops and their unfused references.
//
// Note [Fused-op seams]: core_attention, apply_rotary_embedding,
// mlp_activation and output_loss are the only places the model reaches these
// computations; each runs the fused op of qk/autograd/llm_ops.h:
//   core_attention (use_flash)  -> flash_attention (else unfused_attention)
//   apply_rotary_embedding      -> rotary_embedding
//   mlp_activation (SwiGLU)     -> swiglu (other gated units: unfused)
//   output_loss                 -> linear_cross_entropy(hidden, weight, labels, loss_mask / sum(loss_mask))
// The unfused_* functions stay as the references the fused ops are tested against.
#include "qk/transformer/functional.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "qk/autograd/functions.h"
#include "qk/autograd/llm_ops.h"

namespace qk::transformer {

namespace {

// [hpg * T, S] bool, true where the key is in the future of the query: row r
// is query t = r % T (the rows stack hpg query heads of T rows each).
Tensor causal_mask(int64_t heads_per_group, int64_t t_len, int64_t s_len) {
  Tensor mask = empty({heads_per_group * t_len, s_len}, DType::boolean);
  bool* m = mask.data_ptr<bool>();
  const int64_t shift = s_len - t_len;
  for (int64_t r = 0; r < heads_per_group * t_len; ++r) {
    const int64_t last_visible = r % t_len + shift;
    for (int64_t j = 0; j < s_len; ++j) m[r * s_len + j] = j > last_visible;
  }
  return mask;
}

// The mask on `device`, made once per shape and device (a few recent
// shapes kept): no host work and no copy from the host per call, so a step
// can be recorded in a graph.
Tensor causal_mask_on(Device device, int64_t heads_per_group, int64_t t_len, int64_t s_len) {
  if (device.is_cpu()) return causal_mask(heads_per_group, t_len, s_len);
  static std::mutex mu;
  static std::map<std::tuple<std::string, int64_t, int64_t, int64_t>, Tensor> cache;
  const auto key = std::make_tuple(device.str(), heads_per_group, t_len, s_len);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 16) cache.clear();  // e.g. generation's growing key lengths
  return cache.emplace(key, causal_mask(heads_per_group, t_len, s_len).to(device)).first->second;
}

void check_attention_inputs(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  QK_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
           "core_attention: expected q [B, T, Hq, D], k [B, S, Hkv, D] and v [B, S, Hkv, Dv], got ",
           shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  QK_CHECK(k.size(0) == v.size(0) && k.size(1) == v.size(1) && k.size(2) == v.size(2), "core_attention: k ",
           shape_str(k.shape()), " and v ", shape_str(v.shape()), " must agree in B, S and Hkv");
  QK_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3), "core_attention: q ", shape_str(q.shape()),
           " and k ", shape_str(k.shape()), " differ in batch or head dim");
  QK_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0, "core_attention: query heads (", q.size(2),
           ") must be a multiple of key/value heads (", k.size(2), ")");
  QK_CHECK(!causal || k.size(1) >= q.size(1), "core_attention: causal attention needs at least as many keys (",
           k.size(1), ") as queries (", q.size(1), ")");
  QK_CHECK_TYPE(q.dtype() == k.dtype() && q.dtype() == v.dtype(), "core_attention: q, k, v dtypes differ: ",
                dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
}

Tensor activation(const Tensor& x, Activation a) {
  switch (a) {
    case Activation::gelu: return gelu(x, "none");
    case Activation::openai_gelu: return gelu(x, "tanh");
    case Activation::silu: return silu(x);
    case Activation::relu: return relu(x);
    case Activation::squared_relu: return square(relu(x));
  }
  QK_THROW(ValueError, "mlp_activation: unknown activation");
}

}  // namespace

Tensor core_attention(const Tensor& q, const Tensor& k, const Tensor& v, const CoreAttentionOptions& o) {
  // The flash kernel's softmax is always f32, so softmax_in_fp32 holds either way.
  if (o.use_flash) return flash_attention(q, k, v, {o.causal, o.scale, o.dropout_p, o.training, o.generator});
  return unfused_attention(q, k, v, o);
}

Tensor unfused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const CoreAttentionOptions& o) {
  check_attention_inputs(q, k, v, o.causal);
  const int64_t b = q.size(0), t = q.size(1), hq = q.size(2), d = q.size(3), dv = v.size(3);
  const int64_t s = k.size(1), groups = k.size(2), hpg = hq / groups;
  const double scale = o.scale > 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(d));
  // [B, T, G, hpg, D] -> [B, G, hpg * T, D]: one GEMM per kv head covers all its query heads.
  Tensor qg = q.reshape({b, t, groups, hpg, d}).permute({0, 2, 3, 1, 4}).reshape({b, groups, hpg * t, d});
  Tensor scores = matmul(qg, k.permute({0, 2, 3, 1}));  // [B, G, hpg * T, S]
  if (o.softmax_in_fp32) scores = scores.to(DType::f32);
  scores = scores * scale;
  if (o.causal && t > 1)  // a single query sees every key
    scores = masked_fill(scores, causal_mask_on(scores.device(), hpg, t, s), -std::numeric_limits<double>::infinity());
  Tensor probs = softmax(scores, -1).to(v.dtype());
  if (o.training && o.dropout_p > 0)
    probs = dropout(probs, o.dropout_p, true, o.generator ? *o.generator : default_generator());
  Tensor ctx = matmul(probs, v.permute({0, 2, 1, 3}));  // [B, G, hpg * T, Dv]
  return ctx.view({b, groups, hpg, t, dv}).permute({0, 3, 1, 2, 4}).contiguous().view({b, t, hq, dv});
}

RotaryTables rotary_tables(int64_t rotary_dim, double rotary_base, int64_t offset, int64_t length,
                           std::optional<double> seq_len_interpolation_factor) {
  QK_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0, "rotary_tables: rotary_dim must be positive and even, got ",
           rotary_dim);
  QK_CHECK(offset >= 0 && length >= 0, "rotary_tables: offset (", offset, ") and length (", length,
           ") must be non-negative");
  const int64_t half = rotary_dim / 2;
  // f32 throughout, as Megatron's RotaryEmbedding computes them.
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(rotary_base), exponent);
  }
  const float inv_interp =
      seq_len_interpolation_factor ? 1.0f / static_cast<float>(*seq_len_interpolation_factor) : 1.0f;
  RotaryTables r{empty({length, rotary_dim}), empty({length, rotary_dim})};
  float* c = r.cos.data_ptr<float>();
  float* sn = r.sin.data_ptr<float>();
  for (int64_t p = 0; p < length; ++p) {
    float pos = static_cast<float>(offset + p);
    if (seq_len_interpolation_factor) pos *= inv_interp;
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      const float cv = std::cos(angle), sv = std::sin(angle);
      c[p * rotary_dim + i] = c[p * rotary_dim + half + i] = cv;
      sn[p * rotary_dim + i] = sn[p * rotary_dim + half + i] = sv;
    }
  }
  return r;
}

RotaryTables rotary_tables(const TransformerConfig& config, int64_t offset, int64_t length) {
  return rotary_tables(config.rotary_dim(), config.rotary_base, offset, length,
                       config.rotary_seq_len_interpolation_factor);
}

Tensor apply_rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  return rotary_embedding(x, cos, sin);
}

Tensor unfused_rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  QK_CHECK(x.dim() == 4, "rotary_embedding: expected x [B, T, H, D], got ", shape_str(x.shape()));
  QK_CHECK(cos.dim() == 2 && cos.shape() == sin.shape() && cos.size(0) == x.size(1),
           "rotary_embedding: expected cos and sin [T, R] with T = ", x.size(1), ", got ",
           shape_str(cos.shape()), " and ", shape_str(sin.shape()));
  const int64_t t = x.size(1), d = x.size(3), r = cos.size(1);
  QK_CHECK(r % 2 == 0 && r <= x.size(3), "rotary_embedding: rotary dims (", r,
           ") must be even and at most the head dim (", d, ")");
  const Tensor c = cos.to(x.dtype()).view({t, 1, r});
  const Tensor s = sin.to(x.dtype()).view({t, 1, r});
  const Tensor xr = r == d ? x : x.narrow(3, 0, r);
  const std::vector<Tensor> halves = chunk(xr, 2, 3);
  const Tensor rotated = cat({neg(halves[1]), halves[0]}, 3);
  Tensor out = xr * c + rotated * s;
  return r == d ? out : cat({out, x.narrow(3, r, d - r)}, 3);
}

Tensor mlp_activation(const Tensor& x, Activation a, bool gated_linear_unit) {
  if (!gated_linear_unit) return activation(x, a);
  QK_CHECK(x.size(-1) % 2 == 0, "mlp_activation: a gated linear unit needs an even width, got ",
           shape_str(x.shape()));
  if (a == Activation::silu) return swiglu(x);
  return unfused_mlp_activation(x, a, true);
}

Tensor unfused_mlp_activation(const Tensor& x, Activation a, bool gated_linear_unit) {
  if (!gated_linear_unit) return activation(x, a);
  const std::vector<Tensor> parts = chunk(x, 2, -1);
  return activation(parts[0], a) * parts[1];
}

namespace {

// Megatron's sum(loss * mask) / sum(mask) as per-token weights mask / sum(mask).
Tensor checked_token_weight(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                            const Tensor& loss_mask) {
  QK_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
           "output_loss: expected hidden [N, C] and weight [V, C], got ", shape_str(hidden.shape()), " and ",
           shape_str(weight.shape()));
  QK_CHECK(labels.dim() == 1 && labels.size(0) == hidden.size(0), "output_loss: expected labels [",
           hidden.size(0), "], got ", shape_str(labels.shape()));
  QK_CHECK(!loss_mask.defined() || loss_mask.shape() == labels.shape(), "output_loss: loss_mask ",
           loss_mask.defined() ? shape_str(loss_mask.shape()) : "", " must match labels ",
           shape_str(labels.shape()));
  const int64_t n = labels.size(0);
  return loss_mask.defined() ? loss_mask.to(DType::f32) / sum(loss_mask.to(DType::f32))
                             : full({n}, 1.0 / static_cast<double>(std::max<int64_t>(n, 1)),
                                    TensorOptions().dtype(DType::f32).device(hidden.device()));
}

}  // namespace

Tensor output_loss(const Tensor& hidden, const Tensor& weight, const Tensor& labels, const Tensor& loss_mask) {
  return linear_cross_entropy(hidden, weight, labels, checked_token_weight(hidden, weight, labels, loss_mask));
}

Tensor unfused_output_loss(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                           const Tensor& loss_mask) {
  const Tensor token_weight = checked_token_weight(hidden, weight, labels, loss_mask);
  const Tensor logits = linear(hidden, weight).to(DType::f32);
  return sum(cross_entropy(logits, labels, -100, 0.0, ops::Reduction::none) * token_weight);
}

}  // namespace qk::transformer
