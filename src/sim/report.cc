// The parser options for a planned run, layouts as text and flags, results
// as JSON and as lines for people.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "qk/sim/simulate.h"

namespace qk::sim {

recipes::MegatronArgsOptions megatron_options(int64_t world_size) {
  recipes::MegatronArgsOptions o;
  o.world_size = world_size;
  o.require_training = false;
  o.check_data_files = false;
  o.modelled_flags = {"--context-parallel-size", "--tp-comm-overlap", "--account-for-embedding-in-pipeline-split",
                      "--account-for-loss-in-pipeline-split"};
  return o;
}

std::string Layout::describe() const {
  std::string s = fmt::format("tp {} pp {}", tp, pp);
  if (vp > 1) s += fmt::format(" vp {}", vp);
  if (cp > 1) s += fmt::format(" cp {}", cp);
  if (ep > 1) s += fmt::format(" ep {}", ep);
  s += fmt::format(" dp {} mbs {} gbs {} (m {})", dp, micro_batch, global_batch, num_microbatches);
  if (recompute != "none") s += " recompute " + recompute;
  if (sequence_parallel) s += " sp";
  if (distributed_optimizer) s += " dist-opt";
  if (tp_comm_overlap) s += " tp-overlap";
  return s;
}

std::string layout_flags(const Layout& l) {
  std::string s = fmt::format("--tensor-model-parallel-size {} --pipeline-model-parallel-size {}", l.tp, l.pp);
  if (l.vp > 1) s += fmt::format(" --num-virtual-stages-per-pipeline-rank {}", l.vp);
  if (l.cp > 1) s += fmt::format(" --context-parallel-size {}", l.cp);
  if (l.ep > 1) s += fmt::format(" --expert-model-parallel-size {}", l.ep);
  s += fmt::format(" --micro-batch-size {} --global-batch-size {}", l.micro_batch, l.global_batch);
  if (l.recompute == "selective") s += " --recompute-granularity selective";
  if (l.recompute == "full") s += " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  if (l.sequence_parallel) s += " --sequence-parallel";
  if (l.distributed_optimizer) s += " --use-distributed-optimizer";
  if (l.overlap_grad_reduce) s += " --overlap-grad-reduce";
  if (l.overlap_param_gather) s += " --overlap-param-gather";
  if (l.tp_comm_overlap) s += " --tp-comm-overlap";
  return s;
}

std::string result_json(const SimResult& r) {
  const Layout& l = r.layout;
  nlohmann::ordered_json j;
  j["step_time_s"] = r.step_time_s;
  j["tokens_per_s"] = r.tokens_per_s;
  j["tflops_per_gpu"] = r.tflops_per_gpu;
  j["mfu"] = r.mfu;
  j["mem_gb_per_gpu"] = r.mem_gb_per_gpu;
  j["fits"] = r.fits;
  if (!r.fit_note.empty()) j["fit_note"] = r.fit_note;
  j["bubble_fraction"] = r.bubble_fraction;
  j["exposed_comm_fraction"] = r.exposed_comm_fraction;
  j["dtype"] = r.dtype;
  j["layout"] = {{"world", l.world},
                 {"tp", l.tp},
                 {"pp", l.pp},
                 {"vp", l.vp},
                 {"cp", l.cp},
                 {"ep", l.ep},
                 {"dp", l.dp},
                 {"micro_batch", l.micro_batch},
                 {"global_batch", l.global_batch},
                 {"num_microbatches", l.num_microbatches},
                 {"recompute", l.recompute},
                 {"sequence_parallel", l.sequence_parallel},
                 {"distributed_optimizer", l.distributed_optimizer},
                 {"overlap_grad_reduce", l.overlap_grad_reduce},
                 {"overlap_param_gather", l.overlap_param_gather},
                 {"tp_comm_overlap", l.tp_comm_overlap},
                 {"flags", layout_flags(l)}};
  const MemoryUse& m = r.memory;
  j["memory_gb"] = {{"stage", m.stage},
                    {"weights", m.weights / 1e9},
                    {"grads", m.grads / 1e9},
                    {"main_params", m.main_params / 1e9},
                    {"optimizer_state", m.optimizer_state / 1e9},
                    {"activations", m.activations / 1e9},
                    {"reserved", m.reserved / 1e9}};
  const TimeBreakdown& t = r.time;
  j["time_s"] = {{"compute", t.compute},     {"tp_comm", t.tp_comm}, {"cp_comm", t.cp_comm},
                 {"ep_comm", t.ep_comm},     {"pp_wait", t.pp_wait}, {"bubble", t.bubble},
                 {"dp_comm", t.dp_comm},     {"optimizer", t.optimizer}};
  return j.dump();
}

std::string result_text(const SimResult& r) {
  const TimeBreakdown& t = r.time;
  const MemoryUse& m = r.memory;
  std::string s;
  s += fmt::format("layout      {}\n", r.layout.describe());
  s += fmt::format("step        {:.3f} s   {:.0f} tokens/s   {:.1f} TFLOP/s per GPU   MFU {:.1f}% ({})\n",
                   r.step_time_s, r.tokens_per_s, r.tflops_per_gpu, 100 * r.mfu, r.dtype);
  s += fmt::format("memory      {:.2f} GB per GPU (stage {}: weights {:.2f}, grads {:.2f}, main weights {:.2f}, "
                   "optimizer {:.2f}, activations {:.2f}, reserved {:.2f}) {}\n",
                   r.mem_gb_per_gpu, m.stage, m.weights / 1e9, m.grads / 1e9, m.main_params / 1e9,
                   m.optimizer_state / 1e9, m.activations / 1e9, m.reserved / 1e9,
                   r.fits ? "fits" : "-- " + r.fit_note);
  s += fmt::format("time        compute {:.3f} s, tp {:.3f}, cp {:.3f}, ep {:.3f}, pp wait {:.3f}, bubble {:.3f}, "
                   "dp {:.3f}, optimizer {:.3f}\n",
                   t.compute, t.tp_comm, t.cp_comm, t.ep_comm, t.pp_wait, t.bubble, t.dp_comm, t.optimizer);
  s += fmt::format("fractions   bubble {:.1f}%, exposed communication {:.1f}%\n", 100 * r.bubble_fraction,
                   100 * r.exposed_comm_fraction);
  return s;
}

}  // namespace qk::sim
