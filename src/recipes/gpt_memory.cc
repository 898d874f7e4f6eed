// Weights, optimizer state and activations per rank, from the arguments
// (qk/recipes/gpt_memory.h).
#include "qk/recipes/gpt_memory.h"

#include <algorithm>

#include "qk/base/error.h"
#include "qk/optim/distributed_optimizer.h"

namespace qk::recipes {

int optimizer_state_tensors_per_parameter(const MegatronArgs& a) {
  if (a.optimizer == "sgd") return a.sgd_momentum != 0 ? 1 : 0;
  return 2;
}

GptMemoryDtypes gpt_memory_dtypes(const MegatronArgs& a) {
  GptMemoryDtypes d;
  d.params = a.bf16 ? DType::bf16 : a.fp16 ? DType::f16 : DType::f32;
  d.grads = a.accumulate_allreduce_grads_in_fp32 || d.params == DType::f32 ? DType::f32 : d.params;
  return d;
}

optim::OptimizerMemory gpt_weight_and_optimizer_memory(const MegatronArgs& a, int64_t n, GptMemoryDtypes d,
                                                       int64_t dp, bool distributed) {
  QK_CHECK(n >= 0 && dp >= 1, "gpt_weight_and_optimizer_memory: ", n, " parameters over ", dp,
           " data-parallel ranks");
  return optim::theoretical_optimizer_memory(n, d.params, d.grads, optimizer_state_tensors_per_parameter(a),
                                             static_cast<int>(dp), distributed);
}

// Korthikanti et al.'s Table 2 term by term (s sequence, b micro batch, h
// hidden, e bytes per activation element; with f = 4h, a·d = h, g = a it is
// their sbh(34 + 5as/h) per layer, 10 of it whole and 24 divided by the
// tensor size without sequence parallelism):
//   attention: its norm's input and output, Q, K, V, the core's output (the
//              projection's input), the dropout mask after the projection,
//              and an unfused core's softmax output, dropout mask and output
//              (e + 1 + e bytes per score) or flash attention's row
//              statistics (f32 per query and head);
//   MLP:       its norm's input and output, fc1's output (twice as wide when
//              gated), fc2's input, the dropout mask.
// Selective recompute keeps the unfused core's scores out; full recompute
// keeps only each layer's input. Norm inputs and outputs and dropout masks
// are divided by the tensor size only under sequence parallelism.
GptActivationBytes gpt_activation_bytes(const MegatronArgs& a, const transformer::TransformerConfig& c) {
  const double e = static_cast<double>(dtype_size(c.params_dtype));
  const double s = static_cast<double>(*a.seq_length) / static_cast<double>(a.context_parallel_size);
  const double s_kv = static_cast<double>(*a.seq_length);
  const double b = static_cast<double>(*a.micro_batch_size);
  const double h = static_cast<double>(c.hidden_size), t = static_cast<double>(c.tensor_model_parallel_size);
  const double sp = c.sequence_parallel ? t : 1.0;
  const double sbh = s * b * h;
  const double heads = static_cast<double>(c.num_attention_heads);
  double q, kv, core_out;  // bytes per micro-batch, whole (divided by t below)
  if (c.multi_latent_attention) {
    const double qk = static_cast<double>(c.qk_head_dim + c.qk_pos_emb_head_dim);
    q = e * s * b * heads * qk;
    kv = e * s * b * heads * (qk + static_cast<double>(c.v_head_dim)) +
         e * s * b * static_cast<double>(c.kv_lora_rank + c.qk_pos_emb_head_dim);
    core_out = e * s * b * heads * static_cast<double>(c.v_head_dim);
  } else {
    const double d = static_cast<double>(c.kv_channels), g = static_cast<double>(c.num_query_groups);
    q = e * s * b * heads * d;
    kv = 2 * e * s * b * g * d;
    core_out = e * s * b * heads * d;
  }
  const double hidden_mask = c.hidden_dropout > 0 ? sbh : 0;
  const double ffn = static_cast<double>(c.num_moe_experts > 0 ? std::max(c.ffn_hidden_size, c.moe_ffn_hidden_size *
                                                                                                  c.moe_router_topk)
                                                                 : c.ffn_hidden_size);
  const double fc1_out = e * s * b * ffn * (c.gated_linear_unit ? 2 : 1);
  const double fc2_in = e * s * b * ffn;
  const bool selective = c.recompute_granularity == transformer::RecomputeGranularity::selective;
  double core = 0;
  if (c.use_flash_attn) {
    core = 4.0 * s * b * heads;  // f32 log-sum-exp per query and head
  } else if (!selective) {
    const double scores = b * heads * s * s_kv;
    core = scores * (e + (c.attention_dropout > 0 ? 1.0 + e : 0.0));
  }
  // Whole on every tensor-parallel rank unless sequence-parallel: the two
  // norms' inputs (residual stream) and outputs, the two dropout masks.
  const double replicated = 2 * e * sbh + 2 * e * sbh + 2 * hidden_mask;
  const double split = q + kv + core_out + core + fc1_out + fc2_in;
  GptActivationBytes out;
  const double full_layer = replicated / sp + split / t;
  if (c.recompute_granularity == transformer::RecomputeGranularity::full) {
    out.per_layer = e * sbh / sp;  // the layer's input
    out.recompute_peak = full_layer;
  } else {
    out.per_layer = full_layer;
  }
  // Embedding: the token ids (int64) and its dropout's mask and output.
  out.embedding = 8.0 * s * b + (c.hidden_dropout > 0 ? (1.0 + e) * sbh / sp : 0);
  // Output side: the final norm's input and output, the logits in f32 for the loss.
  out.output = 2 * e * sbh / sp + 4.0 * s * b * static_cast<double>(c.padded_vocab_size()) / t;
  return out;
}

}  // namespace qk::recipes
