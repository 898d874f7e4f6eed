// Megatron's RankGenerator and the rank lists of every group.
#include "qk/parallel/rank_layout.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "qk/base/error.h"

namespace qk::parallel {

namespace {

std::vector<std::string> split_dashes(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == '-') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    }
  }
  out.push_back(cur);
  return out;
}

std::vector<int64_t> prefix_product(const std::vector<int>& a) {
  std::vector<int64_t> r{1};
  for (int v : a) r.push_back(r.back() * v);
  return r;
}

// idx with index = sum(idx[i] * stride[i]), stride the prefix product of shape.
std::vector<int64_t> decompose(int64_t index, const std::vector<int>& shape) {
  const std::vector<int64_t> stride = prefix_product(shape);
  std::vector<int64_t> idx(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) idx[i] = (index / stride[i]) % shape[i];
  return idx;
}

int64_t inner_product(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  int64_t s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

// Megatron's default_embedding_ranks / default_position_embedding_ranks.
std::vector<std::vector<int>> embedding_groups(const std::vector<std::vector<int>>& pp_groups, bool position) {
  std::vector<std::vector<int>> out;
  for (const auto& ranks : pp_groups) {
    if (position || ranks.size() == 1)
      out.push_back({ranks.front()});
    else
      out.push_back({ranks.front(), ranks.back()});
  }
  return out;
}

}  // namespace

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::dp_cp: return "dp_cp";
    case GroupKind::dp: return "dp";
    case GroupKind::cp: return "cp";
    case GroupKind::mp: return "mp";
    case GroupKind::tp: return "tp";
    case GroupKind::pp: return "pp";
    case GroupKind::embedding: return "embedding";
    case GroupKind::position_embedding: return "position_embedding";
    case GroupKind::tp_dp_cp: return "tp_dp_cp";
    case GroupKind::tp_dp: return "tp_dp";
    case GroupKind::tp_cp: return "tp_cp";
    case GroupKind::ep: return "ep";
    case GroupKind::expert_tp: return "expert_tp";
    case GroupKind::expert_tp_ep: return "expert_tp_ep";
    case GroupKind::expert_tp_ep_pp: return "expert_tp_ep_pp";
    case GroupKind::expert_dp: return "expert_dp";
  }
  return "?";
}

std::vector<std::vector<int>> masked_orthogonal_rank_groups(int world_size, const std::vector<int>& parallel_size,
                                                            const std::vector<bool>& mask) {
  QK_CHECK(parallel_size.size() == mask.size(), "masked_orthogonal_rank_groups: ", parallel_size.size(),
           " sizes but ", mask.size(), " mask entries");
  std::vector<int> masked_shape, unmasked_shape;
  std::vector<int64_t> masked_stride, unmasked_stride;
  const std::vector<int64_t> global_stride = prefix_product(parallel_size);
  for (size_t i = 0; i < parallel_size.size(); ++i) {
    (mask[i] ? masked_shape : unmasked_shape).push_back(parallel_size[i]);
    (mask[i] ? masked_stride : unmasked_stride).push_back(global_stride[i]);
  }
  const int64_t group_size = prefix_product(masked_shape).back();
  const int64_t num_groups = world_size / group_size;
  std::vector<std::vector<int>> ranks;
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t base = inner_product(decompose(g, unmasked_shape), unmasked_stride);
    std::vector<int> group;
    for (int64_t r = 0; r < group_size; ++r)
      group.push_back(static_cast<int>(inner_product(decompose(r, masked_shape), masked_stride) + base));
    ranks.push_back(std::move(group));
  }
  return ranks;
}

