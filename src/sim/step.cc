// simulate(): the step of one layout on one cluster (qk/sim/simulate.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "costs.h"
#include "model_costs.h"
#include "qk/base/error.h"
#include "qk/parallel/pipeline_layout.h"
#include "qk/recipes/gpt_memory.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/sim/simulate.h"
#include "qk/transformer/param_count.h"
#include "replay.h"
#include "sim_internal.h"
#include "stream_kinds.h"

namespace qk::sim {

namespace {

using qccl::Collective;

std::string training_dtype(const recipes::MegatronArgs& a) { return a.bf16 ? "bf16" : a.fp16 ? "fp16" : "fp32"; }

// Megatron's buckets: --ddp-bucket-size, else max(40M, 1M x data-parallel
// size) elements with --overlap-grad-reduce and one bucket without.
double bucket_elements(const recipes::MegatronArgs& a, int64_t dp) {
  if (a.ddp_bucket_size) return static_cast<double>(*a.ddp_bucket_size);
  if (!a.overlap_grad_reduce) return 1e300;
  return std::max(40e6, 1e6 * static_cast<double>(dp));
}

// One data-parallel reduction of `params` elements in buckets over `g`:
// seconds per bucket (the last bucket is smaller) for a collective.
std::vector<double> bucket_times(const Cluster& c, const DeviceRates& rates, Collective coll, const GroupPlacement& g,
                                 double params, double bytes_per_param, double bucket) {
  std::vector<double> out;
  if (g.size <= 1 || params <= 0) return out;
  for (double left = params; left > 0; left -= bucket)
    out.push_back(collective_seconds(c, coll, g, std::min(left, bucket) * bytes_per_param, rates));
  return out;
}

// Where the bucketed reductions of a stage end when each becomes ready
// during the last micro-batch's backward (overlap) or after the pipeline.
double reduce_end(const std::vector<double>& times, const StageReplay& r, const std::vector<double>& chunk_share,
                  bool overlap) {
  double t = r.end;
  if (times.empty()) return t;
  if (!overlap) {
    for (double d : times) t += d;
    return t;
  }
  // Buckets in backward order: the last chunk's last layers first (the
  // interleaved backward runs chunk v-1 first); each ready once the part of
  // its chunk's last backward that produces it has run.
  std::vector<std::pair<double, double>> ready;  // (time, share of the stage's parameters)
  const size_t v = chunk_share.size();
  const double n = static_cast<double>(times.size());
  double done = 0;
  t = 0;
  size_t bucket = 0;
  for (size_t k = v; k-- > 0;) {
    const double start = r.last_backward_start[k], end = r.last_backward_end[k];
    const double share = chunk_share[k];
    while (bucket < times.size() && (static_cast<double>(bucket) + 1) / n <= done + share + 1e-12) {
      const double within = ((static_cast<double>(bucket) + 1) / n - done) / std::max(share, 1e-12);
      const double at = start + std::clamp(within, 0.0, 1.0) * (end - start);
      t = std::max(t, at) + times[bucket];
      ++bucket;
    }
    done += share;
  }
  for (; bucket < times.size(); ++bucket) t = std::max(t, r.end) + times[bucket];
  return std::max(t, r.end);
}

}  // namespace

transformer::TransformerConfig sim_transformer_config(const recipes::MegatronArgs& a) {
  int64_t vocab = 0;
  if (a.vocab_size)
    vocab = *a.vocab_size;
  else if (a.padded_vocab_size)
    vocab = *a.padded_vocab_size;
  else if (a.tokenizer_type && *a.tokenizer_type != "NullTokenizer")
    vocab = recipes::build_tokenizer(a)->vocab_size();
  QK_CHECK(vocab > 0, "qk sim needs the vocabulary: give --vocab-size (or --padded-vocab-size, or a tokenizer with "
           "--tokenizer-type and its files)");
  return recipes::gpt_transformer_config(a, vocab);
}

Layout layout_of(const recipes::MegatronArgs& a) {
  Layout l;
  l.world = a.world_size;
  l.tp = a.tensor_model_parallel_size;
  l.pp = a.pipeline_model_parallel_size;
  l.vp = a.virtual_pipeline_model_parallel_size.value_or(1);
  l.cp = a.context_parallel_size;
  l.ep = a.expert_model_parallel_size;
  l.dp = a.data_parallel_size;
  l.micro_batch = a.micro_batch_size.value_or(1);
  l.global_batch = a.global_batch_size.value_or(l.micro_batch * l.dp);
  l.num_microbatches = l.global_batch / (l.micro_batch * l.dp);
  l.sequence_parallel = a.sequence_parallel && l.tp > 1;
  l.distributed_optimizer = a.use_distributed_optimizer;
  l.overlap_grad_reduce = a.overlap_grad_reduce;
  l.overlap_param_gather = a.overlap_param_gather;
  l.tp_comm_overlap = a.tp_comm_overlap;
  l.recompute = a.recompute_granularity.value_or("none");
  return l;
}

SimResult simulate(const recipes::MegatronArgs& a, const Cluster& c, const SimOptions& o) {
  QK_CHECK(o.moe_imbalance >= 1.0, "the MoE routing imbalance must be >= 1 (1: balanced), got ", o.moe_imbalance);
  const transformer::TransformerConfig cfg = sim_transformer_config(a);
  SimResult res;
  Layout& L = res.layout;
  L = layout_of(a);
  res.dtype = training_dtype(a);
  const int64_t world = L.world;
  const int64_t ranks_on_node = std::min<int64_t>(world, c.gpus_per_node);
  const DeviceRates rates(c, res.dtype, ranks_on_node);

  CostContext x{a, c, cfg, L, rates, o.moe_imbalance, {}, {}, {}};
  x.tp = place_group(c, L.tp, 1, world);
  x.cp = place_group(c, L.cp, L.tp, world);
  x.ep = place_group(c, L.ep, L.tp, world);
  const GroupPlacement dp_group = place_group(c, L.dp * L.cp, L.tp, world);
  const int64_t edp = std::max<int64_t>(1, L.dp * L.cp / L.ep);
  const GroupPlacement edp_group = place_group(c, edp, L.tp * L.ep, world);
  const int64_t pp_stride = world / L.pp;
  // A pipeline spans nodes when the job does (stages are world / pp ranks
  // apart); it runs at the pace of its slowest hop.
  const bool pp_cross = L.pp > 1 && world > c.gpus_per_node;

  parallel::PipelineSplitOptions so;
  so.num_layers = cfg.num_layers;
  so.pipeline_model_parallel_size = L.pp;
  if (L.vp > 1) so.num_virtual_stages_per_pipeline_rank = L.vp;
  so.decoder_first_pipeline_num_layers = a.decoder_first_pipeline_num_layers;
  so.decoder_last_pipeline_num_layers = a.decoder_last_pipeline_num_layers;
  so.account_for_embedding = a.account_for_embedding_in_pipeline_split;
  so.account_for_loss = a.account_for_loss_in_pipeline_split;
  const parallel::PipelineLayerSplit split = parallel::PipelineLayerSplit::make(so);

  // ---- per-micro-batch costs of every (stage, chunk)
  const bool full = cfg.recompute_granularity == transformer::RecomputeGranularity::full;
  const bool block = cfg.recompute_method == transformer::RecomputeMethod::block;
  const recipes::GptActivationBytes act = recipes::gpt_activation_bytes(a, cfg);
  std::map<std::pair<bool, bool>, PassCosts> layer_cache;  // (moe, recomputed)
  auto layer = [&](int64_t number, bool recomputed) -> const PassCosts& {
    const auto key = std::make_pair(cfg.is_moe_layer(number), recomputed);
    auto it = layer_cache.find(key);
    if (it == layer_cache.end()) it = layer_cache.emplace(key, layer_costs(x, number, recomputed)).first;
    return it->second;
  };
  const PassCosts emb = embedding_costs(x), outc = output_costs(x);
  const double e = static_cast<double>(dtype_size(cfg.params_dtype));
  const double tokens = static_cast<double>(*a.micro_batch_size) * static_cast<double>(*a.seq_length) /
                        static_cast<double>(L.cp);
  const double p2p_bytes = e * tokens * static_cast<double>(cfg.hidden_size) / (L.sequence_parallel ? L.tp : 1);

  // Each micro-batch's gradients added to the earlier ones' (priced where calibrated: stream_kinds.h).
  const recipes::GptMemoryDtypes dt = recipes::gpt_memory_dtypes(a);
  const double grad_bytes = static_cast<double>(dtype_size(dt.grads));
  const double accumulating = L.num_microbatches > 1 ? 1.0 - 1.0 / static_cast<double>(L.num_microbatches) : 0.0;
  std::vector<StageCosts> costs(static_cast<size_t>(L.pp));
  std::vector<Cost> per_micro(static_cast<size_t>(L.pp));  // summed over chunks: what a micro-batch costs the stage
  std::vector<std::vector<double>> chunk_params(static_cast<size_t>(L.pp));
  std::vector<transformer::ParamCount> stage_params(static_cast<size_t>(L.pp));
  for (int r = 0; r < L.pp; ++r) {
    StageCosts& sc = costs[static_cast<size_t>(r)];
    sc.send_next = p2p_seconds(c, pp_cross, p2p_bytes);
    sc.send_prev = sc.send_next;
    for (int k = 0; k < L.vp; ++k) {
      const int64_t n = split.num_layers(r, k), first = split.layer_offset(r, k) + 1;
      Cost f, b;
      double kept = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool rec = full && (!block || i < cfg.recompute_num_layers);
        const PassCosts& lc = layer(first + i, rec);
        f += lc.forward;
        b += lc.backward;
        b += lc.recompute;
        kept += rec ? act.per_layer : (full ? act.recompute_peak : act.per_layer);
      }
      transformer::ParamScope ps;
      ps.first_layer = first;
      ps.num_layers = n;
      ps.embedding = split.is_first_stage(r, k);
      ps.output = split.is_last_stage(r, k);
      ps.pipeline_size = L.pp;
      const transformer::ParamCount pc = transformer::num_parameters(cfg, ps);
      stage_params[static_cast<size_t>(r)] += pc;
      b.compute += accumulating * rates.stream_if_calibrated(
                                      "grad_accumulate", streams::grad_accumulate(e, grad_bytes, static_cast<double>(pc.total())));
      chunk_params[static_cast<size_t>(r)].push_back(static_cast<double>(pc.total()));
      if (ps.embedding) {
        f += emb.forward;
        b += emb.backward;
        kept += act.embedding;
      }
      if (ps.output) {
        f += outc.forward;
        b += outc.backward;
        kept += act.output;
      }
      sc.forward.push_back(f.total());
      sc.backward.push_back(b.total());
      sc.activation_bytes.push_back(kept);
      per_micro[static_cast<size_t>(r)] += f;
      per_micro[static_cast<size_t>(r)] += b;
    }
    double total = 0;
    for (double p : chunk_params[static_cast<size_t>(r)]) total += p;
    for (double& p : chunk_params[static_cast<size_t>(r)]) p = total > 0 ? p / total : 0;
  }

