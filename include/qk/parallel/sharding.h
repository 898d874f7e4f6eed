// How tensor-parallel parameters are split, and whole-by-name state dicts
// at any tensor-parallel size: gather the shards into the full tensors a
// checkpoint stores, or cut a full tensor into this rank's shard.
//
//   // Save: every rank of the tensor-parallel group calls it (collective);
//   // the result names and shapes are those of the unsplit model.
//   nn::NamedTensors full = qk::parallel::full_state_dict(*model, *tp);
//   // Load at any tensor-parallel size: each rank keeps its slice (no communication).
//   qk::parallel::load_full_state_dict(*model, full, *tp);
//
// Megatron's partitions: a column-parallel weight [out, in] is split along
// dim 0, a row-parallel one along dim 1, a vocabulary-parallel embedding
// along dim 0; with stride s (a fused [gate; up] weight: s = 2) the dim is cut
// into size x s chunks and rank r keeps chunks r, r + size, ... in order, so
// each rank holds matching halves (Megatron's _initialize_affine_weight_cpu).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qk/dist/process_group.h"
#include "qk/nn/module.h"

namespace qk::parallel {

struct ShardSpec {
  int64_t dim = 0;
  int64_t stride = 1;
};

// Rank `rank` of `size`'s shard of `full` (a contiguous copy; the dim must
// divide into size x stride chunks).
Tensor shard_tensor(const Tensor& full, const ShardSpec& spec, int rank, int size);
// The full tensor from every rank's shard, in rank order.
Tensor unshard_tensor(const std::vector<Tensor>& shards, const ShardSpec& spec);

// Implemented by modules that hold tensor-parallel shards (the layers of
// qk/parallel/layers.h, tensor-parallel models).
class TensorParallelModule {
 public:
  virtual ~TensorParallelModule() = default;
  // Parameter names (relative to the module) that are shards, and how; the
  // others are replicated on every rank of the group.
  virtual std::vector<std::pair<std::string, ShardSpec>> shard_specs() const = 0;
  // Replicated parameters whose gradients are partial on each rank and must
  // be summed over the group before the optimizer step: those that act on a
  // sequence shard under sequence parallelism (norms, row-parallel biases)
  // and q/k layer norms applied to this rank's heads only (Megatron's
  // _allreduce_layernorm_grads in finalize_model_grads).
  virtual std::vector<std::string> partial_gradient_parameters() const { return {}; }
};

// Dotted parameter name -> its split, for every sharded parameter of `model`.
using ShardSpecs = std::map<std::string, ShardSpec>;
ShardSpecs tensor_parallel_shard_specs(nn::Module& model);
// The dotted names of every partial-gradient parameter of `model`.
std::vector<std::string> partial_gradient_parameter_names(nn::Module& model);

// Collective over tp: the full tensors of a by-name map whose sharded entries
// follow `specs` (parameters, their gradients, optimizer state by parameter
// name); replicated entries are returned as they are.
nn::NamedTensors gather_shards(const nn::NamedTensors& local, const ShardSpecs& specs, dist::ProcessGroup& tp);
// This rank's shards of full tensors (no communication).
nn::NamedTensors shard_full(const nn::NamedTensors& full, const ShardSpecs& specs, int rank, int size);

// The model's state dict with every shard gathered (collective over tp).
nn::NamedTensors full_state_dict(nn::Module& model, dist::ProcessGroup& tp);
// Loads a full (unsplit) state dict: each rank copies in its shards.
// strict as nn::Module::load_state_dict; a shape mismatch names the key.
void load_full_state_dict(nn::Module& model, const nn::NamedTensors& full, dist::ProcessGroup& tp, bool strict = true);
// Sums the gradients of the partial-gradient parameters over tp, in one
// all-reduce (Megatron's _allreduce_layernorm_grads). Call after backward,
// before clipping and the step. Collective.
void all_reduce_partial_gradients(nn::Module& model, dist::ProcessGroup& tp);
// The L2 norm of the whole model's gradient (every parameter once: shards
// summed over tp, replicated parameters counted once), as Megatron's
// get_grad_norm_fp32 over the model-parallel group. Collective.
double tensor_parallel_grad_norm(nn::Module& model, dist::ProcessGroup& tp);

}  // namespace qk::parallel
