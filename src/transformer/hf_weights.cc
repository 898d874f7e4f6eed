// Megatron-core state dicts <-> Hugging Face GPT-2 / Llama tensors: names,
// GPT-2's transposed Conv1D weights, Megatron's grouped fused QKV against
// separate (Llama) or concatenated (GPT-2) q/k/v, and the vocabulary padding.
#include <set>

#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/index.h"
#include "qk/tensor/ops/view.h"
#include "qk/transformer/hf_checkpoint.h"

namespace qk::transformer {

namespace {

// Rows of linear_qkv are grouped per query group g as [hpg query heads, one
// key head, one value head] x D; Hugging Face keeps all query heads, then all
// key heads, then all value heads. Works on weights [rows, C] and biases [rows].
struct Qkv {
  Tensor q, k, v;
};

Shape with_rows(const Tensor& t, int64_t rows) {
  Shape s = t.shape();
  s[0] = rows;
  return s;
}

Qkv split_fused_qkv(const Tensor& fused, const TransformerConfig& c) {
  const int64_t g = c.num_query_groups, hpg = c.heads_per_group(), d = c.kv_channels;
  const int64_t rest = fused.numel() / fused.size(0);
  const Tensor grouped = ops::reshape(fused.contiguous(), {g, (hpg + 2) * d, rest});
  return {ops::reshape(grouped.narrow(1, 0, hpg * d).contiguous(), with_rows(fused, g * hpg * d)),
          ops::reshape(grouped.narrow(1, hpg * d, d).contiguous(), with_rows(fused, g * d)),
          ops::reshape(grouped.narrow(1, (hpg + 1) * d, d).contiguous(), with_rows(fused, g * d))};
}

Tensor fuse_qkv(const Qkv& x, const TransformerConfig& c) {
  const int64_t g = c.num_query_groups, hpg = c.heads_per_group(), d = c.kv_channels;
  const int64_t rest = x.q.numel() / x.q.size(0);
  const Tensor fused =
      ops::cat({ops::reshape(x.q.contiguous(), {g, hpg * d, rest}), ops::reshape(x.k.contiguous(), {g, d, rest}),
                ops::reshape(x.v.contiguous(), {g, d, rest})},
               1);
  return ops::reshape(fused, with_rows(x.q, c.qkv_projection_size()));
}

// [in, out] (GPT-2's Conv1D) <-> [out, in] (nn.Linear), contiguous.
Tensor transposed(const Tensor& w) { return w.t().contiguous(); }

// Megatron's converter pads by repeating the last row; export cuts back.
Tensor pad_vocab(const Tensor& w, int64_t padded) {
  const int64_t rows = w.size(0);
  if (rows == padded) return w;
  const Tensor last = w.narrow(0, rows - 1, 1).expand({padded - rows, w.size(1)});
  return ops::cat({w, last}, 0);
}

// Norm weights as Hugging Face applies them (weight, not 1 + weight).
Tensor norm_weight_out(const Tensor& w, const TransformerConfig& c) {
  return c.layernorm_zero_centered_gamma ? (w.to(DType::f32) + 1.0).to(w.dtype()) : w;
}
Tensor norm_weight_in(const Tensor& w, const TransformerConfig& c) {
  return c.layernorm_zero_centered_gamma ? (w.to(DType::f32) - 1.0).to(w.dtype()) : w;
}

// Reads named tensors once each, with shape checks and a leftover report.
class Source {
 public:
  Source(const nn::TensorMap& tensors, std::string what) : tensors_(tensors), what_(std::move(what)) {}
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  Tensor get(const std::string& name, const Shape& shape) {
    const auto it = tensors_.find(name);
    QK_CHECK(it != tensors_.end(), what_, ": tensor '", name, "' is missing");
    QK_CHECK(it->second.shape() == shape, what_, ": tensor '", name, "' has shape ", shape_str(it->second.shape()),
             ", the config needs ", shape_str(shape));
    used_.insert(name);
    return it->second;
  }
  void skip(const std::string& name) { used_.insert(name); }
  void check_all_used() const {
    std::string extra;
    int n = 0;
    for (const auto& [name, t] : tensors_) {
      if (used_.count(name)) continue;
      if (n++ < 5) extra += (extra.empty() ? "'" : ", '") + name + "'";
    }
    QK_CHECK(n == 0, what_, ": ", n, " tensor(s) the config has no place for: ", extra, n > 5 ? ", ..." : "",
             "; does config.json match the weights?");
  }

