// Checkpoints under expert parallelism: each expert-parallel rank's routed
// experts (weights, optimizer entries and their metadata, by name) sent to
// expert-parallel rank 0, so the checkpoint holds every expert whole and
// does not depend on the expert-parallel size; loading picks each rank's own.
#include <cstring>
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

void gather_expert_parallel(TrainTensors& t, const ExpertParallel& ep, const MixedPrecisionOptimizer* opt) {
  if (!ep.active()) return;
  dist::ProcessGroup& group = *ep.ep;
  if (group.rank() != 0) {
    json h;
    std::vector<Tensor> payload;
    json entries = json::array();
    for (const auto& [name, x] : t.weights) {
      if (!ep.is_expert(name)) continue;
      entries.push_back({0, name, static_cast<int>(x.dtype()), x.shape()});
      payload.push_back(x.contiguous());
    }
    json metadata = json::object();
    std::vector<int64_t> counts;
    if (t.optimizer) {
      for (const auto& [key, x] : t.optimizer->tensors) {
        if (!ep.is_expert(param_of(key))) continue;
        entries.push_back({1, key, static_cast<int>(x.dtype()), x.shape()});
        payload.push_back(x.contiguous());
      }
      for (const auto& [k, v] : t.optimizer->metadata)
        if (ep.is_expert(param_of(k))) metadata[k] = v;
      // This rank's experts per optimizer group, for the group sizes.
      QK_CHECK(opt != nullptr, "gather_expert_parallel: the optimizer's groups are needed with its state");
      for (const ParamGroupSpec& g : opt->groups()) {
        int64_t n = 0;
        for (const auto& [name, p] : g.params) n += ep.is_expert(name);
        counts.push_back(n);
      }
    }
    h["entries"] = entries;
    h["metadata"] = metadata;
    h["group_counts"] = counts;
    const std::string text = h.dump();
    Tensor bytes = empty({static_cast<int64_t>(text.size())}, TensorOptions(DType::u8));
    std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
    group.send(from_vector<int64_t>({static_cast<int64_t>(text.size())}, {1}), 0);
    group.send(bytes, 0);
    for (const Tensor& x : payload) group.send(x, 0);
    return;
  }
  for (int r = 1; r < group.size(); ++r) {
    Tensor size = empty({1}, TensorOptions(DType::i64));
    group.recv(size, r);
    Tensor bytes = empty({size.data_ptr<int64_t>()[0]}, TensorOptions(DType::u8));
    group.recv(bytes, r);
    const json h = json::parse(std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                                           static_cast<size_t>(bytes.numel())));
    for (const json& e : h.at("entries")) {
      Tensor x = empty(e.at(3).get<Shape>(), TensorOptions(static_cast<DType>(e.at(2).get<int>())));
      group.recv(x, r);
      const std::string name = e.at(1).get<std::string>();
      if (e.at(0).get<int>() == 0) {
        t.weights[name] = x;
      } else {
        QK_CHECK(t.optimizer.has_value(), "gather_expert_parallel: expert-parallel rank ", r,
                 " sent optimizer state but rank 0 has none");
        t.optimizer->tensors[name] = x;
      }
    }
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

std::vector<int64_t> gathered_group_sizes(const MixedPrecisionOptimizer& opt, const nn::Metadata& metadata,
                                          const std::string& leave_out) {
  std::vector<int64_t> sizes = optimizer_group_sizes(opt, leave_out);
  const std::vector<int64_t> own = optimizer_group_sizes(opt);
  for (size_t g = 0; g < sizes.size(); ++g)
    if (const auto it = metadata.find(group_key(g)); it != metadata.end())
      sizes[g] += std::stoll(it->second) - own[g];  // what other ranks' experts added
  return sizes;
}

}  // namespace qk::train
