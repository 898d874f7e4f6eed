// search_layouts: every layout the flags' rules accept, simulated, ranked.
#include <algorithm>
#include <chrono>

#include "qk/base/error.h"
#include "qk/sim/simulate.h"
#include "sim_internal.h"

namespace qk::sim {

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

bool varies(const SearchOptions& o, const char* what) { return o.vary.count(what) > 0; }

}  // namespace

SearchResult search_layouts(const recipes::MegatronArgs& base, const Cluster& c, const SearchOptions& o) {
  for (const auto& v : o.vary)
    QK_CHECK(v == "tp" || v == "pp" || v == "vp" || v == "ep" || v == "mbs" || v == "recompute" || v == "dist-opt",
             "--search-vary: unknown choice '", v, "' (tp, pp, vp, ep, mbs, recompute, dist-opt)");
  const auto started = std::chrono::steady_clock::now();
  const transformer::TransformerConfig cfg = sim_transformer_config(base);
  const int64_t world = base.world_size;
  const int64_t layers = cfg.num_layers;

  std::vector<int64_t> tps = {base.tensor_model_parallel_size};
  if (varies(o, "tp")) {
    tps.clear();
    for (int64_t t = 1; t <= std::min<int64_t>(c.gpus_per_node, world); t *= 2)
      if (cfg.num_attention_heads % t == 0 && cfg.num_query_groups % t == 0 && world % t == 0) tps.push_back(t);
  }
  std::vector<int64_t> pps = {base.pipeline_model_parallel_size};
  if (varies(o, "pp")) {
    pps.clear();
    for (int64_t p : divisors(layers))
      if (world % p == 0) pps.push_back(p);
  }
  std::vector<int64_t> eps = {base.expert_model_parallel_size};
  if (varies(o, "ep") && cfg.num_moe_experts > 0) eps = divisors(cfg.num_moe_experts);
  std::vector<int64_t> mbss = {base.micro_batch_size.value_or(1)};
  if (varies(o, "mbs")) mbss = o.micro_batch_sizes;
  std::vector<std::string> recomputes = {base.recompute_granularity.value_or("none")};
  // Selective recompute re-runs the unfused attention core only: with flash
  // attention it is the same layout as none.
  if (varies(o, "recompute"))
    recomputes = cfg.use_flash_attn ? std::vector<std::string>{"none", "full"}
                                    : std::vector<std::string>{"none", "selective", "full"};
  std::vector<bool> dos = {base.use_distributed_optimizer};
  if (varies(o, "dist-opt")) dos = {false, true};

  SearchResult out;
  std::vector<SimResult> all;
  SimOptions so = o.sim;
  so.timelines = false;
  for (int64_t tp : tps)
    for (int64_t pp : pps) {
      if (world % (tp * pp * base.context_parallel_size) != 0) continue;
      std::vector<int64_t> vps = {base.virtual_pipeline_model_parallel_size.value_or(1)};
      if (varies(o, "vp") || varies(o, "pp")) {
        vps = {1};
        if (varies(o, "vp") && pp > 2)
          for (int64_t v = 2; v <= layers / pp; ++v)
            if ((layers / pp) % v == 0) vps.push_back(v);
      }
      for (int64_t vp : vps)
        for (int64_t ep : eps)
          for (int64_t mbs : mbss)
            for (const std::string& rc : recomputes)
              for (bool dist_opt : dos) {
                recipes::MegatronArgs a = base;
                // What validation derived goes, so that it derives it again.
                if (a.weight_decay_incr_style == "constant") {
                  a.start_weight_decay.reset();
                  a.end_weight_decay.reset();
                }
                a.tensor_model_parallel_size = tp;
                a.pipeline_model_parallel_size = pp;
                if (pp != base.pipeline_model_parallel_size) {
                  a.decoder_first_pipeline_num_layers.reset();
                  a.decoder_last_pipeline_num_layers.reset();
                }
                a.num_layers_per_virtual_pipeline_stage.reset();
                a.num_virtual_stages_per_pipeline_rank.reset();
                if (vp > 1) a.num_virtual_stages_per_pipeline_rank = vp;
                a.expert_model_parallel_size = ep;
                a.expert_tensor_parallel_size.reset();
                a.micro_batch_size = mbs;
                a.sequence_parallel = tp > 1 && (base.sequence_parallel || varies(o, "tp"));
                if (tp == 1) a.tp_comm_overlap = false;
                if (varies(o, "recompute")) {
                  a.recompute_activations = false;
                  a.recompute_granularity.reset();
                  a.recompute_method.reset();
                  a.recompute_num_layers.reset();
                  if (rc != "none") a.recompute_granularity = rc;
                  if (rc == "full") {
                    a.recompute_method = "uniform";
                    a.recompute_num_layers = 1;
                  }
                }
                a.use_distributed_optimizer = dist_opt;
                if (!dist_opt) a.overlap_param_gather = false;
                if (dist_opt && varies(o, "dist-opt")) a.overlap_grad_reduce = true;
                try {
                  recipes::MegatronArgsOptions mo = megatron_options(world);
                  recipes::validate_megatron_args(a, mo);
                  const int64_t m = *a.global_batch_size / (*a.micro_batch_size * a.data_parallel_size);
                  if (vp > 1 && m % pp != 0) QK_THROW(ValueError, "interleaving needs micro-batches % pp == 0");
                  if (cfg.num_moe_experts > 0 && cfg.num_moe_experts % ep != 0) QK_THROW(ValueError, "experts % ep");
                  if ((a.data_parallel_size * a.context_parallel_size) % ep != 0) QK_THROW(ValueError, "dp x cp % ep");
                  SimResult r = simulate(a, c, so);
                  ++out.evaluated;
                  if (r.fits) ++out.fitting;
                  if (r.fits || o.keep_unfit) all.push_back(std::move(r));
                } catch (const ValueError&) {
                  ++out.rejected;  // a combination the flags' rules refuse
                }
              }
    }
  std::stable_sort(all.begin(), all.end(), [](const SimResult& x, const SimResult& y) {
    if (x.fits != y.fits) return x.fits;
    return x.tokens_per_s > y.tokens_per_s;
  });
  if (all.size() > o.top) all.resize(o.top);
  out.ranked = std::move(all);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace qk::sim
