// The optimizer wrapper of Megatron-LM's trainer: fp32 main weights for a
// bf16/f16 model (Float16OptimizerWithFloat16Params), the same interface for
// an fp32 model (FP32Optimizer), loss scaling, the inf/NaN skip and
// gradient clipping by the global L2 norm.
//
//   auto groups = qk::optim::megatron_param_groups(*model);   // no decay for biases, norms
//   qk::optim::MixedPrecisionOptimizer opt(groups, qk::optim::adamw({.lr = 3e-4}),
//       std::make_unique<qk::optim::DynamicLossScaler>(),      // --fp16; null for bf16/fp32
//       {.clip_grad = 1.0});
//   qk::optim::OptimizerParamScheduler sched(&opt.optimizer(), schedule, opt.group_schedules());
//   opt.zero_grad();
//   (loss * opt.loss_scale()).backward();
//   auto r = opt.step();   // r.updated false: inf/NaN seen, nothing changed
//
// step(): model gradients -> fp32 main gradients (or the fp32 main_grad
// buffer accumulate_grads() filled after each micro-batch), multiply by
// 1/scale while looking for inf/NaN, update the scaler, skip when found;
// else clip (coefficient clip_grad / (norm + 1e-6) when below 1), step the
// inner optimizer on the fp32 main weights and round them into the model's
// bf16/f16 weights. An fp32 model's main weights are its own weights.
//
// Under tensor parallelism (set_tensor_parallel) the step first sums the
// partial gradients over the group (Megatron's _allreduce_layernorm_grads);
// the norm counts each shard once (its squares summed over the group) and
// each replicated parameter once, and inf/NaN on any rank skips the step on
// every rank (get_grad_norm_fp32 and found_inf over the model-parallel group).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qk/dist/process_group.h"
#include "qk/nn/module.h"
#include "qk/nn/safetensors.h"
#include "qk/optim/adam.h"
#include "qk/optim/optimizer.h"
#include "qk/optim/sgd.h"
#include "qk/optim/loss_scaler.h"
#include "qk/optim/optimizer_param_scheduler.h"
#include "qk/parallel/model_parallel.h"

namespace qk::optim {

using NamedParam = std::pair<std::string, Tensor>;

// A parameter group and its schedule overrides (see optimizer_param_scheduler.h).
struct ParamGroupSpec {
  std::vector<NamedParam> params;
  double wd_mult = 1.0;
  std::optional<double> max_lr{}, min_lr{};
};

// Megatron's default grouping: weight decay for matrices, none (wd_mult 0)
// for biases and 1-D parameters (norm weights). Empty groups are dropped.
std::vector<ParamGroupSpec> megatron_param_groups(const nn::Module& model);
// Every trainable parameter in one group.
std::vector<ParamGroupSpec> single_param_group(const nn::Module& model);

// Builds the inner optimizer over the fp32 main parameters, one group each.
using OptimizerFactory =
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<std::vector<Tensor>> main_param_groups)>;
OptimizerFactory adamw(optim::AdamWOptions o);  // Megatron's --optimizer adam (decoupled decay)
OptimizerFactory adam(optim::AdamOptions o);    // torch.optim.Adam (L2 added to the gradient)
OptimizerFactory sgd(optim::SGDOptions o);      // Megatron's --optimizer sgd

struct MixedPrecisionOptions {
  double clip_grad = 1.0;  // --clip-grad; 0: no clipping (the norm is still computed)
  // --accumulate-allreduce-grads-in-fp32: each micro-batch's bf16/f16
  // gradients are added into an fp32 buffer, which is what gets averaged.
  bool accumulate_allreduce_grads_in_fp32 = false;
  // Skip the step on inf/NaN gradients even without a loss scaler (Megatron
  // checks only with one; a bf16 or fp32 NaN would otherwise reach the weights).
  bool skip_nonfinite = true;
  bool log_num_zeros_in_grad = false;  // --log-num-zeros-in-grad
};

// Bytes this rank holds for training state, counted from the tensors
// (Megatron's report_theoretical_memory splits them the same way).
struct OptimizerMemory {
  int64_t weights = 0;          // the model's parameters
  int64_t grads = 0;            // gradient buffers (main grads; the model's .grad where no buffer)
  int64_t main_params = 0;      // fp32 copies of bf16/f16 weights (an fp32 model's weights are its own)
  int64_t optimizer_state = 0;  // Adam's moments, SGD's momentum (created by the first step)
  int64_t total() const { return weights + grads + main_params + optimizer_state; }
};

