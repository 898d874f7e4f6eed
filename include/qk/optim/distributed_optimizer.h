// Megatron-LM's distributed optimizer (--use-distributed-optimizer;
// megatron/core/optimizer/distrib_optimizer.py, ZeRO-1): gradients
// reduce-scattered over the data-parallel group in buckets, each rank holding
// and stepping the fp32 main weights and Adam moments of its 1/DP shard of
// every bucket, then the parameters all-gathered.
//
//   qk::optim::DistributedOptimizer opt(*model, qk::optim::megatron_param_groups(*model),
//       qk::optim::adamw(optim::AdamWOptions(3e-4)), /*scaler=*/nullptr,
//       {.clip_grad = 1.0, .accumulate_allreduce_grads_in_fp32 = true},
//       {.data_parallel_group = dp, .overlap_grad_reduce = true, .overlap_param_gather = true});
//   model->set_forward_pre_hook(opt.forward_pre_hook());   // --overlap-param-gather, bucket by bucket
//   qk::train::StepRunner runner(opt, {dp, nullptr}, {.num_microbatches = 4});   // or a Trainer
//   runner.step(forward_step);
//
// A MixedPrecisionOptimizer (same checkpoints, scheduler, loss scaling), on
// a ParamAndGradBuffer (param_and_grad_buffer.h) over the model's
// parameters in its registration order:
//   - gradients go into the buffer (grad_dtype f32 with
//     accumulate_allreduce_grads_in_fp32 or f32 parameters, Megatron's
//     grad_reduce_in_fp32; else the parameters' dtype) by hooks, micro-batch
//     after micro-batch; each bucket is reduce-scattered (averaged) at the
//     end of the step, or with overlap_grad_reduce as soon as its gradients
//     of the last micro-batch are in (the hooks of that backward);
//   - main_params() are this rank's pieces of each parameter (1-D, fp32:
//     copies for bf16/f16, views of the buffer for f32), the inner optimizer
//     steps only those; the inf/NaN check, the gradient norm for clipping
//     and the zero count are sums over the group;
//   - the updated pieces are written into the parameter buffer (rounded to
//     the model's dtype) and every bucket is all-gathered: at once, or with
//     overlap_param_gather started right after the step and awaited bucket
//     by bucket in the next forward by forward_pre_hook() (without the hook
//     installed, by the next zero_grad). finish_param_sync() waits for all
//     (the Trainer calls it before evaluating and saving).
// shard = false keeps the buffers and overlapped all-reduces but whole state
// on every rank: Megatron's DDP with --overlap-grad-reduce and no
// distributed optimizer.
//
// Checkpoints are the MixedPrecisionOptimizer's format, whole tensors by
// parameter name: gather_state_for_save (collective) all-gathers the shards
// bucket by bucket, then the writer's save_state (state_by_name) writes them; load_state
// (every rank) keeps this rank's slice of each tensor. So a checkpoint moves
// between this optimizer, the plain one, and any data-parallel size.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "qk/nn/module.h"
#include "qk/optim/mixed_precision_optimizer.h"
#include "qk/optim/param_and_grad_buffer.h"

namespace qk::optim {

struct DistributedOptimizerOptions {
  dist::ProcessGroup* data_parallel_group = nullptr;  // null: one rank
  bool shard = true;                  // false: whole state per rank, all-reduced buckets
  bool overlap_grad_reduce = false;   // --overlap-grad-reduce
  bool overlap_param_gather = false;  // --overlap-param-gather (needs shard)
  // Elements per bucket (--ddp-bucket-size); 0: Megatron's max(40M, 1M x DP)
  // with overlap_grad_reduce, one bucket without.
  int64_t bucket_size = 0;
  // Pipeline parallelism with tied embeddings: this stage's tied weight
  // (PipelineParallel::tied_parameter; "" none). With shard it gets a bucket
  // of its own, as Megatron's DDP does, so the first stage's embedding and
  // the last stage's copy are cut into the same shards and their averaged
  // shard pieces can be summed over the embedding group after the
  // reduce-scatter (set_pipeline_parallel requires it).
  std::string shared_embedding{};
  // Expert parallelism (qk/parallel/model_parallel.h): the routed experts'
  // parameters in buckets of their own, reduced and sharded over
  // expert.expert_dp (Megatron's expert buffers), their gradients scaled
  // to an unsplit run's; checkpoints gather them on expert-data-parallel
  // rank 0 of every expert-parallel rank.
  parallel::ExpertParallel expert{};
};

class DistributedOptimizer : public MixedPrecisionOptimizer {
 public:
  // `model` gives the parameter order (every parameter in `groups` must be
  // one of its parameters); its parameters move into the buffer.
  DistributedOptimizer(const nn::Module& model, std::vector<ParamGroupSpec> groups, const OptimizerFactory& make,
                       std::unique_ptr<LossScaler> scaler, MixedPrecisionOptions o, DistributedOptimizerOptions d);
  ~DistributedOptimizer() override;

