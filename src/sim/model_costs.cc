// Per-layer, embedding and output costs of one micro-batch (model_costs.h).
//
// Notation: T tokens per rank (micro batch x sequence / context size), h
// hidden, t tensor size, sp = t under sequence parallelism (else 1), e bytes
// per activation element. GEMMs are (m, n, k) with 2mnk FLOPs; a backward
// GEMM pair is the data gradient (m, k, n) and the weight gradient (n, k, m).
#include "model_costs.h"

#include <algorithm>
#include <cmath>

#include "stream_kinds.h"

namespace qk::sim {

namespace {

using qccl::Collective;
using streams::Pass;
constexpr Pass kFwd = Pass::forward, kBwd = Pass::backward;

struct Dims {
  double T, s_q, s_kv, b, h, t, sp, e;
};

Dims dims(const CostContext& x) {
  const auto& a = x.args;
  Dims d;
  d.b = static_cast<double>(*a.micro_batch_size);
  d.s_kv = static_cast<double>(*a.seq_length);
  d.s_q = d.s_kv / static_cast<double>(x.layout.cp);
  d.T = d.b * d.s_q;
  d.h = static_cast<double>(x.config.hidden_size);
  d.t = static_cast<double>(x.layout.tp);
  d.sp = x.layout.sequence_parallel ? d.t : 1.0;
  d.e = static_cast<double>(dtype_size(x.config.params_dtype));
  return d;
}

// A GEMM forward and its backward pair.
struct Gemm {
  double fwd = 0, bwd = 0;
};
Gemm gemm(const DeviceRates& r, double m, double n, double k) {
  return {r.gemm(m, n, k), r.gemm(m, k, n) + r.gemm(n, k, m)};
}

// A linear layer's GEMMs over rows x out (from `in`) and, where calibrated, the rest of the trainer's
// linear op (its bias: stream_kinds.h).
Gemm linear(const CostContext& x, double e, double rows, double out, double in) {
  Gemm g = gemm(x.rates, rows, out, in);
  if (!x.config.add_bias_linear) return g;
  g.fwd += x.rates.stream_if_calibrated(streams::key("linear", kFwd), streams::linear(kFwd, e, rows * out));
  g.bwd += x.rates.stream_if_calibrated(streams::key("linear", kBwd), streams::linear(kBwd, e, rows * out));
  return g;
}

double tp_collective(const CostContext& x, Collective c, double bytes) {
  return collective_seconds(x.cluster, c, x.tp, bytes, x.rates);
}

// The tensor-parallel traffic of one block (attention or MLP) in one
// direction: an all-reduce of the block's output, or under sequence
// parallelism an all-gather of its input and a reduce-scatter of its output.
// With --tp-comm-overlap each piece hides behind the GEMM next to it.
double tp_block(const CostContext& x, const Dims& d, double gemm_in, double gemm_out) {
  const double bytes = d.e * d.T * d.h;
  if (x.layout.tp <= 1) return 0;
  if (!x.layout.sequence_parallel) {
    const double ar = tp_collective(x, Collective::all_reduce, bytes);
    return x.layout.tp_comm_overlap ? std::max(0.0, ar - gemm_out) : ar;
  }
  const double ag = tp_collective(x, Collective::all_gather, bytes);
  const double rs = tp_collective(x, Collective::reduce_scatter, bytes);
  if (!x.layout.tp_comm_overlap) return ag + rs;
  return std::max(0.0, ag - gemm_in) + std::max(0.0, rs - gemm_out);
}

// The attention core of one micro-batch: forward, backward, and the part a
// selective recompute re-runs.
struct Core {
  double fwd = 0, bwd = 0, cp_fwd = 0, cp_bwd = 0;
};
Core attention_core(const CostContext& x, const Dims& d) {
  const auto& c = x.config;
  const double heads = static_cast<double>(c.num_attention_heads) / d.t;
  const double kv_heads = c.multi_latent_attention ? heads : static_cast<double>(c.num_query_groups) / d.t;
  const double dqk = c.multi_latent_attention ? static_cast<double>(c.qk_head_dim + c.qk_pos_emb_head_dim)
                                              : static_cast<double>(c.kv_channels);
  const double dv = c.multi_latent_attention ? static_cast<double>(c.v_head_dim) : static_cast<double>(c.kv_channels);
  Core core;
  if (c.use_flash_attn) {
    // Causal: half of the s_q x s_kv scores; Q.K^T and P.V, 2 FLOPs per multiply-add.
    const double flops = 2.0 * d.b * heads * d.s_q * d.s_kv * (dqk + dv) * 0.5;
    core.fwd = x.rates.flash_forward(flops);
    core.bwd = x.rates.flash_backward(2.5 * flops);  // dQ, dK, dV and the recomputed scores
  } else {
    // Unfused (Megatron's fused scale-mask-softmax between two batched GEMMs):
    // the whole score matrix is computed and kept.
    const double batch = d.b * heads;
    const double scores = batch * d.s_q * d.s_kv;
    const double g_qk = x.rates.gemm(d.s_q, d.s_kv, dqk, batch), g_pv = x.rates.gemm(d.s_q, dv, d.s_kv, batch);
    const bool dropout = c.attention_dropout > 0;
    const std::string kind = dropout ? "softmax_dropout" : "softmax";
    const double mask = dropout ? (2 * d.e + 1) * scores : 0;  // streams::softmax, in its two passes
    core.fwd = g_qk + g_pv + x.rates.stream(streams::key(kind, kFwd), {2 * d.e * scores, mask});
    // dS = dP.V^T-style products: two per forward product.
    core.bwd = 2 * (g_qk + g_pv) + x.rates.stream(streams::key(kind, kBwd), {3 * d.e * scores, mask});
  }
  if (x.layout.cp > 1) {
    // Ring attention: cp - 1 steps, each passing this rank's keys and values
    // on while a block of scores is computed; what the computation does not
    // cover is exposed. The backward passes the key/value gradients too.
    const double kv_bytes = d.e * d.b * d.s_q * kv_heads * (dqk + dv);
    const bool cross = x.cp.nodes > 1;
    const double step = p2p_seconds(x.cluster, cross, kv_bytes);
    const double steps = static_cast<double>(x.layout.cp - 1);
    const double per_fwd = core.fwd / static_cast<double>(x.layout.cp);
    const double per_bwd = core.bwd / static_cast<double>(x.layout.cp);
    core.cp_fwd = steps * std::max(0.0, step - per_fwd);
    core.cp_bwd = steps * std::max(0.0, 2 * step - per_bwd);
  }
  return core;
}

// The streaming kernels around a block: its norm, and the bias-dropout-add
// after it (forward; the backward is counted from them below).
double norm(const CostContext& x, const Dims& d, Pass p) {
  const char* kind = x.config.normalization == transformer::Normalization::RMSNorm ? "rms_norm" : "layer_norm";
  return x.rates.stream(streams::key(kind, p), {streams::norm(p, d.e, d.T * d.h / d.sp)});
}
double norm_fwd(const CostContext& x, const Dims& d) { return norm(x, d, kFwd); }
double norm_bwd(const CostContext& x, const Dims& d) { return norm(x, d, kBwd); }
double residual(const CostContext& x, const Dims& d, Pass p) {
  const bool dropout = x.config.hidden_dropout > 0;
  return x.rates.stream(streams::key(dropout ? "dropout_add" : "residual", p),
                        {streams::residual(p, d.e, dropout ? 1.0 : 0.0, d.T * d.h / d.sp)});
}
double residual_fwd(const CostContext& x, const Dims& d) { return residual(x, d, kFwd); }
double residual_bwd(const CostContext& x, const Dims& d) { return residual(x, d, kBwd); }

// An MLP of `width` over `tokens` rows (fc1, activation, fc2).
struct Mlp {
  double fwd = 0, bwd = 0, fc1 = 0, fc2 = 0;
};
Mlp mlp(const CostContext& x, const Dims& d, double tokens, double width, int64_t kernels) {
  const auto& c = x.config;
  const double rows = c.gated_linear_unit ? 2 * width : width;
  const double k = static_cast<double>(kernels);
  const Gemm fc1 = linear(x, d.e, tokens / k, rows / d.t, d.h);
  const Gemm fc2 = linear(x, d.e, tokens / k, d.h, width / d.t);
  const double act = tokens * width / d.t;
  // The calibrated kinds: erf GELU and SwiGLU; other activations stream at the device's bandwidth.
  const std::string kind = c.is_swiglu() ? "swiglu"
                           : (!c.gated_linear_unit && c.activation_func == transformer::Activation::gelu) ? "gelu"
                                                                                                          : "";
  Mlp m;
  m.fc1 = k * fc1.fwd;
  m.fc2 = k * fc2.fwd;
  m.fwd = k * (fc1.fwd + fc2.fwd) +
          x.rates.stream(streams::key(kind, kFwd), {streams::activation(kFwd, c.gated_linear_unit, d.e, act)});
  m.bwd = k * (fc1.bwd + fc2.bwd) +
          x.rates.stream(streams::key(kind, kBwd), {streams::activation(kBwd, c.gated_linear_unit, d.e, act)});
  return m;
}

}  // namespace

PassCosts layer_costs(const CostContext& x, int64_t layer_number, bool recomputed) {
  const auto& c = x.config;
  const Dims d = dims(x);
  PassCosts out;
  Cost fwd, bwd;

  // ---- attention block
  Gemm qkv, proj;
  double extra_fwd = 0, extra_bwd = 0;  // the projections around MLA's core beyond q/kv/proj
  if (c.multi_latent_attention) {
    const double heads = static_cast<double>(c.num_attention_heads);
    const double qh = static_cast<double>(c.qk_head_dim + c.qk_pos_emb_head_dim);
    const double kvr = static_cast<double>(c.kv_lora_rank), pe = static_cast<double>(c.qk_pos_emb_head_dim);
    if (c.q_lora_rank == 0) {
      qkv = linear(x, d.e, d.T, heads * qh / d.t, d.h);
    } else {
      const double qr = static_cast<double>(c.q_lora_rank);
      const Gemm down = linear(x, d.e, d.T, qr, d.h), up = linear(x, d.e, d.T, heads * qh / d.t, qr);
      qkv = {down.fwd + up.fwd, down.bwd + up.bwd};
    }
    const Gemm kv_down = linear(x, d.e, d.T, kvr + pe, d.h);
    const Gemm kv_up =
        linear(x, d.e, d.T, heads * static_cast<double>(c.qk_head_dim + c.v_head_dim) / d.t, kvr);
    extra_fwd = kv_down.fwd + kv_up.fwd;
    extra_bwd = kv_down.bwd + kv_up.bwd;
    proj = linear(x, d.e, d.T, d.h, heads * static_cast<double>(c.v_head_dim) / d.t);
  } else {
    qkv = linear(x, d.e, d.T, static_cast<double>(c.qkv_projection_size()) / d.t, d.h);
    proj = linear(x, d.e, d.T, d.h, static_cast<double>(c.query_projection_size()) / d.t);
  }
  const Core core = attention_core(x, d);
  double rope_fwd = 0, rope_bwd = 0;
  if (c.position_embedding_type == transformer::PositionEmbeddingType::rope) {
    const double rotated = c.multi_latent_attention
                               ? static_cast<double>(c.num_attention_heads + 1) * static_cast<double>(c.qk_pos_emb_head_dim)
                               : static_cast<double>(c.num_attention_heads + c.num_query_groups) *
                                     static_cast<double>(c.kv_channels);
    rope_fwd = x.rates.stream(streams::key("rope", kFwd), {streams::rope(d.e, d.T * rotated / d.t)});
    rope_bwd = x.rates.stream(streams::key("rope", kBwd), {streams::rope(d.e, d.T * rotated / d.t)});
  }
  fwd.compute += norm_fwd(x, d) + qkv.fwd + extra_fwd + rope_fwd + core.fwd + proj.fwd + residual_fwd(x, d);
  bwd.compute += norm_bwd(x, d) + qkv.bwd + extra_bwd + rope_bwd + core.bwd + proj.bwd + residual_bwd(x, d);
  fwd.tp += tp_block(x, d, qkv.fwd, proj.fwd);
  bwd.tp += tp_block(x, d, proj.bwd / 2, qkv.bwd / 2);
  fwd.cp += core.cp_fwd;
  bwd.cp += core.cp_bwd;

  // ---- MLP block (dense, or routed experts with the shared ones)
  fwd.compute += norm_fwd(x, d) + residual_fwd(x, d);
  bwd.compute += norm_bwd(x, d) + residual_bwd(x, d);
  double fc1 = 0, fc2 = 0;
  if (!c.is_moe_layer(layer_number)) {
    const Mlp m = mlp(x, d, d.T, static_cast<double>(c.ffn_hidden_size), 1);
    fwd.compute += m.fwd;
    bwd.compute += m.bwd;
    fc1 = m.fc1;
    fc2 = m.fc2;
  } else {
    const double experts = static_cast<double>(c.num_moe_experts);
    const double topk = static_cast<double>(c.moe_router_topk);
    const Gemm router = gemm(x.rates, d.T, experts, d.h);
    // Tokens on the busiest expert-parallel rank: an even share of every
    // rank's routed tokens, times the stated imbalance.
    const double routed = d.T * topk * x.moe_imbalance;
    const int64_t local = c.num_local_experts();
    const Mlp m = mlp(x, d, routed, static_cast<double>(c.moe_ffn_hidden_size), c.moe_grouped_gemm ? 1 : local);
    // Routing and the permutations to the experts and back.
    const double scores = streams::moe_scores(d.T, experts), permute = streams::moe_permute(d.e, routed, d.h);
    auto dispatch = [&](Pass p) {
      return x.rates.stream(streams::key("moe_dispatch", p), {scores, permute, permute});
    };
    fwd.compute += router.fwd + dispatch(kFwd) + m.fwd;
    bwd.compute += router.bwd + dispatch(kBwd) + m.bwd;
    fc1 = m.fc1;
    fc2 = m.fc2;
    if (c.moe_shared_expert_intermediate_size > 0) {
      const Mlp s = mlp(x, d, d.T, static_cast<double>(c.moe_shared_expert_intermediate_size), 1);
      fwd.compute += s.fwd;
      bwd.compute += s.bwd;
    }
    if (x.layout.ep > 1) {
      // Dispatch and combine, each way: every rank sends its routed tokens.
      const double bytes = d.e * d.T * topk * d.h;
      const double a2a = collective_seconds(x.cluster, Collective::all_to_all, x.ep, bytes, x.rates);
      fwd.ep += 2 * a2a * x.moe_imbalance;
      bwd.ep += 2 * a2a * x.moe_imbalance;
    }
  }
  fwd.tp += tp_block(x, d, fc1, fc2);
  bwd.tp += tp_block(x, d, fc2, fc1);

  out.forward = fwd;
  out.backward = bwd;
  const bool selective = c.recompute_granularity == transformer::RecomputeGranularity::selective;
  if (recomputed) {
    out.recompute = fwd;  // the whole layer again, its collectives included
  } else if (selective && !c.use_flash_attn) {
    out.recompute.compute = core.fwd;  // flash attention keeps no scores: nothing to recompute
    out.recompute.cp = core.cp_fwd;
  }
  return out;
}

PassCosts embedding_costs(const CostContext& x) {
  const auto& c = x.config;
  const Dims d = dims(x);
  PassCosts out;
  const double mask = c.hidden_dropout > 0 ? 1.0 : 0.0;
  const bool learned = c.position_embedding_type == transformer::PositionEmbeddingType::learned_absolute;
  // Gather the rows, add the positions, dropout; the backward scatters into
  // the fp32 gradient of the table.
  for (const Pass p : {kFwd, kBwd})
    (p == kFwd ? out.forward : out.backward).compute =
        x.rates.stream(streams::key("embedding", p), {streams::embedding(p, d.e, learned, mask, d.T * d.h)});
  if (x.layout.tp > 1) {
    const double bytes = d.e * d.T * d.h;
    // The vocabulary-parallel lookup: all-reduce (reduce-scatter under SP);
    // under SP the backward all-gathers the gradient.
    out.forward.tp = tp_collective(x, x.layout.sequence_parallel ? Collective::reduce_scatter : Collective::all_reduce,
                                   bytes);
    if (x.layout.sequence_parallel) out.backward.tp = tp_collective(x, Collective::all_gather, bytes);
  }
  return out;
}

PassCosts output_costs(const CostContext& x) {
  const auto& c = x.config;
  const Dims d = dims(x);
  PassCosts out;
  const double vocab = static_cast<double>(c.padded_vocab_size()) / d.t;
  const Gemm logits = gemm(x.rates, d.T, vocab, d.h);
  // Final norm; the logits; the loss: to f32, max, sum of exponentials,
  // the target's logit, the softmax kept for the backward.
  out.forward.compute = norm_fwd(x, d) + logits.fwd +
                        x.rates.stream(streams::key("cross_entropy", kFwd),
                                       {streams::cross_entropy(kFwd, d.e, d.T * vocab)});
  out.backward.compute = norm_bwd(x, d) + logits.bwd +
                         x.rates.stream(streams::key("cross_entropy", kBwd),
                                        {streams::cross_entropy(kBwd, d.e, d.T * vocab)});
  if (x.layout.tp > 1) {
    const double bytes = d.e * d.T * d.h;
    // Three small all-reduces of the vocabulary-parallel cross entropy (max,
    // sum, target logit: f32 per token); under SP the hidden states are
    // gathered before the output layer and the gradient reduce-scattered after.
    const double small = tp_collective(x, Collective::all_reduce, 4.0 * d.T);
    out.forward.tp = 3 * small;
    if (x.layout.sequence_parallel) {
      out.forward.tp += tp_collective(x, Collective::all_gather, bytes);
      out.backward.tp += tp_collective(x, Collective::reduce_scatter, bytes);
    } else {
      out.backward.tp += tp_collective(x, Collective::all_reduce, bytes);
    }
  }
  return out;
}

}  // namespace qk::sim