 private:
  const nn::TensorMap& tensors_;
  std::string what_;
  std::set<std::string> used_;
};

// Hugging Face's names without the base-model prefix are accepted (the GPT-2
// files on the Hub have "h.0...", not "transformer.h.0..."); buffers that
// older transformers saved (GPT-2's causal mask, Llama's inv_freq) are dropped.
nn::TensorMap canonical_hf_names(const nn::TensorMap& hf, HfArchitecture arch) {
  const std::string prefix = arch == HfArchitecture::gpt2 ? "transformer." : "model.";
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  nn::TensorMap out;
  for (const auto& [name, t] : hf) {
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
        ends_with(name, ".rotary_emb.inv_freq"))
      continue;
    const bool bare = name != "lm_head.weight" && name.rfind(prefix, 0) != 0;
    const std::string canonical = bare ? prefix + name : name;
    QK_CHECK(out.emplace(canonical, t).second, "Hugging Face weights: tensor '", canonical,
             "' appears with and without the '", prefix, "' prefix");
  }
  return out;
}

void gpt2_to_hf(Source& m, const TransformerConfig& c, nn::TensorMap& out) {
  const int64_t h = c.hidden_size, f = c.ffn_hidden_size;
  auto norm = [&](const std::string& from, const std::string& to) {
    out[to + ".weight"] = norm_weight_out(m.get(from + ".weight", {h}), c);
    out[to + ".bias"] = m.get(from + ".bias", {h});
  };
  out["transformer.wpe.weight"] = m.get("embedding.position_embeddings.weight", {c.max_position_embeddings, h});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "decoder.layers." + std::to_string(i) + ".", q = "transformer.h." + std::to_string(i) + ".";
    norm(p + "input_layernorm", q + "ln_1");
    const Qkv w = split_fused_qkv(m.get(p + "self_attention.linear_qkv.weight", {3 * h, h}), c);
    const Qkv b = split_fused_qkv(m.get(p + "self_attention.linear_qkv.bias", {3 * h}), c);
    out[q + "attn.c_attn.weight"] = transposed(ops::cat({w.q, w.k, w.v}, 0));
    out[q + "attn.c_attn.bias"] = ops::cat({b.q, b.k, b.v}, 0);
    out[q + "attn.c_proj.weight"] = transposed(m.get(p + "self_attention.linear_proj.weight", {h, h}));
    out[q + "attn.c_proj.bias"] = m.get(p + "self_attention.linear_proj.bias", {h});
    norm(p + "pre_mlp_layernorm", q + "ln_2");
    out[q + "mlp.c_fc.weight"] = transposed(m.get(p + "mlp.linear_fc1.weight", {f, h}));
    out[q + "mlp.c_fc.bias"] = m.get(p + "mlp.linear_fc1.bias", {f});
    out[q + "mlp.c_proj.weight"] = transposed(m.get(p + "mlp.linear_fc2.weight", {h, f}));
    out[q + "mlp.c_proj.bias"] = m.get(p + "mlp.linear_fc2.bias", {h});
  }
  norm("decoder.final_layernorm", "transformer.ln_f");
}

void llama_to_hf(Source& m, const TransformerConfig& c, nn::TensorMap& out) {
  const int64_t h = c.hidden_size, f = c.ffn_hidden_size;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "decoder.layers." + std::to_string(i) + ".", q = "model.layers." + std::to_string(i) + ".";
    out[q + "input_layernorm.weight"] = norm_weight_out(m.get(p + "input_layernorm.weight", {h}), c);
    const Qkv w = split_fused_qkv(m.get(p + "self_attention.linear_qkv.weight", {c.qkv_projection_size(), h}), c);
    out[q + "self_attn.q_proj.weight"] = w.q;
    out[q + "self_attn.k_proj.weight"] = w.k;
    out[q + "self_attn.v_proj.weight"] = w.v;
    out[q + "self_attn.o_proj.weight"] = m.get(p + "self_attention.linear_proj.weight", {h, c.query_projection_size()});
    out[q + "post_attention_layernorm.weight"] = norm_weight_out(m.get(p + "pre_mlp_layernorm.weight", {h}), c);
    const Tensor fc1 = m.get(p + "mlp.linear_fc1.weight", {2 * f, h});  // rows [gate; up]
    out[q + "mlp.gate_proj.weight"] = fc1.narrow(0, 0, f).contiguous();
    out[q + "mlp.up_proj.weight"] = fc1.narrow(0, f, f).contiguous();
    out[q + "mlp.down_proj.weight"] = m.get(p + "mlp.linear_fc2.weight", {h, f});
  }
  out["model.norm.weight"] = norm_weight_out(m.get("decoder.final_layernorm.weight", {h}), c);
}

