#include "qk/optim/optimizer.h"

#include <cstdio>
#include <cstdlib>

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/nn/safetensors.h"
#include "qk/tensor/ops/view.h"

namespace qk::optim {

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  QK_CHECK_INDEX(group < groups_.size(), "optimizer: parameter group ", group, " out of range (",
                 groups_.size(), " groups)");
  return groups_[group];
}

std::vector<Tensor> Optimizer::all_params() const {
  std::vector<Tensor> out;
  for (const auto& g : groups_) out.insert(out.end(), g.begin(), g.end());
  return out;
}

void Optimizer::add_params(std::vector<Tensor> params, const char* name) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    QK_CHECK(p.defined(), name, ": parameter ", i, " of group ", groups_.size(), " is undefined");
    QK_CHECK_TYPE(is_floating(p.dtype()), name, ": parameter ", i, " of group ", groups_.size(),
                  " has dtype ", dtype_name(p.dtype()), "; only floating tensors can be optimized");
    QK_CHECK(p.is_leaf(), name, ": parameter ", i, " of group ", groups_.size(),
             " is not a leaf tensor; optimize the leaves (e.g. module parameters), not results");
    bool dup = false;
    for (const auto& g : groups_)
      for (const auto& q : g) dup = dup || q.is_same(p);
    for (size_t j = 0; j < i; ++j) dup = dup || params[j].is_same(p);
    QK_CHECK(!dup, name, ": a parameter of shape ", shape_str(p.shape()),
             " appears twice (in one group or in two); each parameter may be optimized once");
  }
  offsets_.push_back(state_.size());
  state_.resize(state_.size() + params.size());
  groups_.push_back(std::move(params));
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const auto& g : groups_) {
    for (const auto& p : g) {
      if (!p.grad().defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        NoGradGuard ng;
        Tensor(p.grad()).zero_();
      }
    }
  }
}

Tensor Optimizer::kernel_grad_for(const Tensor& p, const char* name) {
  Tensor g = p.grad();
  if (!g.defined()) return g;
  QK_CHECK(g.shape() == p.shape(), name, ": gradient of shape ", shape_str(g.shape()),
           " does not match its parameter's shape ", shape_str(p.shape()));
  QK_CHECK_DEVICE(g.device() == p.device(), name, ": gradient on ", g.device().str(),
                  " but its parameter is on ", p.device().str());
  QK_CHECK_TYPE(p.dtype() == DType::f32 || p.dtype() == DType::f64, name,
                ": parameters must be f32 or f64 (got ", dtype_name(p.dtype()),
                "); keep f32 master weights for reduced-precision training");
  QK_CHECK(p.is_contiguous(), name, ": parameter of shape ", shape_str(p.shape()),
           " is not contiguous; parameters must be contiguous for the fused update");
  if (g.dtype() != p.dtype()) g = ops::cast(g, p.dtype());
  if (!g.is_contiguous()) g = ops::contiguous(g);
  return g;
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState s;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string pre = "param_groups." + std::to_string(g) + ".";
    s.scalars[pre + "num_params"] = static_cast<double>(groups_[g].size());
    for (const auto& [k, v] : group_hparams(g)) s.scalars[pre + k] = v;
  }
  for (size_t i = 0; i < state_.size(); ++i) {
    const ParamState& ps = state_[i];
    if (ps.tensors.empty() && ps.step == 0) continue;
    const std::string pre = "state." + std::to_string(i) + ".";
    s.scalars[pre + "step"] = static_cast<double>(ps.step);
    for (const auto& [k, t] : ps.tensors) s.tensors[pre + k] = t.detach();
  }
  return s;
}

namespace {
// "state.12.exp_avg" -> (12, "exp_avg"); false when the key has another form.
bool parse_state_key(const std::string& key, size_t* index, std::string* name) {
  if (key.rfind("state.", 0) != 0) return false;
  size_t dot = key.find('.', 6);
  if (dot == std::string::npos || dot == 6 || dot + 1 == key.size()) return false;
  char* end = nullptr;
  unsigned long long i = std::strtoull(key.c_str() + 6, &end, 10);
  if (end != key.c_str() + dot) return false;
  *index = static_cast<size_t>(i);
  *name = key.substr(dot + 1);
  return true;
}
}  // namespace

