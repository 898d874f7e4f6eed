// Model parallelism as the training loop sees it (what Megatron's training.py
// asks of mpu): the tensor-parallel group and which parameters are shards of
// it, for the optimizer's gradient norm and inf check, for the gradients that
// are partial on each rank, for checkpoints that store whole tensors by name,
// and for the per-rank dropout generator a resume must restore.
//
//   auto ps = qk::parallel::ParallelState::create(qk::dist::group(), sizes);
//   auto tp = ps->group(qk::parallel::GroupKind::tp);
//   qk::transformer::GPTModel model(config, tp);
//   qk::parallel::ModelParallel mp;
//   mp.tp = qk::parallel::tensor_parallel_of(*model, tp.get(), model->tensor_parallel_generator());
//   mp.world = &qk::dist::group();
//   qk::optim::MixedPrecisionOptimizer opt(qk::optim::megatron_param_groups(*model), ...);
//   opt.set_tensor_parallel(mp.tp);           // TP-aware norm, inf check, partial gradients
//   qk::train::Trainer trainer(*model, opt, sched, o, {.group = ps->group(qk::parallel::GroupKind::dp).get()}, mp);
//
// Without model parallelism every member is empty and nothing changes.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "qk/dist/process_group.h"
#include "qk/nn/module.h"
#include "qk/parallel/sharding.h"
#include "qk/tensor/generator.h"

namespace qk::parallel {

struct TensorParallel {
  dist::ProcessGroup* group = nullptr;         // null: no tensor parallelism
  parallel::ShardSpecs shard_specs;            // parameter name -> how it is split over the group
  std::vector<std::string> partial_gradients;  // replicated parameters whose gradients are summed over the group
  Generator* generator = nullptr;              // per-rank dropout generator (null: none)

  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  bool active() const { return size() > 1; }
  bool is_shard(const std::string& name) const { return shard_specs.count(name) > 0; }
};

// The shards and partial-gradient parameters of a model built from
// qk/parallel layers (parallel::TensorParallelModule), over `group`.
TensorParallel tensor_parallel_of(nn::Module& model, dist::ProcessGroup* group, Generator* generator = nullptr);

// Pipeline parallelism as the optimizer and checkpoints see it: this rank
// holds one stage's parameters (by their unsplit names). The gradient norm
// and inf check sum over `group`; with tied embeddings the first stage's
// word embedding and the last stage's copy of it (tied_parameter) have
// their gradients summed over `embedding` before the step. The copy
// (tied_copy) is counted once in the norm (on the first stage), left out
// of checkpoints and loaded from tied_source.
struct PipelineParallel {
  dist::ProcessGroup* group = nullptr;      // the stages of this rank's pipeline (null: one stage)
  dist::ProcessGroup* embedding = nullptr;  // first and last stage (null: not one of them)
  std::string tied_parameter;               // this rank's tied weight ("": none)
  bool tied_copy = false;                   // tied_parameter is the last stage's copy
  std::string tied_source = "embedding.word_embeddings.weight";
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  bool active() const { return size() > 1; }
};

// Expert parallelism (Megatron's MoE): the routed experts' parameters
// (`params`, by name) are split over the expert-parallel group `ep` (each
// rank holds other experts) and replicated over `expert_dp`, the
// expert-data-parallel ranks (EP is carved out of the data-parallel group:
// dp = ep x expert_dp). Their gradients are summed over expert_dp and
// divided by the data-parallel size (Megatron's expert gradient scaling), so
// they equal an unsplit run's; the gradient norm and inf check count each
// expert once (summed over ep); checkpoints gather them over ep by name.
struct ExpertParallel {
  dist::ProcessGroup* ep = nullptr;         // null: no expert parallelism
  dist::ProcessGroup* expert_dp = nullptr;  // null: one expert-data-parallel rank
  std::set<std::string> params;             // the expert parameters of this rank
  int size() const { return ep ? ep->size() : 1; }
  int rank() const { return ep ? ep->rank() : 0; }
  int expert_dp_rank() const { return expert_dp ? expert_dp->rank() : 0; }
  int expert_dp_size() const { return expert_dp ? expert_dp->size() : 1; }
  bool active() const { return size() > 1; }
  bool is_expert(const std::string& name) const { return params.count(name) > 0; }
};

// The ranks of a job beyond its data-parallel group.
struct ModelParallel {
  TensorParallel tp;
  PipelineParallel pp;
  ExpertParallel ep;
  // Every rank of the job (null: the data-parallel group is the whole job).
  // All ranks agree on the resumed iteration and on exit decisions over it,
  // and its rank 0 writes checkpoints, metrics and curves.
  dist::ProcessGroup* world = nullptr;
};

// The job's ranks: `mp.world`, else the data-parallel group (null: one rank).
inline dist::ProcessGroup* job_group(const ModelParallel& mp, dist::ProcessGroup* dp) {
  return mp.world ? mp.world : dp;
}

}  // namespace qk::parallel
