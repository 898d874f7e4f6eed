#include "qk/nn/container.h"

namespace qk::nn {

FunctionalImpl::FunctionalImpl(std::function<Tensor(const Tensor&)> fn) : fn_(std::move(fn)) {
  QK_CHECK(static_cast<bool>(fn_), "Functional: the function is empty");
}

Tensor SequentialImpl::forward(const Tensor& x) {
  QK_CHECK(!forwards_.empty(), "Sequential: forward on an empty Sequential");
  Tensor h = forwards_[0](x);
  for (size_t i = 1; i < forwards_.size(); ++i) h = forwards_[i](h);
  return h;
}

const std::shared_ptr<Module>& SequentialImpl::ptr(size_t i) const {
  QK_CHECK_INDEX(i < modules_.size(), "Sequential: index ", i, " out of range (size ", modules_.size(), ")");
  return modules_[i];
}

const std::shared_ptr<Module>& ModuleListImpl::ptr(size_t i) const {
  QK_CHECK_INDEX(i < modules_.size(), "ModuleList: index ", i, " out of range (size ", modules_.size(), ")");
  return modules_[i];
}

}  // namespace qk::nn
