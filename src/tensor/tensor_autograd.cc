// Tensor's differentiable methods and autograd state: through the hooks the
// autograd layer installs (qk/tensor/autograd_hooks.h says why no gradient
// can be lost), else the raw ops.
#include <atomic>

#include "qk/tensor/autograd_hooks.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace qk {

namespace detail {
namespace {
std::atomic<const AutogradHooks*> g_hooks{nullptr};
}  // namespace

const AutogradHooks* autograd_hooks() noexcept { return g_hooks.load(std::memory_order_acquire); }
void install_autograd_hooks(const AutogradHooks* hooks) noexcept {
  g_hooks.store(hooks, std::memory_order_release);
}
}  // namespace detail

namespace {
using detail::autograd_hooks;

[[noreturn]] void no_autograd(const char* what) {
  QK_THROW(Error, "Tensor::", what, ": gradients need the autograd layer, and this program has "
           "none: link qianka::autograd (target_link_libraries(<your target> PRIVATE "
           "qianka::autograd)) and make the leaves require grad with requires_grad_()");
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  if (const auto* h = autograd_hooks()) return h->view(*this, shape);
  return ops::view(*this, shape);
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (const auto* h = autograd_hooks()) return h->reshape(*this, shape);
  return ops::reshape(*this, shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (const auto* h = autograd_hooks()) return h->flatten(*this, start_dim, end_dim);
  return ops::flatten(*this, start_dim, end_dim);
}

Tensor Tensor::permute(const Shape& dims) const {
  if (const auto* h = autograd_hooks()) return h->permute(*this, dims);
  return ops::permute(*this, dims);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (const auto* h = autograd_hooks()) return h->transpose(*this, d0, d1);
  return ops::transpose(*this, d0, d1);
}

Tensor Tensor::t() const {
  QK_CHECK(dim() <= 2, "t(): expected a tensor with <= 2 dims, got shape ", shape_str(shape()),
           "; use transpose(d0, d1)");
  if (dim() < 2) return *this;
  return transpose(0, 1);
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  if (const auto* h = autograd_hooks()) return h->unsqueeze(*this, dim);
  return ops::unsqueeze(*this, dim);
}

Tensor Tensor::squeeze(int64_t dim) const {
  if (const auto* h = autograd_hooks()) return h->squeeze(*this, dim);
  return ops::squeeze(*this, dim);
}

Tensor Tensor::expand(const Shape& shape) const {
  if (const auto* h = autograd_hooks()) return h->expand(*this, shape);
  return ops::expand(*this, shape);
}

Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  if (const auto* h = autograd_hooks()) return h->slice(*this, dim, start, end, step);
  return ops::slice(*this, dim, start, end, step);
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  if (const auto* h = autograd_hooks()) return h->narrow(*this, dim, start, length);
  return ops::narrow(*this, dim, start, length);
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  if (const auto* h = autograd_hooks()) return h->select(*this, dim, index);
  return ops::select(*this, dim, index);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  if (const auto* h = autograd_hooks()) return h->contiguous(*this);
  return ops::contiguous(*this);
}

Tensor Tensor::clone() const {
  if (const auto* h = autograd_hooks()) return h->clone(*this);
  return ops::clone(*this);
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  if (const auto* h = autograd_hooks()) return h->to(*this, t);
  return ops::cast(*this, t);
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  if (const auto* h = autograd_hooks()) return h->to(*this, d);
  return ops::to_device(*this, d);
}

Tensor Tensor::to(Device d, bool non_blocking) const {
  if (!non_blocking || d == device() || requires_grad()) return to(d);
  return ops::to_device(*this, d, true);
}

Tensor Tensor::sum() const { return sum({}, false); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const {
  if (const auto* h = autograd_hooks()) return h->sum(*this, dims, keepdim);
  return ops::sum(*this, dims, keepdim);
}

Tensor Tensor::mean() const { return mean({}, false); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  if (const auto* h = autograd_hooks()) return h->mean(*this, dims, keepdim);
  return ops::mean(*this, dims, keepdim);
}

// ---- autograd state (requires_grad_, set_grad and the post-accumulate hook,
// which create it, are defined by the autograd layer itself) ----

bool Tensor::requires_grad() const {
  if (impl_ == nullptr || impl_->autograd == nullptr) return false;
  return autograd_hooks()->requires_grad(*this);
}

const Tensor& Tensor::grad() const {
  const auto* h = autograd_hooks();
  if (h == nullptr) no_autograd("grad()");
  return h->grad(*this);
}

bool Tensor::is_leaf() const {
  if (impl_ == nullptr || impl_->autograd == nullptr) return true;
  return autograd_hooks()->is_leaf(*this);
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  if (impl_ == nullptr || impl_->autograd == nullptr) return nullptr;
  return autograd_hooks()->grad_fn(*this);
}

Tensor Tensor::detach() const {
  return make_tensor(storage(), dtype(), shape(), strides(), storage_offset());
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  const auto* h = autograd_hooks();
  if (h == nullptr) no_autograd("backward()");
  h->backward(*this, grad, retain_graph);
}

}  // namespace qk