struct OptimizerStepResult {
  bool updated = false;
  bool found_inf = false;
  double grad_norm = 0;           // of the unscaled gradients before clipping; NaN when skipped
  int64_t num_zeros_in_grad = -1;  // -1 unless log_num_zeros_in_grad
};

// The virtual members are what the distributed optimizer (distributed_optimizer.h)
// changes: where gradients go, how they are reduced, which part of the
// state this rank holds.
class MixedPrecisionOptimizer {
 public:
  MixedPrecisionOptimizer(std::vector<ParamGroupSpec> groups, const OptimizerFactory& make,
                          std::unique_ptr<LossScaler> scaler = nullptr, MixedPrecisionOptions o = {});
  virtual ~MixedPrecisionOptimizer();
  MixedPrecisionOptimizer(const MixedPrecisionOptimizer&) = delete;
  MixedPrecisionOptimizer& operator=(const MixedPrecisionOptimizer&) = delete;

  // Drops the model's gradients and zeroes the fp32 main_grad buffer.
  virtual void zero_grad();
  // Before each micro-batch's forward: whether its backward is the step's
  // last (where an overlapped reduction may start). Nothing here.
  virtual void begin_microbatch(bool /*last*/) {}
  float loss_scale() const { return scaler_ ? scaler_->scale() : 1.0f; }
  LossScaler* scaler() { return scaler_.get(); }
  const LossScaler* scaler() const { return scaler_.get(); }

  // After a micro-batch's backward (accumulate_allreduce_grads_in_fp32 with a
  // bf16/f16 model): main_grad += grad in fp32, the model's grad dropped.
  // A no-op otherwise.
  virtual void accumulate_grads();
  // Data parallelism without DDP: averages the gradients over `pg` in one
  // flat fp32 all-reduce (collective: every rank, once per step).
  void all_reduce_grads(dist::ProcessGroup& pg);
  // After the last micro-batch's backward (collective): all_reduce_grads
  // over `dp` when it has more than one rank; the distributed optimizer
  // finishes its own bucket reductions instead.
  virtual void finish_grad_sync(dist::ProcessGroup* dp);
  // Whether the optimizer reduces gradients over its own data-parallel
  // group (no DDP wrapper may do it too).
  virtual bool reduces_own_grads() const { return false; }
  // Collective over the tensor-parallel group when one is set.
  OptimizerStepResult step();
  // The model's parameters hold the last step's values (the distributed
  // optimizer's all-gather may still be running after step()). Call before
  // reading them outside a forward the optimizer hooks into.
  virtual void finish_param_sync() {}
  // Collective, on every rank, before one rank calls save_state (the
  // distributed optimizer gathers its shards there).
  virtual void gather_state_for_save(int /*writer_rank*/) {}
  // Training state on this rank, from the tensors.
  virtual OptimizerMemory memory() const;

  // Tensor parallelism (see the top of this file): every rank of tp.group
  // calls step() together. The names must be this optimizer's parameters.
  void set_tensor_parallel(parallel::TensorParallel tp);
  const parallel::TensorParallel& tensor_parallel() const { return tp_; }
  // Pipeline parallelism (qk/parallel/model_parallel.h): every stage calls
  // step() together; the tied embedding's gradient is summed over pp.embedding,
  // the norm, inf check and zero count over pp.group (the copy not counted).
  virtual void set_pipeline_parallel(parallel::PipelineParallel pp);
  const parallel::PipelineParallel& pipeline_parallel() const { return pp_; }
  // Expert parallelism (qk/parallel/model_parallel.h): the expert parameters'
  // gradients are summed over ep.expert_dp and divided by the data-parallel
  // size in all_reduce_grads; the norm, inf check and zero count sum their
  // part over ep.ep. Before the first step.
  void set_expert_parallel(parallel::ExpertParallel ep);
  const parallel::ExpertParallel& expert_parallel() const { return ep_; }

  // The inner optimizer, over the fp32 main parameters (schedulers set its rates).
  optim::Optimizer& optimizer() { return *inner_; }
  const optim::Optimizer& optimizer() const { return *inner_; }
  const std::vector<ParamGroupSpec>& groups() const { return groups_; }
  // The groups' schedule overrides (wd_mult, max_lr, min_lr), for
  // OptimizerParamScheduler(&opt.optimizer(), options, opt.group_schedules()).
  std::vector<GroupSchedule> group_schedules() const;
  // Parameter names, model and fp32 main parameters, group by group (the
  // distributed optimizer's main parameters: this rank's 1-D shard pieces).
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<Tensor>& model_params() const { return model_; }
  const std::vector<Tensor>& main_params() const { return main_; }
  bool has_fp32_copies() const { return copies_; }
  const MixedPrecisionOptions& options() const { return o_; }

