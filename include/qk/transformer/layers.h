// The pieces of a Megatron-core transformer layer, each an nn::Module built
// from a TransformerConfig, with Megatron-core's parameter names:
//
//   decoder.layers.{i}.input_layernorm.weight/.bias
//   decoder.layers.{i}.self_attention.linear_proj.weight/.bias
//   decoder.layers.{i}.self_attention.linear_qkv.weight/.bias
//   decoder.layers.{i}.self_attention.q_layernorm.weight, .k_layernorm.weight
//   decoder.layers.{i}.pre_mlp_layernorm.weight/.bias
//   decoder.layers.{i}.mlp.linear_fc1.weight/.bias, .linear_fc2.weight/.bias
//
// The self-attention and MLP of a layer come from a TransformerLayerSpec (as
// Megatron's ModuleSpec): factories a tensor-parallel build replaces with its
// own modules, capturing the process groups they need; nothing here reads
// global state.
//
//   TransformerLayerSpec spec = gpt_layer_local_spec();
//   spec.mlp = [group](const TransformerConfig& c, int64_t layer_number) {
//     return std::make_shared<MyParallelMlp>(c, group);     // derives from MlpBase
//   };
//   GPTModel model(config, spec);
#pragma once

#include <functional>
#include <memory>

#include "qk/nn/linear.h"
#include "qk/nn/module.h"
#include "qk/transformer/config.h"
#include "qk/transformer/functional.h"
#include "qk/transformer/kv_cache.h"

namespace qk::transformer {

// LayerNorm (weight, bias) or RMSNorm (weight) over the last dim, as
// config.normalization; with layernorm_zero_centered_gamma the weight is
// stored around 0 and applied as (1 + weight).
class NormImpl : public nn::Module {
 public:
  NormImpl(const TransformerConfig& config, int64_t dim);
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  Tensor weight, bias;

 private:
  Normalization kind_;
  int64_t dim_;
  double eps_;
  bool zero_centered_gamma_;
};
QK_MODULE(Norm);

// What one attention call needs besides its input.
struct AttentionContext {
  // RoPE cos/sin [T, R] for this call's positions (undefined: no RoPE).
  RotaryTables rotary;
  // Generation: append this call's keys/values to `cache` (layer `layer`) and
  // attend to every cached position; null in training.
  KVCache* cache = nullptr;
  int64_t layer = 0;
  // Dropout's generators (null: the default one). Tensor parallelism passes
  // a per-rank generator for attention dropout (each rank holds other heads)
  // and, under sequence parallelism, for hidden dropout (other tokens), as
  // Megatron's model-parallel RNG tracker does.
  Generator* attention_dropout_generator = nullptr;
  Generator* hidden_dropout_generator = nullptr;
};

// The interfaces a layer spec's factories return.
class SelfAttentionBase : public nn::Module {
 public:
  // hidden [B, T, C] (already normalised) -> [B, T, C] (bias added, before dropout).
  virtual Tensor forward(const Tensor& hidden, const AttentionContext& ctx) = 0;
};
class MlpBase : public nn::Module {
 public:
  // [B, T, C] -> [B, T, C] (bias added, before dropout).
  virtual Tensor forward(const Tensor& hidden) = 0;
};

// Megatron-core's SelfAttention with the local (non-Transformer-Engine) spec:
// linear_qkv [G * (Hq/G + 2) * D, C], rows grouped per query group g as
// [Hq/G query heads, one key head, one value head] x D (Megatron's fused
// layout); optional q/k layer norms over D; RoPE; core attention; linear_proj
// [C, Hq * D]. layer_number counts from 1.
class SelfAttentionImpl : public SelfAttentionBase {
 public:
  SelfAttentionImpl(const TransformerConfig& config, int64_t layer_number);
  Tensor forward(const Tensor& hidden, const AttentionContext& ctx) override;

  nn::Linear linear_proj{nullptr}, linear_qkv{nullptr};
  Norm q_layernorm{nullptr}, k_layernorm{nullptr};

 private:
  TransformerConfig config_;
  int64_t layer_number_;
};
QK_MODULE(SelfAttention);

// Megatron-core's MLP: linear_fc1 [F or 2F (gated), C] -> activation ->
// linear_fc2 [C, F]; a gated unit's fc1 rows are [gate; up].
class MlpImpl : public MlpBase {
 public:
  MlpImpl(const TransformerConfig& config, int64_t layer_number);
  Tensor forward(const Tensor& hidden) override;

  nn::Linear linear_fc1{nullptr}, linear_fc2{nullptr};

 private:
  Activation activation_;
  bool gated_;
};
QK_MODULE(Mlp);

struct TransformerLayerSpec {
  std::function<std::shared_ptr<SelfAttentionBase>(const TransformerConfig&, int64_t layer_number)>
      self_attention;
  std::function<std::shared_ptr<MlpBase>(const TransformerConfig&, int64_t layer_number)> mlp;
};
// SelfAttention and Mlp above (Megatron's get_gpt_layer_local_spec).
TransformerLayerSpec gpt_layer_local_spec();

// Pre-norm residual layer (Megatron-core's TransformerLayer):
//   h   = x + dropout(self_attention(input_layernorm(x)))
//   out = h + dropout(mlp(pre_mlp_layernorm(h)))
// (with apply_residual_connection_post_layernorm the residuals are the norms' outputs).
class TransformerLayerImpl : public nn::Module {
 public:
  TransformerLayerImpl(const TransformerConfig& config, int64_t layer_number,
                       const TransformerLayerSpec& spec);
  Tensor forward(const Tensor& hidden, const AttentionContext& ctx);

  Norm input_layernorm{nullptr};
  std::shared_ptr<SelfAttentionBase> self_attention;
  Norm pre_mlp_layernorm{nullptr};
  std::shared_ptr<MlpBase> mlp;

 private:
  double hidden_dropout_;
  bool residual_post_layernorm_;
};
QK_MODULE(TransformerLayer);

// Megatron's init_method and output_layer_init_method: N(0, std) and
// N(0, std / sqrt(2 * num_layers)), from the default generator.
void init_normal(const Tensor& weight, const TransformerConfig& config);
void init_scaled_normal(const Tensor& weight, const TransformerConfig& config);

}  // namespace qk::transformer
