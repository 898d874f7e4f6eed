// How Tensor's differentiable methods reach the autograd layer, which sits
// above the tensor layer: through a table of hooks that the autograd layer
// installs. Not for users (Tensor's methods are the API); for the layer that
// implements them, src/autograd/tensor_methods.cc.
//
//   Tensor Tensor::view(const Shape& s) const {            // src/tensor/tensor_autograd.cc
//     if (const auto* h = detail::autograd_hooks()) return h->view(*this, s);
//     return ops::view(*this, s);                           // no autograd in this program
//   }
//
// Why no gradient is ever lost: only the autograd layer can give a tensor
// autograd state (requires_grad_, set_grad, a recorded op), and every path
// that does installs the hooks first; so does an autocast guard, the other
// state the hooks read. Until then no tensor can need them, and the methods
// run the raw ops, which is what the hooks would do anyway. The autograd
// layer also installs them before main(), so that grad() and backward() can
// tell "no gradient yet" from "no autograd in this program" (an error that
// says to link qianka::autograd). The cost per call is one load and one
// predictable branch, then one indirect call when autograd is present.
#pragma once

#include <memory>

#include "qk/tensor/tensor.h"

namespace qk::detail {

class AutogradHooks {
 public:
  // The differentiable versions of the Tensor methods of the same names.
  virtual Tensor view(const Tensor& self, const Shape& shape) const = 0;
  virtual Tensor reshape(const Tensor& self, const Shape& shape) const = 0;
  virtual Tensor flatten(const Tensor& self, int64_t start_dim, int64_t end_dim) const = 0;
  virtual Tensor permute(const Tensor& self, const Shape& dims) const = 0;
  virtual Tensor transpose(const Tensor& self, int64_t d0, int64_t d1) const = 0;
  virtual Tensor unsqueeze(const Tensor& self, int64_t dim) const = 0;
  virtual Tensor squeeze(const Tensor& self, int64_t dim) const = 0;
  virtual Tensor expand(const Tensor& self, const Shape& shape) const = 0;
  virtual Tensor slice(const Tensor& self, int64_t dim, int64_t start, int64_t end, int64_t step) const = 0;
  virtual Tensor narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length) const = 0;
  virtual Tensor select(const Tensor& self, int64_t dim, int64_t index) const = 0;
  virtual Tensor contiguous(const Tensor& self) const = 0;  // self is not contiguous
  virtual Tensor clone(const Tensor& self) const = 0;
  virtual Tensor to(const Tensor& self, DType dtype) const = 0;    // dtype differs from self's
  virtual Tensor to(const Tensor& self, Device device) const = 0;  // device differs from self's
  virtual Tensor sum(const Tensor& self, const Shape& dims, bool keepdim) const = 0;
  virtual Tensor mean(const Tensor& self, const Shape& dims, bool keepdim) const = 0;

  // Autograd state; called only for tensors that have some.
  virtual bool requires_grad(const Tensor& self) const = 0;
  virtual bool is_leaf(const Tensor& self) const = 0;
  virtual std::shared_ptr<autograd::Node> grad_fn(const Tensor& self) const = 0;
  // Called for any defined tensor once the hooks are installed.
  virtual const Tensor& grad(const Tensor& self) const = 0;
  virtual void backward(const Tensor& self, const Tensor& grad, bool retain_graph) const = 0;

 protected:
  ~AutogradHooks() = default;
};

// The installed hooks, or null while no autograd layer has installed them.
const AutogradHooks* autograd_hooks() noexcept;
// Installs `hooks` (the autograd layer's one table; installing it again is a no-op).
void install_autograd_hooks(const AutogradHooks* hooks) noexcept;

}  // namespace qk::detail