  // ---- the schedule, replayed; and once more without point to point, to
  // tell the bubble from waiting on links
  parallel::ScheduleTraceOptions to;
  to.pipeline_size = static_cast<int>(L.pp);
  to.num_microbatches = L.num_microbatches;
  to.num_model_chunks = static_cast<int>(L.vp);
  to.overlap_p2p_comm = a.overlap_p2p_comm && L.vp > 1;
  const auto trace = cached_trace(to);
  // A pipeline on one CPU host: the stages' ranks share its cores, so while
  // some wait on a hand-over the others compute faster (each stage's
  // world / pp ranks compute and wait together).
  StageSpeed speed;
  if (c.device.cpu_cores > 0 && L.pp > 1 && !pp_cross)
    speed = [&rates, per_stage = world / L.pp](int computing) { return rates.speed_with(computing * per_stage); };
  const std::vector<StageReplay> rep = replay(*trace, costs, o.timelines, speed);
  std::vector<StageReplay> ideal;
  if (L.pp > 1) {
    std::vector<StageCosts> no_links = costs;
    for (auto& sc : no_links) sc.send_next = sc.send_prev = 0;
    ideal = replay(*trace, no_links, false, speed);
  }
  double pipeline_end = 0, ideal_end = 0;
  for (size_t r = 0; r < rep.size(); ++r) {
    pipeline_end = std::max(pipeline_end, rep[r].end);
    ideal_end = std::max(ideal_end, ideal.empty() ? rep[r].end : ideal[r].end);
  }

