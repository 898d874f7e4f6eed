// Checkpoints under pipeline parallelism: the stages' whole tensors
// gathered on stage 0 (written once, by unsplit name), and each stage's
// share picked out of them when loading, so a checkpoint does not depend
// on the pipeline layout.
#include "checkpoint_pipeline.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "qk/base/error.h"
#include "qk/tensor/generator.h"

namespace qk::train {

namespace {

using nlohmann::json;

// "KEY/NAME" -> NAME for optimizer entries (and metadata "step/NAME"); the
// key itself for weights.
std::string param_name(const std::string& key, bool optimizer) {
  if (!optimizer) return key;
  const size_t slash = key.find('/');
  return slash == std::string::npos ? std::string() : key.substr(slash + 1);
}

std::string with_param(const std::string& key, const std::string& name, bool optimizer) {
  return optimizer ? key.substr(0, key.find('/') + 1) + name : name;
}

template <typename Map>
void drop_param(Map& m, const std::string& name, bool optimizer) {
  for (auto it = m.begin(); it != m.end();) it = param_name(it->first, optimizer) == name ? m.erase(it) : std::next(it);
}

json rng_json(const std::vector<RngState>& v) {
  json a = json::array();
  for (const RngState& r : v) a.push_back({r.seed, r.offset});
  return a;
}

void append_rng(std::vector<RngState>& out, const json& a) {
  for (const json& r : a) out.push_back({r.at(0).get<uint64_t>(), r.at(1).get<uint64_t>()});
}

}  // namespace

void add_parcel_entry(json& entries, std::vector<Tensor>& payload, int kind, const std::string& name,
                      const Tensor& x) {
  entries.push_back({kind, name, static_cast<int>(x.dtype()), x.shape()});
  payload.push_back(x.contiguous());
}

void send_checkpoint_parcel(dist::ProcessGroup& group, const json& header, const std::vector<Tensor>& payload) {
  const std::string text = header.dump();
  Tensor bytes = empty({static_cast<int64_t>(text.size())}, TensorOptions(DType::u8));
  std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
  group.send(from_vector<int64_t>({static_cast<int64_t>(text.size())}, {1}), 0);
  group.send(bytes, 0);
  for (const Tensor& x : payload) group.send(x, 0);
}

json recv_checkpoint_parcel(dist::ProcessGroup& group, int from, TrainTensors& t, const char* who) {
  Tensor size = empty({1}, TensorOptions(DType::i64));
  group.recv(size, from);
  Tensor bytes = empty({size.data_ptr<int64_t>()[0]}, TensorOptions(DType::u8));
  group.recv(bytes, from);
  json h = json::parse(std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                                   static_cast<size_t>(bytes.numel())));
  for (const json& e : h.at("entries")) {
    Tensor x = empty(e.at(3).get<Shape>(), TensorOptions(static_cast<DType>(e.at(2).get<int>())));
    group.recv(x, from);
    const std::string name = e.at(1).get<std::string>();
    if (e.at(0).get<int>() == 0) {
      t.weights[name] = x;
    } else {
      QK_CHECK(t.optimizer.has_value(), who, " ", from, " sent optimizer state but rank 0 has none");
      t.optimizer->tensors[name] = x;
    }
  }
  return h;
}

std::vector<int64_t> optimizer_group_sizes(const optim::MixedPrecisionOptimizer& opt, const std::string& leave_out) {
  std::vector<int64_t> n;
  for (const optim::ParamGroupSpec& g : opt.groups()) {
    int64_t k = 0;
    for (const auto& [name, p] : g.params) k += name != leave_out;
    n.push_back(k);
  }
  return n;
}

void set_group_sizes(nn::Metadata& metadata, const std::vector<int64_t>& sizes) {
  for (size_t g = 0; g < sizes.size(); ++g) {
    const std::string key = "group." + std::to_string(g) + ".num_params";
    if (metadata.count(key)) metadata[key] = std::to_string(sizes[g]);
  }
}

