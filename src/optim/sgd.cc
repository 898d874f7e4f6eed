#include "qk/optim/sgd.h"

#include <algorithm>

#include "qk/autograd/autograd.h"
#include "qk/tensor/ops/optimizer.h"
#include "options_map.h"

namespace qk::optim {

std::map<std::string, double> SGDOptions::to_map() const {
  return {{"lr", lr_}, {"momentum", momentum_}, {"dampening", dampening_},
          {"weight_decay", weight_decay_}, {"nesterov", nesterov_ ? 1.0 : 0.0}};
}

void SGDOptions::from_map(const std::map<std::string, double>& m) {
  lr_ = internal::need(m, "lr", kName);
  momentum_ = internal::need(m, "momentum", kName);
  dampening_ = internal::need(m, "dampening", kName);
  weight_decay_ = internal::need(m, "weight_decay", kName);
  nesterov_ = internal::need(m, "nesterov", kName) != 0;
}

namespace {
void check_options(const SGDOptions& o) {
  QK_CHECK(o.lr() >= 0, "SGD: expected lr >= 0, got ", o.lr());
  QK_CHECK(o.momentum() >= 0, "SGD: expected momentum >= 0, got ", o.momentum());
  QK_CHECK(o.weight_decay() >= 0, "SGD: expected weight_decay >= 0, got ", o.weight_decay());
  QK_CHECK(!o.nesterov() || (o.momentum() > 0 && o.dampening() == 0),
           "SGD: Nesterov momentum needs momentum > 0 and dampening = 0, got momentum ",
           o.momentum(), " and dampening ", o.dampening());
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) {
  check_options(options);
  add_param_group(std::move(params), options);
}

SGD::SGD(std::vector<ParamGroup> groups) {
  for (const auto& g : groups) check_options(g.options);
  init_groups(std::move(groups));
}

// The parameters of a group that share device, dtype and whether their
// momentum buffer is new are updated by one list kernel.
void SGD::step() {
  NoGradGuard ng;
  struct Bucket {
    Device device;
    DType dtype;
    bool first_step;
    ops::SgdStepLists lists;
  };
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const SGDOptions& o = options_[gi];
    std::vector<Bucket> buckets;
    for (size_t i = 0; i < groups_[gi].size(); ++i) {
      const Tensor& p = groups_[gi][i];
      Tensor g = kernel_grad_for(p, "SGD");
      if (!g.defined()) continue;
      ParamState& st = state(gi, i);
      Tensor buf;
      bool first = false;
      if (o.momentum() != 0) {
        auto it = st.tensors.find("momentum_buffer");
        first = it == st.tensors.end();
        buf = first ? (st.tensors["momentum_buffer"] = empty_like(p)) : it->second;
      }
      ++st.step;
      auto b = std::find_if(buckets.begin(), buckets.end(), [&](const Bucket& b) {
        return b.device == p.device() && b.dtype == p.dtype() && b.first_step == first;
      });
      if (b == buckets.end()) b = buckets.insert(buckets.end(), Bucket{p.device(), p.dtype(), first, {}});
      b->lists.params.push_back(p);
      b->lists.grads.push_back(std::move(g));
      if (buf.defined()) b->lists.momentum_bufs.push_back(std::move(buf));
    }
    for (const Bucket& b : buckets) {
      ops::multi_tensor_sgd_step_(
          b.lists, {o.lr(), o.momentum(), o.dampening(), o.weight_decay(), o.nesterov(), b.first_step});
      for (const Tensor& p : b.lists.params) p.bump_version();
    }
  }
}

}  // namespace qk::optim