  // ---- data-parallel reduction, optimizer, tied embedding
  const double param_bytes = static_cast<double>(dtype_size(dt.params));
  const double bucket = bucket_elements(a, L.dp * L.cp);
  const Collective reduce = L.distributed_optimizer ? Collective::reduce_scatter : Collective::all_reduce;
  std::vector<double> stage_end(static_cast<size_t>(L.pp)), dp_exposed(static_cast<size_t>(L.pp)),
      opt_time(static_cast<size_t>(L.pp)), gather_exposed(static_cast<size_t>(L.pp));
  const bool tied_sync = cfg.share_embeddings_and_output_weights && L.pp > 1;
  const double emb_sync =
      tied_sync ? collective_seconds(c, Collective::all_reduce, place_group(c, 2, world - world / L.pp, world),
                                     static_cast<double>(cfg.padded_vocab_size() * cfg.hidden_size / L.tp) * grad_bytes,
                                     rates)
                : 0;
  const double norm_sync = collective_seconds(c, Collective::all_reduce, place_group(c, world, 1, world), 16, rates);
  double step = 0;
  for (int r = 0; r < L.pp; ++r) {
    const size_t ri = static_cast<size_t>(r);
    const transformer::ParamCount& pc = stage_params[ri];
    std::vector<double> times = bucket_times(c, rates, reduce, dp_group, static_cast<double>(pc.dense), grad_bytes,
                                             bucket);
    const std::vector<double> etimes = bucket_times(c, rates, reduce, edp_group, static_cast<double>(pc.expert),
                                                    grad_bytes, bucket);
    times.insert(times.end(), etimes.begin(), etimes.end());
    const double reduced = reduce_end(times, rep[ri], chunk_params[ri], L.overlap_grad_reduce);
    dp_exposed[ri] = reduced - rep[ri].end;
    double t = reduced + ((r == 0 || r == L.pp - 1) ? emb_sync : 0) + norm_sync;
    // The optimizer step: per parameter of this rank's shard, read the
    // gradient, read and write the fp32 main weight and each state tensor,
    // write the model's copy; every gradient is zeroed for the next step.
    const double dense = static_cast<double>(pc.dense), expert = static_cast<double>(pc.expert);
    const double shard = L.distributed_optimizer
                             ? dense / static_cast<double>(L.dp * L.cp) + expert / static_cast<double>(edp)
                             : dense + expert;
    const double slots = a.optimizer == "sgd" ? (a.sgd_momentum != 0 ? 1 : 0) : 2;
    const double per = 4 + 8 + 8 * slots + (dt.params == DType::f32 ? 0 : param_bytes);
    opt_time[ri] = rates.stream(shard * per) + rates.stream((dense + expert) * grad_bytes);
    // The gradients' norm over this rank's shard, for clipping (and fp16's overflow check).
    if (a.clip_grad > 0 || a.fp16) opt_time[ri] += rates.stream("grad_norm", {streams::grad_norm(grad_bytes, shard)});
    t += opt_time[ri];
    // The distributed optimizer gathers the updated weights: hidden behind
    // the next step's forward with --overlap-param-gather (but its first bucket).
    if (L.distributed_optimizer) {
      const std::vector<double> ag = bucket_times(c, rates, Collective::all_gather, dp_group, dense, param_bytes, bucket);
      const std::vector<double> eag =
          bucket_times(c, rates, Collective::all_gather, edp_group, expert, param_bytes, bucket);
      double all = 0;
      for (double d : ag) all += d;
      for (double d : eag) all += d;
      gather_exposed[ri] = L.overlap_param_gather ? (ag.empty() ? 0 : ag.front()) : all;
      t += gather_exposed[ri];
    }
    stage_end[ri] = t;
    step = std::max(step, t);
  }
  res.step_time_s = step;

