// ParallelState: one split of the world group per kind of group.
#include "qk/parallel/parallel_state.h"

#include "qk/base/error.h"

namespace qk::parallel {

std::shared_ptr<ParallelState> ParallelState::create(dist::ProcessGroup& world, const ParallelSizes& sizes) {
  std::shared_ptr<ParallelState> ps(new ParallelState);
  ps->layout_ = RankLayout::make(world.size(), sizes);
  ps->global_rank_ = world.rank();
  for (GroupKind k : kAllGroupKinds) {
    // The groups of a kind are disjoint: the index of ours is the color, our
    // place in it the key, so qccl orders members as Megatron lists them.
    const auto& groups = ps->layout_.groups(k);
    int color = -1, key = 0;
    for (size_t g = 0; g < groups.size() && color < 0; ++g)
      for (size_t i = 0; i < groups[g].size(); ++i)
        if (groups[g][i] == ps->global_rank_) {
          color = static_cast<int>(g);
          key = static_cast<int>(i);
        }
    ps->groups_[static_cast<size_t>(k)] = world.split(color, key, group_kind_name(k));
  }
  return ps;
}

dist::ProcessGroup& ParallelState::require(GroupKind k) const {
  const auto& g = group(k);
  QK_CHECK(g != nullptr, "ParallelState: rank ", global_rank_, " is in no ", group_kind_name(k), " group");
  return *g;
}

}  // namespace qk::parallel
