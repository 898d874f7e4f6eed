// Checkpoints under expert parallelism: each expert-parallel rank's routed
// experts (weights, optimizer entries and their metadata, by name) sent to
// expert-parallel rank 0, so the checkpoint holds every expert whole and
// does not depend on the expert-parallel size; loading picks each rank's own.
#include <nlohmann/json.hpp>

#include "checkpoint_pipeline.h"
#include "qk/base/error.h"

namespace qk::train {

namespace {

using nlohmann::json;

// "KEY/NAME" -> NAME ("" for keys without a parameter).
std::string param_of(const std::string& key) {
  const size_t slash = key.find('/');
  return slash == std::string::npos ? std::string() : key.substr(slash + 1);
}

std::string group_key(size_t g) { return "group." + std::to_string(g) + ".num_params"; }

}  // namespace

void gather_expert_parallel(TrainTensors& t, const parallel::ExpertParallel& ep,
                            const optim::MixedPrecisionOptimizer* opt) {
  if (!ep.active()) return;
  dist::ProcessGroup& group = *ep.ep;
  if (group.rank() != 0) {
    json h;
    std::vector<Tensor> payload;
    json entries = json::array();
    for (const auto& [name, x] : t.weights) {
      if (!ep.is_expert(name)) continue;
      add_parcel_entry(entries, payload, 0, name, x);
    }
    json metadata = json::object();
    std::vector<int64_t> counts;
    if (t.optimizer) {
      for (const auto& [key, x] : t.optimizer->tensors) {
        if (!ep.is_expert(param_of(key))) continue;
        add_parcel_entry(entries, payload, 1, key, x);
      }
      for (const auto& [k, v] : t.optimizer->metadata)
        if (ep.is_expert(param_of(k))) metadata[k] = v;
      // This rank's experts per optimizer group, for the group sizes.
      QK_CHECK(opt != nullptr, "gather_expert_parallel: the optimizer's groups are needed with its state");
      for (const optim::ParamGroupSpec& g : opt->groups()) {
        int64_t n = 0;
        for (const auto& [name, p] : g.params) n += ep.is_expert(name);
        counts.push_back(n);
      }
    }
    h["entries"] = entries;
    h["metadata"] = metadata;
    h["group_counts"] = counts;
    send_checkpoint_parcel(group, h, payload);
    return;
  }
  for (int r = 1; r < group.size(); ++r) {
    const json h = recv_checkpoint_parcel(group, r, t, "gather_expert_parallel: expert-parallel rank");
    if (!t.optimizer) continue;
    for (const auto& [k, v] : h.at("metadata").items()) t.optimizer->metadata[k] = v.get<std::string>();
    const std::vector<int64_t> counts = h.at("group_counts").get<std::vector<int64_t>>();
    for (size_t g = 0; g < counts.size(); ++g) {
      const auto it = t.optimizer->metadata.find(group_key(g));
      if (it == t.optimizer->metadata.end()) continue;
      it->second = std::to_string(std::stoll(it->second) + counts[g]);
    }
  }
}

std::vector<int64_t> gathered_group_sizes(const optim::MixedPrecisionOptimizer& opt, const nn::Metadata& metadata,
                                          const std::string& leave_out) {
  std::vector<int64_t> sizes = optimizer_group_sizes(opt, leave_out);
  const std::vector<int64_t> own = optimizer_group_sizes(opt);
  for (size_t g = 0; g < sizes.size(); ++g)
    if (const auto it = metadata.find(group_key(g)); it != metadata.end())
      sizes[g] += std::stoll(it->second) - own[g];  // what other ranks' experts added
  return sizes;
}

}  // namespace qk::train
