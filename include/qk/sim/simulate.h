// One training step of `qk pretrain-gpt`'s model and layout on a cluster,
// simulated: per-layer forward and backward costs from FLOPs and bytes
// against the cluster's rates, tensor-, context- and expert-parallel
// collectives priced by qccl's cost model, the pipeline schedule's own
// events (the code the trainer runs, replayed with those costs), the
// data-parallel gradient reduction with the overlap the flags ask for, the
// optimizer step; memory per GPU from the trainer's formulas; and a search
// over layouts. docs/sim.md says what is modelled and what is not.
//
//   auto p = qk::recipes::parse_megatron_args(flags, qk::sim::megatron_options(1024));
//   qk::sim::Cluster c = qk::sim::load_cluster("h100-sxm-ib400");
//   qk::sim::SimResult r = qk::sim::simulate(p.args, c);
//   r.step_time_s;  r.tokens_per_s;  r.mfu;  r.mem_gb_per_gpu;  r.fits;
//   qk::parallel::write_chrome_trace("step.json", r.timelines);      // the simulated step
//
//   qk::sim::SearchOptions s;                  // every layout of 1024 GPUs that fits, fastest first
//   qk::sim::SearchResult best = qk::sim::search_layouts(p.args, c, s);
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "qk/parallel/timeline.h"
#include "qk/recipes/megatron_args.h"
#include "qk/sim/cluster.h"

namespace qk::sim {

// The options parse_megatron_args needs for a planned run of `world_size`
// ranks: nothing that only a training run needs (data, --lr, --train-iters),
// and the flags the simulator models although this build cannot run them
// (--context-parallel-size, --tp-comm-overlap, --account-for-embedding-in-
// pipeline-split, --account-for-loss-in-pipeline-split).
recipes::MegatronArgsOptions megatron_options(int64_t world_size);

struct SimOptions {
  // Tokens the busiest expert-parallel rank's experts get over the mean (1:
  // perfect balance). Routing imbalance is a property of the trained router,
  // not of the layout, so it is an input.
  double moe_imbalance = 1.0;
  // Keep the simulated timelines (one per pipeline stage) for a Chrome trace.
  bool timelines = true;
};

struct Layout {
  int64_t world = 1, tp = 1, pp = 1, vp = 1, cp = 1, ep = 1, dp = 1;
  int64_t micro_batch = 1, global_batch = 1, num_microbatches = 1;
  bool sequence_parallel = false, distributed_optimizer = false;
  bool overlap_grad_reduce = false, overlap_param_gather = false, tp_comm_overlap = false;
  std::string recompute = "none";  // none, selective, full
  std::string describe() const;    // "tp 8 pp 16 vp 2 dp 8 mbs 1 m 64 recompute full sp do"
};

// Bytes per GPU on the stage that needs the most.
struct MemoryUse {
  double weights = 0, grads = 0, main_params = 0, optimizer_state = 0;
  double activations = 0;  // peak of what the schedule keeps in flight, plus buffers
  double reserved = 0;     // the device's reserve (context, allocator)
  int stage = 0;           // the pipeline stage these are of
  double total() const { return weights + grads + main_params + optimizer_state + activations + reserved; }
};

// Seconds per step, on the slowest stage, by what each is spent on.
struct TimeBreakdown {
  double compute = 0;         // forward, backward, recompute kernels
  double tp_comm = 0;         // exposed tensor- (and sequence-) parallel collectives
  double cp_comm = 0;         // exposed context-parallel key/value exchange
  double ep_comm = 0;         // expert all-to-all
  double pp_wait = 0;         // waiting on point to point beyond the bubble
  double bubble = 0;          // the pipeline's idle time at fill and drain
  double dp_comm = 0;         // exposed gradient reduction and parameter gather
  double optimizer = 0;       // the optimizer step
};

struct SimResult {
  Layout layout;
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;  // Megatron's num_floating_point_operations / step / GPUs
  double mfu = 0;             // of the device's peak in the training dtype
  double mem_gb_per_gpu = 0;  // MemoryUse::total in GB (1e9)
  bool fits = false;
  std::string fit_note;       // why it does not fit ("needs 91.3 GB of 80 GB")
  double bubble_fraction = 0;         // idle in compute over the step, mean over stages (pipeline fill/drain)
  double exposed_comm_fraction = 0;   // exposed communication over the step
  double model_flops_per_step = 0;
  MemoryUse memory;
  TimeBreakdown time;
  std::string dtype;          // "bf16", "fp16", "fp32": what the peak is of
  std::vector<parallel::Timeline> timelines;  // one per pipeline stage (tp, cp, dp rank 0)
};

// `args` from parse_megatron_args (megatron_options(world)): validated, with
// the data-parallel size derived. ValueError for a cluster the layout does
// not map onto (a tensor-parallel group larger than a node).
SimResult simulate(const recipes::MegatronArgs& args, const Cluster& cluster, const SimOptions& o = {});

// The flags of `args`' layout (tp, pp, vp, ep, micro batch, recompute, ...)
// as command-line text, to paste into `qk pretrain-gpt`.
std::string layout_flags(const Layout& l);

struct SearchOptions {
  SimOptions sim;
  // Which choices vary; the others stay as `args` gives them:
  // "tp", "pp", "vp", "ep", "mbs", "recompute", "dist-opt". Default: all.
  std::set<std::string> vary = {"tp", "pp", "vp", "ep", "mbs", "recompute", "dist-opt"};
  std::vector<int64_t> micro_batch_sizes = {1, 2, 4, 8};
  size_t top = 10;            // how many of the fastest that fit to keep
  bool keep_unfit = false;    // also keep layouts that do not fit (ranked after those that do)
};

struct SearchResult {
  std::vector<SimResult> ranked;  // fastest first (tokens/s); those that fit before those that do not
  int64_t evaluated = 0;          // layouts simulated
  int64_t fitting = 0;            // of them, those that fit
  int64_t rejected = 0;           // combinations the flags' rules refuse (not simulated)
  double seconds = 0;             // how long the search took
};
// Every layout of args' world size that the flags' rules accept (validated
// like `qk pretrain-gpt`'s), simulated; the `top` fastest kept.
SearchResult search_layouts(const recipes::MegatronArgs& args, const Cluster& cluster, const SearchOptions& o = {});

// One object per result: step_time_s, tokens_per_s, tflops_per_gpu, mfu,
// mem_gb_per_gpu, fits, the layout, the memory and time breakdowns.
std::string result_json(const SimResult& r);
// A few lines for people: the layout, step time, throughput, MFU, memory and
// where the time goes.
std::string result_text(const SimResult& r);

}  // namespace qk::sim
