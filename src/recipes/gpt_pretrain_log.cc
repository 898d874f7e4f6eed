// The lines `qk pretrain-gpt` prints, in Megatron-LM's formats
// (training_log and evaluate_and_print_results in
// megatron/training/training.py), and qianka's throughput line.
#include <fmt/format.h>

#include <cmath>

#include "qk/base/timer.h"
#include "qk/recipes/gpt_pretrain.h"

namespace qk::recipes {
std::string megatron_iteration_line(const train::LogStats& s, const IterationLineExtras& x) {
  std::string l = fmt::format(" [{}]", x.timestamp.empty() ? qk::timestamp() : x.timestamp);
  l += fmt::format(" iteration {:8d}/{:8d} |", s.iteration, s.train_iters);
  l += fmt::format(" consumed samples: {:12d} |", s.consumed_samples);
  l += fmt::format(" elapsed time per iteration (ms): {:.1f} |", s.elapsed_ms_per_iteration);
  if (x.log_throughput) l += fmt::format(" throughput per GPU (TFLOP/s/GPU): {:.1f} |", s.tflops_per_rank);
  l += fmt::format(" learning rate: {:.6E} |", s.learning_rate);
  l += fmt::format(" global batch size: {:5d} |", s.global_batch_size);
  // Megatron prints a loss only when its interval average is positive (an
  // interval of skipped iterations has none).
  for (const auto& [key, avg] : s.losses)
    if (avg > 0.0) l += fmt::format(" {}: {:.6E} |", key, avg);
  l += fmt::format(" loss scale: {:.1f} |", s.loss_scale);
  if (!std::isnan(s.grad_norm)) l += fmt::format(" grad norm: {:.3f} |", s.grad_norm);
  if (s.num_zeros_in_grad >= 0) l += fmt::format(" num zeros: {:.1f} |", static_cast<double>(s.num_zeros_in_grad));
  if (x.params_norm) l += fmt::format(" params norm: {:.3f} |", *x.params_norm);
  l += fmt::format(" number of skipped iterations: {:3d} |", s.skipped_iterations);
  l += fmt::format(" number of nan iterations: {:3d} |", s.nan_iterations);
  return l;
}

std::string throughput_line(const train::LogStats& s, int world_size, double gemm_peak_flops) {
  const double per_rank_flops = s.tflops_per_rank * 1e12;
  std::string l = fmt::format(" [qk] tokens/s: {:.0f} ({:.0f} per rank) | achieved TFLOP/s per rank: {:.4f} |",
                              s.tokens_per_second, s.tokens_per_second / std::max(world_size, 1), s.tflops_per_rank);
  if (gemm_peak_flops > 0)
    l += fmt::format(" MFU: {:.1f}% of the measured GEMM peak ({:.4f} TFLOP/s per rank) |",
                     100.0 * per_rank_flops / gemm_peak_flops, gemm_peak_flops / 1e12);
  l += fmt::format(" peak memory (RSS): {:.2f} GiB |", static_cast<double>(s.peak_memory_bytes) / (1 << 30));
  return l;
}

std::string traffic_line(const std::vector<train::GroupVolume>& comm) {
  auto mb = [](double bytes) { return fmt::format("{:.2f} MB", bytes / 1e6); };
  std::string l = " [qk] bytes per iteration:";
  for (const train::GroupVolume& v : comm) {
    std::string kinds;
    auto kind = [&](const char* name, double b) {
      if (b > 0) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", name, mb(b));
    };
    kind("all-reduce", v.all_reduce);
    kind("all-gather", v.all_gather);
    kind("reduce-scatter", v.reduce_scatter);
    kind("other", v.other);
    l += fmt::format(" {} {} in {:.0f} calls ({}), {} sent |", v.group, mb(v.bytes()), v.calls,
                     kinds.empty() ? "none" : kinds, mb(v.wire_sent));
  }
  return l;
}

std::string megatron_validation_block(const std::string& prefix, const std::map<std::string, double>& metrics) {
  std::string line = fmt::format(" validation loss at {} | ", prefix);
  for (const auto& [key, value] : metrics) {
    line += fmt::format("{} value: {:.6E} | ", key, value);
    line += fmt::format("{} PPL: {:.6E} | ", key, std::exp(std::min(20.0, value)));
  }
  const std::string dashes(line.size() + 1, '-');
  return dashes + "\n" + line + "\n" + dashes;
}

}  // namespace qk::recipes