  // ---- throughput
  const double gbs = static_cast<double>(L.global_batch);
  res.tokens_per_s = gbs * static_cast<double>(*a.seq_length) / step;
  res.model_flops_per_step = transformer::num_floating_point_operations(cfg, L.global_batch);
  res.tflops_per_gpu = res.model_flops_per_step / step / static_cast<double>(world) / 1e12;
  res.mfu = res.model_flops_per_step / step / static_cast<double>(world) / c.device.peak_flops(res.dtype);

  // ---- where the time goes, on the slowest stage
  size_t worst = 0;
  for (size_t r = 0; r < stage_end.size(); ++r)
    if (stage_end[r] > stage_end[worst]) worst = r;
  const double m = static_cast<double>(L.num_microbatches);
  const Cost& pm = per_micro[worst];
  TimeBreakdown& tb = res.time;
  // Under processor sharing the stage computed faster than its costs while
  // others waited: its pieces in the wall time they took.
  const double shared = speed && pm.total() > 0 ? rep[worst].busy / (pm.total() * m) : 1.0;
  tb.compute = pm.compute * m * shared;
  tb.tp_comm = pm.tp * m * shared;
  tb.cp_comm = pm.cp * m * shared;
  tb.ep_comm = pm.ep * m * shared;
  const double idle = std::max(0.0, pipeline_end - rep[worst].busy);
  const double ideal_idle = ideal.empty() ? idle : std::max(0.0, ideal_end - ideal[worst].busy);
  tb.bubble = std::min(idle, ideal_idle);
  tb.pp_wait = std::max(0.0, idle - tb.bubble);
  tb.dp_comm = (step - pipeline_end) - opt_time[worst];
  tb.dp_comm = std::max(0.0, tb.dp_comm);
  tb.optimizer = opt_time[worst];
  double bubble_sum = 0;
  for (size_t r = 0; r < rep.size(); ++r) {
    const StageReplay& sr = ideal.empty() ? rep[r] : ideal[r];
    bubble_sum += ideal_end > 0 ? std::max(0.0, ideal_end - sr.busy) / ideal_end : 0;
  }
  res.bubble_fraction = bubble_sum / static_cast<double>(rep.size());
  res.exposed_comm_fraction = (tb.tp_comm + tb.cp_comm + tb.ep_comm + tb.pp_wait + tb.dp_comm) / step;