void Optimizer::load_state_dict(const OptimizerState& s) {
  // Validate everything before changing anything.
  size_t saved_groups = 0;
  while (s.scalars.count("param_groups." + std::to_string(saved_groups) + ".num_params"))
    ++saved_groups;
  QK_CHECK(saved_groups == groups_.size(), "optimizer load_state_dict: the state has ", saved_groups,
           " parameter groups, this optimizer has ", groups_.size());
  std::vector<std::map<std::string, double>> hparams(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string pre = "param_groups." + std::to_string(g) + ".";
    double n = s.scalars.at(pre + "num_params");
    QK_CHECK(n == static_cast<double>(groups_[g].size()), "optimizer load_state_dict: group ", g,
             " had ", n, " parameters when saved, this optimizer's has ", groups_[g].size());
    for (const auto& [k, v] : s.scalars)
      if (k.rfind(pre, 0) == 0 && k != pre + "num_params") hparams[g][k.substr(pre.size())] = v;
  }
  std::vector<Tensor> flat = all_params();
  std::vector<ParamState> next(state_.size());
  for (const auto& [k, v] : s.scalars) {
    if (k.rfind("param_groups.", 0) == 0) continue;
    size_t i;
    std::string name;
    QK_CHECK(parse_state_key(k, &i, &name) && name == "step", "optimizer load_state_dict: unexpected scalar '", k, "'");
    QK_CHECK(i < flat.size(), "optimizer load_state_dict: '", k, "' refers to parameter ", i,
             " but there are only ", flat.size());
    next[i].step = static_cast<int64_t>(v);
  }
  for (const auto& [k, t] : s.tensors) {
    size_t i;
    std::string name;
    QK_CHECK(parse_state_key(k, &i, &name), "optimizer load_state_dict: unexpected tensor '", k, "'");
    QK_CHECK(i < flat.size(), "optimizer load_state_dict: '", k, "' refers to parameter ", i,
             " but there are only ", flat.size());
    const Tensor& p = flat[i];
    QK_CHECK(t.shape() == p.shape(), "optimizer load_state_dict: '", k, "' has shape ",
             shape_str(t.shape()), " but parameter ", i, " has shape ", shape_str(p.shape()),
             "; was the state saved from a different model?");
    // Fresh storage in the parameter's dtype and device: the state must not alias the source.
    Tensor c = ops::clone(ops::cast(ops::to_device(t, p.device()), p.dtype()));
    next[i].tensors[name] = c;
  }
  for (size_t g = 0; g < groups_.size(); ++g) set_group_hparams(g, hparams[g]);
  state_ = std::move(next);
}

void save(const Optimizer& opt, const std::string& path) {
  OptimizerState s = opt.state_dict();
  nn::Metadata meta;
  char buf[40];
  for (const auto& [k, v] : s.scalars) {
    std::snprintf(buf, sizeof buf, "%.17g", v);  // round-trips every double exactly
    meta[k] = buf;
  }
  meta["format"] = "qk.optim.v1";
  nn::save_safetensors(path, nn::TensorMap(s.tensors.begin(), s.tensors.end()), meta);
}

void load(Optimizer& opt, const std::string& path) {
  nn::SafetensorsFile f = nn::load_safetensors(path);
  auto fmt = f.metadata.find("format");
  QK_CHECK_AS(IoError, fmt != f.metadata.end() && fmt->second == "qk.optim.v1", "'", path,
              "' is not an optimizer state saved by qk::optim::save (no format=qk.optim.v1 metadata)");
  OptimizerState s;
  s.tensors.insert(f.tensors.begin(), f.tensors.end());
  for (const auto& [k, v] : f.metadata) {
    if (k == "format") continue;
    char* end = nullptr;
    double d = std::strtod(v.c_str(), &end);
    QK_CHECK_AS(IoError, end && *end == '\0' && !v.empty(), "'", path, "': metadata '", k,
                "' = '", v, "' is not a number");
    s.scalars[k] = d;
  }
  opt.load_state_dict(s);
}

}  // namespace qk::optim
