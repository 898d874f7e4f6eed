// Megatron's parallel_state as a value: this rank's process group of every
// kind (tensor, data, pipeline, context, expert, model, embedding, ...),
// built once from the world group. Nothing global: pass it (or the groups it
// hands out) to what needs it.
//
//   qk::dist::init();
//   qk::parallel::ParallelSizes sizes;
//   sizes.tensor_model_parallel_size = 2;
//   auto ps = qk::parallel::ParallelState::create(qk::dist::group(), sizes);   // collective
//   if (qk::dist::rank() == 0) QK_INFO("{}", ps->layout().format());
//   auto tp = ps->group(qk::parallel::GroupKind::tp);     // std::shared_ptr<dist::ProcessGroup>
//   ps->tensor_model_parallel_rank();  ps->data_parallel_size();
//
// Every group is its own qccl communicator (made with qcclCommSplit through
// ProcessGroup::split), so calls on the tensor-parallel group never queue
// behind a data-parallel all-reduce in flight.
#pragma once

#include <array>
#include <memory>

#include "qk/dist/process_group.h"
#include "qk/parallel/rank_layout.h"

namespace qk::parallel {

class ParallelState {
 public:
  // Collective over `world` (every rank passes the same sizes): validates
  // the layout (ValueError naming the flags, before any group is made) and
  // splits `world` once per group kind. The groups do not need `world`
  // afterwards.
  static std::shared_ptr<ParallelState> create(dist::ProcessGroup& world, const ParallelSizes& sizes);

  const RankLayout& layout() const { return layout_; }
  int global_rank() const { return global_rank_; }

  // This rank's group of a kind; null where it is in none (the embedding
  // group of a middle pipeline stage).
  const std::shared_ptr<dist::ProcessGroup>& group(GroupKind k) const { return groups_[static_cast<size_t>(k)]; }
  // The group, or a ValueError naming it when this rank has none.
  dist::ProcessGroup& require(GroupKind k) const;

  // Megatron's get_*_rank / get_*_world_size.
  int tensor_model_parallel_rank() const { return rank_in(GroupKind::tp); }
  int tensor_model_parallel_size() const { return layout_.tensor_model_parallel_size(); }
  int pipeline_model_parallel_rank() const { return rank_in(GroupKind::pp); }
  int pipeline_model_parallel_size() const { return layout_.pipeline_model_parallel_size(); }
  int data_parallel_rank() const { return rank_in(GroupKind::dp); }
  int data_parallel_size() const { return layout_.data_parallel_size(); }
  int context_parallel_rank() const { return rank_in(GroupKind::cp); }
  int expert_model_parallel_rank() const { return rank_in(GroupKind::ep); }
  int expert_model_parallel_size() const { return layout_.expert_model_parallel_size(); }
  int expert_data_parallel_rank() const { return rank_in(GroupKind::expert_dp); }
  bool is_pipeline_first_stage() const { return pipeline_model_parallel_rank() == 0; }
  bool is_pipeline_last_stage() const { return pipeline_model_parallel_rank() == pipeline_model_parallel_size() - 1; }

 private:
  ParallelState() = default;
  int rank_in(GroupKind k) const { return layout_.rank_in(k, global_rank_); }

  RankLayout layout_;
  int global_rank_ = 0;
  std::array<std::shared_ptr<dist::ProcessGroup>, std::size(kAllGroupKinds)> groups_;
};

}  // namespace qk::parallel
