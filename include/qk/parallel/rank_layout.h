// Megatron's rank grid as arithmetic: from the world size and the parallel
// sizes, which global ranks form each tensor-, data-, pipeline-, context- and
// expert-parallel group. No communication; ParallelState
// (qk/parallel/parallel_state.h) builds the process groups from it.
//
//   qk::parallel::ParallelSizes s;
//   s.tensor_model_parallel_size = 2;  s.pipeline_model_parallel_size = 2;
//   auto layout = qk::parallel::RankLayout::make(/*world_size=*/8, s);   // ValueError naming the flag
//   layout.data_parallel_size();                          // 2
//   layout.groups(GroupKind::tp);                         // {{0,1},{2,3},{4,5},{6,7}}
//   layout.groups(GroupKind::pp);                         // {{0,4},{1,5},{2,6},{3,7}}
//   layout.group_of(GroupKind::dp, 5);                    // {5, 7}
//   std::cout << layout.format();                         // the table printed once at start
//
// Rank order is Megatron-core's RankGenerator (megatron/core/parallel_state.py)
// with order "tp-cp-ep-dp-pp": tensor-parallel ranks are adjacent, pipeline
// stages farthest apart. Dense groups come from a generator over
// tp x cp x dp x pp (ep 1); expert groups from one over
// expert-tp x ep x expert-dp x pp (cp 1), as initialize_model_parallel does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qk::parallel {

// The sizes Megatron's flags set (--tensor-model-parallel-size, ...).
struct ParallelSizes {
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  // Only 1: context parallelism is not implemented (a larger value is a ValueError).
  int context_parallel_size = 1;
  int expert_model_parallel_size = 1;
  // --expert-tensor-parallel-size; 0: the tensor-parallel size (Megatron's None).
  int expert_tensor_parallel_size = 0;
  // Megatron's `order`; --use-tp-pp-dp-mapping gives "tp-cp-ep-pp-dp".
  std::string order = "tp-cp-ep-dp-pp";
};

// Every kind of group Megatron's initialize_model_parallel makes.
enum class GroupKind {
  dp_cp,               // data parallel with context parallel ('dp-cp'): gradients of dense weights
  dp,                  // data parallel ('dp')
  cp,                  // context parallel ('cp')
  mp,                  // model parallel: tensor x pipeline ('tp-pp')
  tp,                  // tensor model parallel ('tp')
  pp,                  // pipeline model parallel ('pp')
  embedding,           // first and last stage of each pipeline (tied embeddings)
  position_embedding,  // first stage of each pipeline
  tp_dp_cp,            // 'tp-dp-cp'
  tp_dp,               // 'tp-dp'
  tp_cp,               // 'tp-cp'
  ep,                  // expert model parallel (expert generator 'ep')
  expert_tp,           // expert tensor parallel (expert 'tp')
  expert_tp_ep,        // expert 'tp-ep'
  expert_tp_ep_pp,     // expert 'tp-ep-pp'
  expert_dp,           // expert data parallel (expert 'dp'): gradients of expert weights
};
inline constexpr GroupKind kAllGroupKinds[] = {
    GroupKind::dp_cp,     GroupKind::dp,    GroupKind::cp,       GroupKind::mp,
    GroupKind::tp,        GroupKind::pp,    GroupKind::embedding, GroupKind::position_embedding,
    GroupKind::tp_dp_cp,  GroupKind::tp_dp, GroupKind::tp_cp,    GroupKind::ep,
    GroupKind::expert_tp, GroupKind::expert_tp_ep, GroupKind::expert_tp_ep_pp, GroupKind::expert_dp};
// "dp_cp", "tp", ... (the enumerator's name).
const char* group_kind_name(GroupKind k);

// Megatron's generate_masked_orthogonal_rank_groups: the world is a grid of
// `parallel_size` (first dim fastest); each group spans the dims where `mask`
// is true and fixes the others. Groups in Megatron's order.
std::vector<std::vector<int>> masked_orthogonal_rank_groups(int world_size, const std::vector<int>& parallel_size,
                                                            const std::vector<bool>& mask);

// Megatron's RankGenerator: sizes of tp, ep, dp, pp, cp (ep or cp must be 1)
// laid out in `order` (names missing from it must have size 1).
class RankGenerator {
 public:
  RankGenerator(int tp, int ep, int dp, int pp, int cp, const std::string& order, int rank_offset = 0);
  // token: "tp", "dp-cp", "tp-ep-pp", ... (any subset of the order's names).
  std::vector<std::vector<int>> get_ranks(const std::string& token) const;
  int world_size() const { return world_size_; }

 private:
  std::vector<std::string> order_;
  std::vector<int> ordered_size_;
  int world_size_ = 1, rank_offset_ = 0;
};

class RankLayout {
 public:
  // Validates the sizes against the world (ValueError naming the flags).
  static RankLayout make(int world_size, const ParallelSizes& sizes);

  int world_size() const { return world_size_; }
  const ParallelSizes& sizes() const { return sizes_; }
  int tensor_model_parallel_size() const { return sizes_.tensor_model_parallel_size; }
  int pipeline_model_parallel_size() const { return sizes_.pipeline_model_parallel_size; }
  int context_parallel_size() const { return sizes_.context_parallel_size; }
  int expert_model_parallel_size() const { return sizes_.expert_model_parallel_size; }
  int expert_tensor_parallel_size() const { return sizes_.expert_tensor_parallel_size; }  // resolved
  int data_parallel_size() const { return data_parallel_size_; }
  int expert_data_parallel_size() const { return expert_data_parallel_size_; }

  // Every group of a kind, in Megatron's order (embedding groups: one per
  // pipeline, its first and last stage, or the one stage when pp is 1).
  const std::vector<std::vector<int>>& groups(GroupKind k) const { return groups_[static_cast<size_t>(k)]; }
  // The group of `rank`; empty where it is in none (embedding groups skip middle stages).
  std::vector<int> group_of(GroupKind k, int rank) const;
  // Its position in that group; -1 where it is in none.
  int rank_in(GroupKind k, int rank) const;

  // Human-readable: the sizes, then each kind's groups, e.g.
  //   world 8 = tp 2 x cp 1 x dp 2 x pp 2 (order tp-cp-ep-dp-pp); experts: etp 2 x ep 1 x edp 2 x pp 2
  //     tp    4 x 2  [0 1] [2 3] [4 5] [6 7]
  // (at most 32 groups per kind, then how many more).
  std::string format() const;

 private:
  int world_size_ = 1, data_parallel_size_ = 1, expert_data_parallel_size_ = 1;
  ParallelSizes sizes_;
  std::vector<std::vector<std::vector<int>>> groups_;
};

}  // namespace qk::parallel
