// Shards of tensor-parallel parameters: cutting full tensors, gathering
// shards, and the by-name state dicts built on them.
#include "qk/parallel/sharding.h"

#include <cmath>

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/index.h"
#include "qk/tensor/ops/view.h"

namespace qk::parallel {

namespace {

int64_t chunk_len(const Shape& full, const ShardSpec& spec, int size, const char* what) {
  QK_CHECK(spec.dim >= 0 && spec.dim < static_cast<int64_t>(full.size()) && spec.stride >= 1, what,
           ": shard dim ", spec.dim, " / stride ", spec.stride, " do not fit a tensor of shape ", shape_str(full));
  const int64_t parts = static_cast<int64_t>(size) * spec.stride;
  QK_CHECK(full[spec.dim] % parts == 0, what, ": dim ", spec.dim, " of ", shape_str(full), " does not split into ",
           size, " ranks x stride ", spec.stride);
  return full[spec.dim] / parts;
}

// Visits every module with its dotted prefix ("" for the root).
template <typename F>
void for_each_tp_module(nn::Module& model, F f) {
  for (auto& item : model.named_modules()) {
    if (auto* tpm = dynamic_cast<TensorParallelModule*>(item.value().get())) {
      const std::string prefix = item.key().empty() ? "" : item.key() + ".";
      f(prefix, *tpm);
    }
  }
}

}  // namespace

Tensor shard_tensor(const Tensor& full, const ShardSpec& spec, int rank, int size) {
  const int64_t len = chunk_len(full.shape(), spec, size, "shard_tensor");
  if (size == 1) return ops::contiguous(full);
  std::vector<Tensor> parts;
  for (int64_t j = 0; j < spec.stride; ++j)
    parts.push_back(ops::narrow(full, spec.dim, (rank + j * size) * len, len));
  return parts.size() == 1 ? ops::contiguous(parts[0]) : ops::cat(parts, spec.dim);
}

Tensor unshard_tensor(const std::vector<Tensor>& shards, const ShardSpec& spec) {
  QK_CHECK(!shards.empty(), "unshard_tensor: no shards");
  const int size = static_cast<int>(shards.size());
  if (size == 1) return shards[0];
  const Shape& s = shards[0].shape();
  QK_CHECK(spec.dim >= 0 && spec.dim < static_cast<int64_t>(s.size()) && s[spec.dim] % spec.stride == 0,
           "unshard_tensor: shard ", shape_str(s), " does not split into stride ", spec.stride, " along dim ",
           spec.dim);
  const int64_t len = s[spec.dim] / spec.stride;
  std::vector<Tensor> parts;
  for (int64_t j = 0; j < spec.stride; ++j)
    for (int r = 0; r < size; ++r) {
      QK_CHECK(shards[r].shape() == s, "unshard_tensor: shard ", r, " is ", shape_str(shards[r].shape()),
               ", shard 0 ", shape_str(s));
      parts.push_back(ops::narrow(shards[r], spec.dim, j * len, len));
    }
  return ops::cat(parts, spec.dim);
}

ShardSpecs tensor_parallel_shard_specs(nn::Module& model) {
  ShardSpecs specs;
  for_each_tp_module(model, [&](const std::string& prefix, TensorParallelModule& m) {
    for (const auto& [name, spec] : m.shard_specs()) specs[prefix + name] = spec;
  });
  return specs;
}

std::vector<std::string> partial_gradient_parameter_names(nn::Module& model) {
  std::vector<std::string> names;
  for_each_tp_module(model, [&](const std::string& prefix, TensorParallelModule& m) {
    for (const std::string& name : m.partial_gradient_parameters()) names.push_back(prefix + name);
  });
  return names;
}

nn::NamedTensors gather_shards(const nn::NamedTensors& local, const ShardSpecs& specs, dist::ProcessGroup& tp) {
  NoGradGuard no_grad;
  nn::NamedTensors full;
  for (const auto& item : local) {
    auto it = specs.find(item.key());
    const Tensor& t = item.value();
    if (it == specs.end() || tp.size() == 1 || !t.defined()) {
      full.insert(item.key(), t);
      continue;
    }
    const Tensor in = ops::contiguous(t.detach());
    Shape stacked = in.shape();
    stacked.insert(stacked.begin(), tp.size());
    Tensor buf = empty(stacked, TensorOptions(in.dtype()).device(in.device()));
    tp.all_gather(buf, in);
    std::vector<Tensor> shards;
    for (int r = 0; r < tp.size(); ++r) shards.push_back(ops::select(buf, 0, r));
    full.insert(item.key(), unshard_tensor(shards, it->second));
  }
  return full;
}

nn::NamedTensors shard_full(const nn::NamedTensors& full, const ShardSpecs& specs, int rank, int size) {
  NoGradGuard no_grad;
  nn::NamedTensors local;
  for (const auto& item : full) {
    auto it = specs.find(item.key());
    if (it == specs.end()) {
      local.insert(item.key(), item.value());
      continue;
    }
    try {
      local.insert(item.key(), shard_tensor(item.value(), it->second, rank, size));
    } catch (const ValueError& e) {
      QK_THROW(ValueError, "'", item.key(), "': ", e.what());
    }
  }
  return local;
}

nn::NamedTensors full_state_dict(nn::Module& model, dist::ProcessGroup& tp) {
  return gather_shards(model.state_dict(), tensor_parallel_shard_specs(model), tp);
}

void load_full_state_dict(nn::Module& model, const nn::NamedTensors& full, dist::ProcessGroup& tp, bool strict) {
  model.load_state_dict(shard_full(full, tensor_parallel_shard_specs(model), tp.rank(), tp.size()), strict);
}

void all_reduce_partial_gradients(nn::Module& model, dist::ProcessGroup& tp) {
  if (tp.size() == 1) return;
  const std::vector<std::string> names = partial_gradient_parameter_names(model);
  if (names.empty()) return;
  const nn::NamedTensors params = model.named_parameters();
  // One flat all-reduce of every such gradient (norm weights are small).
  std::vector<Tensor> grads;
  int64_t total = 0;
  for (const std::string& n : names) {
    const Tensor* p = params.find(n);
    QK_CHECK(p != nullptr, "all_reduce_partial_gradients: no parameter '", n, "'");
    if (!p->grad().defined()) continue;  // no gradient on any rank: nothing to sum
    grads.push_back(p->grad());
    total += p->grad().numel();
  }
  if (grads.empty()) return;
  Tensor flat = empty({total}, TensorOptions(grads[0].dtype()).device(grads[0].device()));
  int64_t at = 0;
  for (const Tensor& g : grads) {
    QK_CHECK_TYPE(g.dtype() == flat.dtype(), "all_reduce_partial_gradients: gradients of mixed dtypes");
    ops::copy_(ops::narrow(flat, 0, at, g.numel()), ops::reshape(g, {g.numel()}));
    at += g.numel();
  }
  tp.all_reduce(flat);
  at = 0;
  for (const Tensor& g : grads) {
    ops::copy_(g, ops::reshape(ops::narrow(flat, 0, at, g.numel()), g.shape()));
    at += g.numel();
  }
}

double tensor_parallel_grad_norm(nn::Module& model, dist::ProcessGroup& tp) {
  NoGradGuard no_grad;
  const ShardSpecs specs = tensor_parallel_shard_specs(model);
  // [sum of squares of the shards (summed over tp), of the replicated (counted once)]
  Tensor sums = zeros({2}, TensorOptions(DType::f64));
  for (const auto& item : model.named_parameters()) {
    const Tensor& g = item.value().grad();
    if (!g.defined()) continue;
    const Tensor g64 = ops::contiguous(ops::cast(g, DType::f64)).to(kCPU);
    const double* p = g64.data_ptr<double>();
    double s = 0;
    for (int64_t i = 0; i < g64.numel(); ++i) s += p[i] * p[i];
    sums.data_ptr<double>()[specs.count(item.key()) ? 0 : 1] += s;
  }
  const double replicated = sums.data_ptr<double>()[1];
  tp.all_reduce(sums);
  return std::sqrt(sums.data_ptr<double>()[0] + replicated);
}

}  // namespace qk::parallel
