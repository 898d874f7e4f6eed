// `qk pretrain-gpt`'s optimizer (Megatron's get_megatron_optimizer with
// --use-distributed-optimizer, --overlap-grad-reduce, --overlap-param-gather),
// its theoretical memory line (report_theoretical_memory) and the recompute
// notes.
#include <fmt/format.h>

#include "qk/base/error.h"
#include "qk/tensor/backend.h"
#include "qk/optim/distributed_optimizer.h"
#include "qk/recipes/gpt_memory.h"
#include "qk/recipes/gpt_pretrain.h"

namespace qk::recipes {

namespace {

constexpr double kMegabyte = 1024.0 * 1024.0;  // Megatron's NUM_BYTES_IN_MEGABYTE

std::string mb(int64_t bytes) { return fmt::format("{:.2f} MB", static_cast<double>(bytes) / kMegabyte); }

}  // namespace

std::unique_ptr<optim::MixedPrecisionOptimizer> gpt_build_optimizer(const MegatronArgs& a, const nn::Module& model,
                                                             dist::ProcessGroup* dp,
                                                             const std::string& shared_embedding,
                                                             const parallel::ExpertParallel& expert) {
  auto groups = optim::megatron_param_groups(model);
  if (!a.use_distributed_optimizer && !a.overlap_grad_reduce)
    return std::make_unique<optim::MixedPrecisionOptimizer>(std::move(groups), gpt_optimizer(a), gpt_loss_scaler(a),
                                                     gpt_mixed_precision_options(a));
  // --overlap-grad-reduce alone: Megatron's DDP buckets, all-reduced, whole state per rank.
  optim::DistributedOptimizerOptions d;
  d.data_parallel_group = dp && dp->size() > 1 ? dp : nullptr;
  d.shard = a.use_distributed_optimizer;
  d.overlap_grad_reduce = a.overlap_grad_reduce;
  d.overlap_param_gather = a.overlap_param_gather;
  d.bucket_size = a.ddp_bucket_size.value_or(0);
  d.shared_embedding = shared_embedding;
  d.expert = expert;  // the experts' own buckets over the expert-data-parallel ranks
  return std::make_unique<optim::DistributedOptimizer>(model, std::move(groups), gpt_optimizer(a), gpt_loss_scaler(a),
                                                gpt_mixed_precision_options(a), d);
}

std::unique_ptr<optim::MixedPrecisionOptimizer> gpt_build_optimizer(const MegatronArgs& a,
                                                                    transformer::GPTModelImpl& model,
                                                                    dist::ProcessGroup* dp,
                                                                    const parallel::ExpertParallel& expert) {
  auto opt = gpt_build_optimizer(a, static_cast<const nn::Module&>(model), dp, "", expert);
  // Each part of the model waits for its own buckets' all-gather.
  if (a.overlap_param_gather)
    if (auto* d = dynamic_cast<optim::DistributedOptimizer*>(opt.get()))
      model.set_forward_pre_hook(d->forward_pre_hook());
  return opt;
}

std::string gpt_theoretical_memory(const MegatronArgs& a, const optim::MixedPrecisionOptimizer& opt,
                                   int data_parallel_size) {
  int64_t n = 0;
  for (const Tensor& p : opt.model_params()) n += p.numel();
  QK_CHECK(!opt.model_params().empty(), "gpt_theoretical_memory: the optimizer has no parameters");
  const DType params = opt.model_params().front().dtype();
  const DType grads = opt.options().accumulate_allreduce_grads_in_fp32 || params == DType::f32 ? DType::f32 : params;
  const GptMemoryDtypes dtypes{params, grads};
  const int slots = optimizer_state_tensors_per_parameter(a);  // for the line's text
  const bool sharded = a.use_distributed_optimizer;
  const optim::OptimizerMemory mine = gpt_weight_and_optimizer_memory(a, n, dtypes, data_parallel_size, sharded);
  const optim::OptimizerMemory other = gpt_weight_and_optimizer_memory(a, n, dtypes, data_parallel_size, !sharded);
  std::string out = fmt::format("Theoretical memory footprints: weight and optimizer={:.2f} MB\n",
                                static_cast<double>(mine.total()) / kMegabyte);
  out += fmt::format(
      "> per rank: weights {} ({}) + gradients {} ({}) + main weights {} + optimizer state {} ({} fp32 tensor{} per "
      "parameter){}; {} the distributed optimizer: main weights {} + optimizer state {} = {}",
      mb(mine.weights), dtype_name(params), mb(mine.grads), dtype_name(grads), mb(mine.main_params),
      mb(mine.optimizer_state), slots, slots == 1 ? "" : "s",
      sharded ? fmt::format(", the last two sharded over {} data-parallel ranks", data_parallel_size) : "",
      sharded ? "without" : fmt::format("with (over {} ranks)", data_parallel_size), mb(other.main_params),
      mb(other.optimizer_state), mb(other.total()));
  return out;
}

std::string gpt_memory_report(const optim::MixedPrecisionOptimizer& opt, int64_t iteration, int rank) {
  // Of the device the weights live on.
  const MemoryStats m = memory_stats(opt.model_params().empty() ? kCPU : opt.model_params().front().device());
  const optim::OptimizerMemory o = opt.memory();
  auto mib = [](uint64_t b) { return fmt::format("{:.2f}", static_cast<double>(b) / kMegabyte); };
  return fmt::format(
      "[Rank {}] (after {} iterations) memory (MB) | allocated: {} | max allocated: {} | weights: {} | gradients: {} "
      "| main weights: {} | optimizer state: {}",
      rank, iteration, mib(m.allocated), mib(m.peak_allocated), mib(o.weights), mib(o.grads), mib(o.main_params),
      mib(o.optimizer_state));
}

std::vector<std::string> gpt_recompute_notes(const MegatronArgs& a) {
  std::vector<std::string> notes;
  if (a.recompute_granularity == "selective" && a.use_flash_attn)
    notes.push_back(
        "--recompute-granularity selective with --use-flash-attn: the flash kernel keeps no attention matrix, so "
        "there is nothing to recompute (as in Megatron, only the unfused core attention is checkpointed)");
  return notes;
}

}  // namespace qk::recipes