  // Checkpoint state by parameter name: "main_param/NAME" (fp32 copies),
  // "KEY/NAME" per-parameter optimizer tensors (exp_avg, ...), metadata
  // "step/NAME" and "group.G.HPARAM". Layout-independent: loading matches
  // names, not positions. save_state/load_state write and read
  // state_by_name's contents.
  void save_state(const std::string& path, const nn::Metadata& extra = {}) const;
  void load_state(const std::string& path);
  // The same state in memory (what save_state writes, load_state reads):
  // under tensor parallelism this rank's shards, which checkpoints gather
  // and scatter by the parameter name after the '/'; the distributed
  // optimizer's whole tensors (after gather_state_for_save) on the writer.
  // `where` names the source in errors.
  struct StateByName {
    nn::TensorMap tensors;
    nn::Metadata metadata;
  };
  virtual StateByName state_by_name(const nn::Metadata& extra = {}) const;
  virtual void load_state_by_name(const StateByName& state, const std::string& where);
  // Main weights from the model's weights (after loading weights only).
  virtual void reload_model_params();

 protected:
  // For subclasses that build their own main parameters and inner
  // optimizer (init_inner): checks the groups, fills names_ and model_.
  struct NoMainParams {};
  MixedPrecisionOptimizer(std::vector<ParamGroupSpec> groups, std::unique_ptr<LossScaler> scaler,
                          MixedPrecisionOptions o, NoMainParams);
  void init_inner(const OptimizerFactory& make, std::vector<std::vector<Tensor>> main_groups);
  // step()'s parts: main_[i].grad() set to fp32 gradients; the per-rank
  // sums [found_inf, sum of squares] or [zero count] made global; the new
  // main weights into the model.
  virtual void collect_grads();
  // names_ index of main_[i] (the same index unless main parameters are pieces).
  virtual size_t name_index_of_main(size_t i) const { return i; }
  virtual void sum_over_data_parallel(std::vector<double>& /*sums*/) {}
  // Whether sum_over_data_parallel sums every rank's pieces (the
  // distributed optimizer's shards): then the experts' squares need no sum
  // over the expert-parallel group of their own.
  virtual bool sums_pieces_over_data_parallel() const { return false; }
  virtual void update_model_params();
  // The state file's contents: tensors "KEY/NAME" (exp_avg, ...,
  // main_param), numbers "step/NAME" and "group.G.HPARAM".
  struct NamedState {
    nn::TensorMap tensors;
    std::map<std::string, double> scalars;
  };
  StateByName to_state_by_name(const NamedState& s, const nn::Metadata& extra) const;
  // Checks the format and that every NAME is one of names_.
  NamedState to_named_state(const StateByName& s, const std::string& where) const;

  std::vector<ParamGroupSpec> groups_;
  std::vector<std::string> names_;
  std::vector<Tensor> model_, main_;
  std::unique_ptr<optim::Optimizer> inner_;
  std::unique_ptr<LossScaler> scaler_;
  MixedPrecisionOptions o_;
  bool copies_ = false;          // model params are bf16/f16: main_ are fp32 copies

 private:
  void sum_partial_grads();
  void sum_embedding_grads();
  void sum_over_pipeline(std::vector<double>& sums);
  Tensor flat_grad_view(size_t i) const;
  void ensure_flat_grads();
  Tensor flat_grads_;            // fp32, every parameter's gradient back to back
  std::vector<int64_t> offsets_;
  std::vector<char> accumulated_;  // per param: flat_grads_ holds a gradient this step
  bool collected_ = false;
  parallel::TensorParallel tp_;
  parallel::PipelineParallel pp_;
  parallel::ExpertParallel ep_;
  std::vector<char> expert_;          // per main param: a routed expert's (set_expert_parallel)
  int64_t dense_numel_ = -1;          // flat_grads_: dense parameters first, then the experts' (-1: no split)
  int64_t tied_main_ = -1;            // main param of pp_.tied_parameter (-1: none)
  std::vector<char> sharded_;         // per main param: a tensor-parallel shard
  std::vector<size_t> partial_;       // main params whose gradients are summed over tp
};

}  // namespace qk::optim