void gpt2_from_hf(Source& s, const TransformerConfig& c, nn::TensorMap& out) {
  const int64_t h = c.hidden_size, f = c.ffn_hidden_size;
  auto norm = [&](const std::string& from, const std::string& to) {
    out[to + ".weight"] = s.get(from + ".weight", {h});
    out[to + ".bias"] = s.get(from + ".bias", {h});
  };
  out["embedding.position_embeddings.weight"] = s.get("transformer.wpe.weight", {c.max_position_embeddings, h});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".", q = "decoder.layers." + std::to_string(i) + ".";
    norm(p + "ln_1", q + "input_layernorm");
    const Tensor w = transposed(s.get(p + "attn.c_attn.weight", {h, 3 * h}));  // [3h, h]: q | k | v rows
    const Tensor b = s.get(p + "attn.c_attn.bias", {3 * h});
    out[q + "self_attention.linear_qkv.weight"] =
        fuse_qkv({w.narrow(0, 0, h), w.narrow(0, h, h), w.narrow(0, 2 * h, h)}, c);
    out[q + "self_attention.linear_qkv.bias"] =
        fuse_qkv({b.narrow(0, 0, h), b.narrow(0, h, h), b.narrow(0, 2 * h, h)}, c);
    out[q + "self_attention.linear_proj.weight"] = transposed(s.get(p + "attn.c_proj.weight", {h, h}));
    out[q + "self_attention.linear_proj.bias"] = s.get(p + "attn.c_proj.bias", {h});
    norm(p + "ln_2", q + "pre_mlp_layernorm");
    out[q + "mlp.linear_fc1.weight"] = transposed(s.get(p + "mlp.c_fc.weight", {h, f}));
    out[q + "mlp.linear_fc1.bias"] = s.get(p + "mlp.c_fc.bias", {f});
    out[q + "mlp.linear_fc2.weight"] = transposed(s.get(p + "mlp.c_proj.weight", {f, h}));
    out[q + "mlp.linear_fc2.bias"] = s.get(p + "mlp.c_proj.bias", {h});
  }
  norm("transformer.ln_f", "decoder.final_layernorm");
}

void llama_from_hf(Source& s, const TransformerConfig& c, nn::TensorMap& out) {
  const int64_t h = c.hidden_size, f = c.ffn_hidden_size;
  const int64_t qrows = c.query_projection_size(), kvrows = c.num_query_groups * c.kv_channels;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".", q = "decoder.layers." + std::to_string(i) + ".";
    out[q + "input_layernorm.weight"] = s.get(p + "input_layernorm.weight", {h});
    out[q + "self_attention.linear_qkv.weight"] =
        fuse_qkv({s.get(p + "self_attn.q_proj.weight", {qrows, h}), s.get(p + "self_attn.k_proj.weight", {kvrows, h}),
                  s.get(p + "self_attn.v_proj.weight", {kvrows, h})},
                 c);
    out[q + "self_attention.linear_proj.weight"] = s.get(p + "self_attn.o_proj.weight", {h, qrows});
    out[q + "pre_mlp_layernorm.weight"] = s.get(p + "post_attention_layernorm.weight", {h});
    out[q + "mlp.linear_fc1.weight"] =
        ops::cat({s.get(p + "mlp.gate_proj.weight", {f, h}), s.get(p + "mlp.up_proj.weight", {f, h})}, 0);
    out[q + "mlp.linear_fc2.weight"] = s.get(p + "mlp.down_proj.weight", {h, f});
  }
  out["decoder.final_layernorm.weight"] = s.get("model.norm.weight", {h});
}

}  // namespace

nn::TensorMap megatron_to_hf(const nn::TensorMap& state, const TransformerConfig& config, DType dtype) {
  TransformerConfig c = config;
  c.validate();
  const HfArchitecture arch = hf_architecture_for(c);
  NoGradGuard no_grad;
  Source m(state, "Hugging Face export");
  const int64_t v = c.vocab_size, vp = c.padded_vocab_size(), h = c.hidden_size;
  nn::TensorMap out;
  const std::string embed = arch == HfArchitecture::gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
  out[embed] = m.get("embedding.word_embeddings.weight", {vp, h}).narrow(0, 0, v);
  if (!c.share_embeddings_and_output_weights)
    out["lm_head.weight"] = m.get("output_layer.weight", {vp, h}).narrow(0, 0, v);
  if (arch == HfArchitecture::gpt2)
    gpt2_to_hf(m, c, out);
  else
    llama_to_hf(m, c, out);
  m.check_all_used();
  for (auto& [name, t] : out) t = t.to(dtype).contiguous();
  return out;
}

nn::TensorMap hf_to_megatron(const nn::TensorMap& hf, const TransformerConfig& config, HfArchitecture arch,
                             const std::string& source) {
  TransformerConfig c = config;
  c.validate();
  NoGradGuard no_grad;
  const nn::TensorMap named = canonical_hf_names(hf, arch);
  Source s(named, source);
  const int64_t v = c.vocab_size, vp = c.padded_vocab_size(), h = c.hidden_size;
  nn::TensorMap out;
  const std::string embed = arch == HfArchitecture::gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
  out["embedding.word_embeddings.weight"] = pad_vocab(s.get(embed, {v, h}), vp);
  if (c.share_embeddings_and_output_weights) {
    // Tied: transformers ties lm_head to the embedding whatever the file holds.
    s.skip("lm_head.weight");
  } else {
    QK_CHECK(s.has("lm_head.weight"), source, ": tensor 'lm_head.weight' is missing, and tie_word_embeddings is ",
             "false in config.json");
    out["output_layer.weight"] = pad_vocab(s.get("lm_head.weight", {v, h}), vp);
  }
  if (arch == HfArchitecture::gpt2)
    gpt2_from_hf(s, c, out);
  else
    llama_from_hf(s, c, out);
  s.check_all_used();
  for (auto& [name, t] : out) {
    if (name.find("layernorm.weight") != std::string::npos) t = norm_weight_in(t, c);
    t = t.to(c.params_dtype).contiguous();
  }
  return out;
}

}  // namespace qk::transformer