RankGenerator::RankGenerator(int tp, int ep, int dp, int pp, int cp, const std::string& order, int rank_offset)
    : world_size_(tp * ep * dp * pp * cp), rank_offset_(rank_offset) {
  QK_CHECK(ep == 1 || cp == 1, "RankGenerator: expert (", ep, ") and context (", cp,
           ") parallel sizes both above 1; Megatron keeps them in separate generators");
  const std::vector<std::pair<std::string, int>> name_to_size{{"tp", tp}, {"pp", pp}, {"dp", dp}, {"ep", ep},
                                                              {"cp", cp}};
  order_ = split_dashes(order);
  for (const std::string& t : order_) {
    auto it = std::find_if(name_to_size.begin(), name_to_size.end(), [&](const auto& p) { return p.first == t; });
    QK_CHECK(it != name_to_size.end(), "parallel order '", order, "': unknown name '", t,
             "' (expected tp, cp, ep, dp and pp joined by '-')");
    QK_CHECK(std::count(order_.begin(), order_.end(), t) == 1, "parallel order '", order, "' names ", t, " twice");
  }
  for (const auto& [name, size] : name_to_size) {
    if (std::find(order_.begin(), order_.end(), name) != order_.end()) continue;
    QK_CHECK(size == 1, "parallel order '", order, "' leaves out ", name, ", whose size is ", size);
    order_.push_back(name);
  }
  for (const std::string& t : order_)
    for (const auto& [name, size] : name_to_size)
      if (name == t) ordered_size_.push_back(size);
}

std::vector<std::vector<int>> RankGenerator::get_ranks(const std::string& token) const {
  std::vector<bool> mask(order_.size(), false);
  for (const std::string& t : split_dashes(token)) {
    auto it = std::find(order_.begin(), order_.end(), t);
    QK_CHECK(it != order_.end(), "RankGenerator::get_ranks: unknown name '", t, "' in '", token, "'");
    mask[it - order_.begin()] = true;
  }
  auto ranks = masked_orthogonal_rank_groups(world_size_, ordered_size_, mask);
  for (auto& g : ranks)
    for (int& r : g) r += rank_offset_;
  return ranks;
}

RankLayout RankLayout::make(int world_size, const ParallelSizes& s) {
  QK_CHECK(world_size >= 1, "parallel layout: the world size must be at least 1, got ", world_size);
  const int tp = s.tensor_model_parallel_size, pp = s.pipeline_model_parallel_size, cp = s.context_parallel_size,
            ep = s.expert_model_parallel_size;
  QK_CHECK(tp >= 1, "--tensor-model-parallel-size must be at least 1, got ", tp);
  QK_CHECK(pp >= 1, "--pipeline-model-parallel-size must be at least 1, got ", pp);
  QK_CHECK(cp >= 1, "--context-parallel-size must be at least 1, got ", cp);
  QK_CHECK(ep >= 1, "--expert-model-parallel-size must be at least 1, got ", ep);
  QK_CHECK(s.expert_tensor_parallel_size >= 0, "--expert-tensor-parallel-size must be at least 1, got ",
           s.expert_tensor_parallel_size);
  QK_CHECK(cp == 1, "--context-parallel-size ", cp,
           ": context parallelism is not implemented here; run with --context-parallel-size 1");
  const int64_t model = static_cast<int64_t>(tp) * pp * cp;
  QK_CHECK_AS(WorldSizeError, world_size % model == 0, "the world size (", world_size,
           ") is not divisible by --tensor-model-parallel-size (", tp, ") x --pipeline-model-parallel-size (", pp,
           ") x --context-parallel-size (", cp, ") = ", model, "; change the sizes or the number of ranks");
  RankLayout l;
  l.world_size_ = world_size;
  l.sizes_ = s;
  const int etp = s.expert_tensor_parallel_size > 0 ? s.expert_tensor_parallel_size : tp;
  l.sizes_.expert_tensor_parallel_size = etp;
  l.data_parallel_size_ = static_cast<int>(world_size / model);
  const int64_t expert_model = static_cast<int64_t>(etp) * ep * pp;
  QK_CHECK_AS(WorldSizeError, world_size % expert_model == 0, "the world size (", world_size,
           ") is not divisible by --expert-tensor-parallel-size (", etp, ") x --expert-model-parallel-size (", ep,
           ") x --pipeline-model-parallel-size (", pp, ") = ", expert_model,
           "; change the sizes or the number of ranks");
  l.expert_data_parallel_size_ = static_cast<int>(world_size / expert_model);

  const RankGenerator dense(tp, 1, l.data_parallel_size_, pp, cp, s.order);
  const RankGenerator expert(etp, ep, l.expert_data_parallel_size_, pp, 1, s.order);
  QK_CHECK(dense.get_ranks("pp") == expert.get_ranks("pp"), "parallel order '", s.order,
           "': the pipeline groups of the dense and the expert layers differ (with pp > 1 the order must end in "
           "pp, or the expert data-parallel size must equal the data-parallel size)");
  l.groups_.resize(std::size(kAllGroupKinds));
  auto set = [&](GroupKind k, std::vector<std::vector<int>> g) { l.groups_[static_cast<size_t>(k)] = std::move(g); };
  set(GroupKind::dp_cp, dense.get_ranks("dp-cp"));
  set(GroupKind::dp, dense.get_ranks("dp"));
  set(GroupKind::cp, dense.get_ranks("cp"));
  set(GroupKind::mp, dense.get_ranks("tp-pp"));
  set(GroupKind::tp, dense.get_ranks("tp"));
  set(GroupKind::pp, dense.get_ranks("pp"));
  set(GroupKind::embedding, embedding_groups(l.groups(GroupKind::pp), false));
  set(GroupKind::position_embedding, embedding_groups(l.groups(GroupKind::pp), true));
  set(GroupKind::tp_dp_cp, dense.get_ranks("tp-dp-cp"));
  set(GroupKind::tp_dp, dense.get_ranks("tp-dp"));
  set(GroupKind::tp_cp, dense.get_ranks("tp-cp"));
  set(GroupKind::ep, expert.get_ranks("ep"));
  set(GroupKind::expert_tp, expert.get_ranks("tp"));
  set(GroupKind::expert_tp_ep, expert.get_ranks("tp-ep"));
  set(GroupKind::expert_tp_ep_pp, expert.get_ranks("tp-ep-pp"));
  set(GroupKind::expert_dp, expert.get_ranks("dp"));
  return l;
}