  // ---- memory per GPU, on the stage that needs the most
  MemoryUse best;
  double best_total = -1;
  for (int r = 0; r < L.pp; ++r) {
    const size_t ri = static_cast<size_t>(r);
    const transformer::ParamCount& pc = stage_params[ri];
    const optim::OptimizerMemory dm =
        recipes::gpt_weight_and_optimizer_memory(a, pc.dense, dt, L.dp * L.cp, L.distributed_optimizer);
    const optim::OptimizerMemory em =
        recipes::gpt_weight_and_optimizer_memory(a, pc.expert, dt, edp, L.distributed_optimizer);
    MemoryUse mu;
    mu.stage = r;
    mu.weights = static_cast<double>(dm.weights + em.weights);
    mu.grads = static_cast<double>(dm.grads + em.grads);
    mu.main_params = static_cast<double>(dm.main_params + em.main_params);
    mu.optimizer_state = static_cast<double>(dm.optimizer_state + em.optimizer_state);
    mu.activations = rep[ri].peak_activation_bytes + (full ? act.recompute_peak : 0) + 2 * p2p_bytes;
    mu.reserved = c.device.memory_reserved_gb * 1e9;
    if (mu.total() > best_total) {
      best_total = mu.total();
      best = mu;
    }
  }
  res.memory = best;
  res.mem_gb_per_gpu = best.total() / 1e9;
  // CPU ranks share the host's memory.
  const double share = c.device.cpu_cores > 0 ? static_cast<double>(ranks_on_node) : 1.0;
  res.fits = res.mem_gb_per_gpu * share <= c.device.memory_gb;
  if (!res.fits)
    res.fit_note = c.device.cpu_cores > 0
                       ? fmt::format("does not fit: {} ranks x {:.2f} GB need more than the host's {:.1f} GB",
                                     ranks_on_node, res.mem_gb_per_gpu, c.device.memory_gb)
                       : fmt::format("does not fit: needs {:.1f} GB per GPU (stage {}) of {:.1f} GB",
                                     res.mem_gb_per_gpu, best.stage, c.device.memory_gb);

  // ---- timelines for the trace
  if (o.timelines) {
    for (int r = 0; r < L.pp; ++r) {
      const size_t ri = static_cast<size_t>(r);
      parallel::Timeline tl(static_cast<int>(r * pp_stride),
                            fmt::format("pp stage {} (global rank {}: tp 0, dp 0)", r, r * pp_stride));
      for (const parallel::Span& s : rep[ri].spans) tl.add(s);
      double t = rep[ri].end;
      if (dp_exposed[ri] > 0) {
        tl.add({parallel::SpanKind::collective, t * 1e6, (t + dp_exposed[ri]) * 1e6,
                L.distributed_optimizer ? "gradient reduce-scatter (exposed)" : "gradient all-reduce (exposed)", -1,
                -1});
        t += dp_exposed[ri];
      }
      t += ((r == 0 || r == L.pp - 1) ? emb_sync : 0) + norm_sync;
      tl.add({parallel::SpanKind::optimizer, t * 1e6, (t + opt_time[ri]) * 1e6, "optimizer", -1, -1});
      t += opt_time[ri];
      if (gather_exposed[ri] > 0)
        tl.add({parallel::SpanKind::collective, t * 1e6, (t + gather_exposed[ri]) * 1e6,
                "parameter all-gather (exposed)", -1, -1});
      tl.add_step({0, step * 1e6});
      res.timelines.push_back(std::move(tl));
    }
  }
  return res;
}

}  // namespace qk::sim