  void zero_grad() override;
  void begin_microbatch(bool last) override;
  void accumulate_grads() override {}  // the buffer's hooks do it
  void finish_grad_sync(dist::ProcessGroup* dp) override;
  bool reduces_own_grads() const override { return true; }
  void finish_param_sync() override;
  void gather_state_for_save(int writer_rank) override;
  OptimizerMemory memory() const override;
  StateByName state_by_name(const nn::Metadata& extra = {}) const override;
  void load_state_by_name(const StateByName& state, const std::string& where) override;
  void reload_model_params() override;
  // Checks that a sharded tied weight has its bucket (options().shared_embedding).
  void set_pipeline_parallel(parallel::PipelineParallel pp) override;

  // Megatron's forward pre-hook: waits for the all-gather of the part's
  // parameters. Install it on the model (GPTModel::set_forward_pre_hook)
  // before the first step; it must run before every part that owns
  // parameters. The optimizer then leaves the gathers to the forward. The
  // hook refers to this optimizer: no forward may run it after the
  // optimizer is gone (clear it with set_forward_pre_hook({}) first).
  std::function<void(const nn::Module& part)> forward_pre_hook();

  const ParamAndGradBuffer& buffer() const { return *buffer_; }
  const DistributedOptimizerOptions& distributed_options() const { return d_; }

 protected:
  void collect_grads() override;
  size_t name_index_of_main(size_t i) const override { return name_index_[pieces_[i].param]; }
  void sum_over_data_parallel(std::vector<double>& sums) override;
  bool sums_pieces_over_data_parallel() const override { return d_.shard && buffer_->group_size() > 1; }
  void update_model_params() override;

 private:
  NamedState gather_named_state(int writer_rank) const;
  // Whether this rank writes some bucket's state (data-parallel rank
  // writer_rank, or expert-data-parallel rank writer_rank for expert buckets).
  bool writes_state(int writer_rank) const;
  void wait_for_part(const nn::Module& part);

  DistributedOptimizerOptions d_;
  std::unique_ptr<ParamAndGradBuffer> buffer_;
  std::vector<size_t> buffer_index_;  // names_ index -> buffer parameter index
  std::vector<size_t> name_index_;    // buffer parameter index -> names_ index
  std::vector<ParamAndGradBuffer::ShardPiece> pieces_;  // per main_ entry
  Tensor shard_grads_;                // fp32 copies when the buffer's gradients are not f32
  bool grads_synced_ = false;
  bool pre_hook_installed_ = false;
  std::unordered_map<const nn::Module*, std::vector<size_t>> part_buckets_;
  mutable std::optional<NamedState> gathered_;  // gather_state_for_save -> state_by_name
};

// Megatron's report_theoretical_memory for the weights and optimizer, per
// rank, from parameter counts: weights and gradients whole, fp32 main
// weights and Adam's two moments (SGD's momentum: one) divided over the
// data-parallel ranks with the distributed optimizer.
OptimizerMemory theoretical_optimizer_memory(int64_t num_parameters, DType params_dtype, DType grad_dtype,
                                             int state_tensors_per_parameter, int data_parallel_size,
                                             bool distributed_optimizer);

}  // namespace qk::optim