void gather_pipeline_stages(TrainTensors& t, CheckpointMeta& m, const parallel::PipelineParallel& pp,
                            const optim::MixedPrecisionOptimizer* opt) {
  if (!pp.active()) return;
  // Each group's parameters over the stages (the tied copy once), as the
  // unsplit model's optimizer counts them.
  std::vector<int64_t> sizes;
  if (opt)
    sizes = t.optimizer ? gathered_group_sizes(*opt, t.optimizer->metadata, pp.tied_copy ? pp.tied_parameter : "")
                        : optimizer_group_sizes(*opt, pp.tied_copy ? pp.tied_parameter : std::string());
  if (pp.tied_copy) {  // the first stage's word embedding is the checkpoint's
    drop_param(t.weights, pp.tied_parameter, false);
    if (t.optimizer) {
      drop_param(t.optimizer->tensors, pp.tied_parameter, true);
      drop_param(t.optimizer->metadata, pp.tied_parameter, true);
    }
  }
  const Generator& g = default_generator();
  dist::ProcessGroup& group = *pp.group;
  if (group.rank() != 0) {
    json h;
    h["rng"] = rng_json({{g.seed(), g.offset()}});
    h["tp_rng"] = rng_json(m.tp_rng);
    h["metadata"] = t.optimizer ? json(t.optimizer->metadata) : json::object();
    std::vector<Tensor> payload;
    json entries = json::array();
    for (const auto& [name, x] : t.weights) add_parcel_entry(entries, payload, 0, name, x);
    if (t.optimizer)
      for (const auto& [key, x] : t.optimizer->tensors) add_parcel_entry(entries, payload, 1, key, x);
    h["entries"] = entries;
    h["group_sizes"] = sizes;
    send_checkpoint_parcel(group, h, payload);
    return;
  }
  m.pp_rng = {{g.seed(), g.offset()}};
  for (int stage = 1; stage < group.size(); ++stage) {
    const json h = recv_checkpoint_parcel(group, stage, t, "gather_pipeline_stages: stage");
    append_rng(m.pp_rng, h.at("rng"));
    append_rng(m.tp_rng, h.at("tp_rng"));
    if (t.optimizer)
      for (const auto& [k, v] : h.at("metadata").items()) t.optimizer->metadata.emplace(k, v.get<std::string>());
    const std::vector<int64_t> theirs = h.at("group_sizes").get<std::vector<int64_t>>();
    QK_CHECK(theirs.size() == sizes.size(), "gather_pipeline_stages: stage ", stage, " has ", theirs.size(),
             " parameter groups, stage 0 has ", sizes.size());
    for (size_t g = 0; g < sizes.size(); ++g) sizes[g] += theirs[g];
  }
  if (t.optimizer) set_group_sizes(t.optimizer->metadata, sizes);
}

std::set<std::string> stage_parameter_names(const nn::Module& model) {
  std::set<std::string> out;
  for (const auto& item : model.state_dict()) out.insert(item.key());
  return out;
}

nn::TensorMap stage_entries(const nn::TensorMap& whole, const std::set<std::string>& names,
                            const parallel::PipelineParallel& pp, bool optimizer) {
  nn::TensorMap out;
  for (const auto& [k, x] : whole) {
    const std::string p = param_name(k, optimizer);
    if (names.count(p)) out.emplace(k, x);
    if (pp.tied_copy && p == pp.tied_source) out.emplace(with_param(k, pp.tied_parameter, optimizer), x);
  }
  return out;
}

nn::Metadata stage_metadata(const nn::Metadata& whole, const std::set<std::string>& names,
                            const parallel::PipelineParallel& pp) {
  nn::Metadata out;
  for (const auto& [k, v] : whole) {
    if (k.find('/') == std::string::npos) {  // the optimizer's own entries (groups, format)
      out.emplace(k, v);
      continue;
    }
    const std::string p = param_name(k, true);
    if (names.count(p)) out.emplace(k, v);
    if (pp.tied_copy && p == pp.tied_source) out.emplace(with_param(k, pp.tied_parameter, true), v);
  }
  return out;
}

}  // namespace qk::train