std::vector<int> RankLayout::group_of(GroupKind k, int rank) const {
  for (const auto& g : groups(k))
    if (std::find(g.begin(), g.end(), rank) != g.end()) return g;
  return {};
}

int RankLayout::rank_in(GroupKind k, int rank) const {
  for (const auto& g : groups(k)) {
    auto it = std::find(g.begin(), g.end(), rank);
    if (it != g.end()) return static_cast<int>(it - g.begin());
  }
  return -1;
}

std::string RankLayout::format() const {
  constexpr size_t kMaxGroupsShown = 32;  // a large job's log stays readable
  std::ostringstream os;
  const ParallelSizes& s = sizes_;
  os << "parallel layout: world " << world_size_ << " = tp " << s.tensor_model_parallel_size << " x cp "
     << s.context_parallel_size << " x dp " << data_parallel_size_ << " x pp " << s.pipeline_model_parallel_size
     << " (order " << s.order << "); experts: etp " << s.expert_tensor_parallel_size << " x ep "
     << s.expert_model_parallel_size << " x edp " << expert_data_parallel_size_ << " x pp "
     << s.pipeline_model_parallel_size << "\n";
  for (GroupKind k : kAllGroupKinds) {
    const auto& gs = groups(k);
    os << "  " << std::left << std::setw(19) << group_kind_name(k) << std::right << std::setw(4) << gs.size()
       << " x " << std::left << std::setw(4) << (gs.empty() ? 0 : gs.front().size()) << std::right;
    for (size_t gi = 0; gi < gs.size(); ++gi) {
      if (gi == kMaxGroupsShown) {
        os << " ... (" << gs.size() - gi << " more)";
        break;
      }
      const auto& g = gs[gi];
      os << " [";
      for (size_t i = 0; i < g.size(); ++i) os << (i ? " " : "") << g[i];
      os << "]";
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace qk::parallel
