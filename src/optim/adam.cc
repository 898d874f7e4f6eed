#include "qk/optim/adam.h"

#include <algorithm>
#include <functional>

#include "qk/autograd/autograd.h"
#include "qk/tensor/ops/optimizer.h"
#include "options_map.h"

namespace qk::optim {

namespace {

template <typename O>
std::map<std::string, double> adam_to_map(const O& o) {
  return {{"lr", o.lr()}, {"beta1", std::get<0>(o.betas())}, {"beta2", std::get<1>(o.betas())},
          {"eps", o.eps()}, {"weight_decay", o.weight_decay()}, {"amsgrad", o.amsgrad() ? 1.0 : 0.0}};
}

template <typename O>
void adam_from_map(O& o, const std::map<std::string, double>& m) {
  o.lr(internal::need(m, "lr", O::kName));
  o.betas({internal::need(m, "beta1", O::kName), internal::need(m, "beta2", O::kName)});
  o.eps(internal::need(m, "eps", O::kName));
  o.weight_decay(internal::need(m, "weight_decay", O::kName));
  o.amsgrad(internal::need(m, "amsgrad", O::kName) != 0);
}

template <typename O>
void check_options(const O& o) {
  auto [b1, b2] = o.betas();
  QK_CHECK(o.lr() >= 0, O::kName, ": expected lr >= 0, got ", o.lr());
  QK_CHECK(o.eps() >= 0, O::kName, ": expected eps >= 0, got ", o.eps());
  QK_CHECK(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1, O::kName,
           ": expected betas in [0, 1), got (", b1, ", ", b2, ")");
  QK_CHECK(o.weight_decay() >= 0, O::kName, ": expected weight_decay >= 0, got ", o.weight_decay());
}

// The shared step of Adam and AdamW: state lives in "exp_avg", "exp_avg_sq"
// and (AMSGrad) "max_exp_avg_sq", all zero-initialised on first use. The
// parameters of a group that share device, dtype and step count are updated
// by one list kernel (one launch per many parameters on a GPU).
template <typename O>
void adam_step(std::vector<std::vector<Tensor>>& groups, const std::vector<O>& options,
               const std::function<Optimizer::ParamState*(size_t, size_t)>& state, bool decoupled) {
  NoGradGuard ng;
  struct Bucket {
    Device device;
    DType dtype;
    int64_t step;
    ops::AdamStepLists lists;
  };
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const O& o = options[gi];
    std::vector<Bucket> buckets;
    for (size_t i = 0; i < groups[gi].size(); ++i) {
      const Tensor& p = groups[gi][i];
      Tensor g = Optimizer::kernel_grad_for(p, O::kName);
      if (!g.defined()) continue;
      Optimizer::ParamState& st = *state(gi, i);
      if (st.tensors.empty()) {
        st.tensors["exp_avg"] = zeros_like(p);
        st.tensors["exp_avg_sq"] = zeros_like(p);
      }
      if (o.amsgrad() && !st.tensors.count("max_exp_avg_sq"))
        st.tensors["max_exp_avg_sq"] = zeros_like(p);
      ++st.step;
      auto b = std::find_if(buckets.begin(), buckets.end(), [&](const Bucket& b) {
        return b.device == p.device() && b.dtype == p.dtype() && b.step == st.step;
      });
      if (b == buckets.end()) b = buckets.insert(buckets.end(), Bucket{p.device(), p.dtype(), st.step, {}});
      b->lists.params.push_back(p);
      b->lists.grads.push_back(std::move(g));
      b->lists.exp_avgs.push_back(st.tensors["exp_avg"]);
      b->lists.exp_avg_sqs.push_back(st.tensors["exp_avg_sq"]);
      if (o.amsgrad()) b->lists.max_exp_avg_sqs.push_back(st.tensors["max_exp_avg_sq"]);
    }
    for (const Bucket& b : buckets) {
      ops::AdamStepArgs a;
      a.lr = o.lr();
      a.beta1 = std::get<0>(o.betas());
      a.beta2 = std::get<1>(o.betas());
      a.eps = o.eps();
      a.weight_decay = o.weight_decay();
      a.step = b.step;
      a.decoupled = decoupled;
      a.amsgrad = o.amsgrad();
      ops::multi_tensor_adam_step_(b.lists, a);
      for (const Tensor& p : b.lists.params) p.bump_version();
    }
  }
}

}  // namespace

std::map<std::string, double> AdamOptions::to_map() const { return adam_to_map(*this); }
void AdamOptions::from_map(const std::map<std::string, double>& m) { adam_from_map(*this, m); }
std::map<std::string, double> AdamWOptions::to_map() const { return adam_to_map(*this); }
void AdamWOptions::from_map(const std::map<std::string, double>& m) { adam_from_map(*this, m); }

Adam::Adam(std::vector<Tensor> params, AdamOptions options) {
  check_options(options);
  add_param_group(std::move(params), options);
}
Adam::Adam(std::vector<ParamGroup> groups) {
  for (const auto& g : groups) check_options(g.options);
  init_groups(std::move(groups));
}
void Adam::step() {
  adam_step(groups_, options_, [this](size_t g, size_t i) { return &state(g, i); }, false);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options) {
  check_options(options);
  add_param_group(std::move(params), options);
}
AdamW::AdamW(std::vector<ParamGroup> groups) {
  for (const auto& g : groups) check_options(g.options);
  init_groups(std::move(groups));
}
void AdamW::step() {
  adam_step(groups_, options_, [this](size_t g, size_t i) { return &state(g, i); }, true);
}

}  // namespace qk::optim
