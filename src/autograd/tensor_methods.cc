// Tensor's differentiable methods and autograd state. The tensor layer
// declares them and calls these through the hooks installed here
// (qk/tensor/autograd_hooks.h); the methods that create autograd state are
// defined here outright, and install the hooks (through ensure_meta) before
// any tensor has state the hooks must see.
#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/autograd_hooks.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"
#include "tensor_hooks.h"

namespace qk {

using autograd::record;

namespace {

// Records a view-like op whose backward is `bwd(grad)`.
Tensor unary_record(const char* name, const Tensor& in, Tensor out,
                    std::function<Tensor(const Tensor&)> bwd) {
  record(name, {in}, {out}, [bwd = std::move(bwd)](const std::vector<Tensor>& g) -> std::vector<Tensor> {
    return {bwd(g[0])};
  });
  return out;
}

// Backward of taking a sub-view: scatter the gradient into zeros of the input's shape.
std::function<Tensor(const Tensor&)> embed_grad(const Tensor& in,
                                                std::function<Tensor(const Tensor&)> take) {
  Shape shape = in.shape();
  DType dt = in.dtype();
  Device dev = in.device();
  return [shape, dt, dev, take = std::move(take)](const Tensor& g) {
    Tensor dx = zeros(shape, TensorOptions().dtype(dt).device(dev));
    ops::copy_(take(dx), g);
    return dx;
  };
}

class TensorAutograd final : public detail::AutogradHooks {
 public:
  constexpr TensorAutograd() = default;

  Tensor view(const Tensor& self, const Shape& shape) const override {
    Shape in = self.shape();
    return unary_record("ViewBackward", self, ops::view(self, shape),
                        [in](const Tensor& g) { return ops::reshape(g, in); });
  }

  Tensor reshape(const Tensor& self, const Shape& shape) const override {
    Shape in = self.shape();
    return unary_record("ReshapeBackward", self, ops::reshape(self, shape),
                        [in](const Tensor& g) { return ops::reshape(g, in); });
  }

  Tensor flatten(const Tensor& self, int64_t start_dim, int64_t end_dim) const override {
    Shape in = self.shape();
    return unary_record("FlattenBackward", self, ops::flatten(self, start_dim, end_dim),
                        [in](const Tensor& g) { return ops::reshape(g, in); });
  }

  Tensor permute(const Tensor& self, const Shape& dims) const override {
    Tensor out = ops::permute(self, dims);
    Shape inv(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inv[self.wrap_dim(dims[i], "permute")] = static_cast<int64_t>(i);
    return unary_record("PermuteBackward", self, out, [inv](const Tensor& g) { return ops::permute(g, inv); });
  }

  Tensor transpose(const Tensor& self, int64_t d0, int64_t d1) const override {
    return unary_record("TransposeBackward", self, ops::transpose(self, d0, d1),
                        [d0, d1](const Tensor& g) { return ops::transpose(g, d0, d1); });
  }

  Tensor unsqueeze(const Tensor& self, int64_t d) const override {
    Shape in = self.shape();
    return unary_record("UnsqueezeBackward", self, ops::unsqueeze(self, d),
                        [in](const Tensor& g) { return ops::reshape(g, in); });
  }

  Tensor squeeze(const Tensor& self, int64_t d) const override {
    Shape in = self.shape();
    return unary_record("SqueezeBackward", self, ops::squeeze(self, d),
                        [in](const Tensor& g) { return ops::reshape(g, in); });
  }

  Tensor expand(const Tensor& self, const Shape& shape) const override {
    Shape in = self.shape();
    return unary_record("ExpandBackward", self, ops::expand(self, shape),
                        [in](const Tensor& g) { return ops::sum_to(g, in); });
  }

  Tensor slice(const Tensor& self, int64_t d, int64_t start, int64_t end, int64_t step) const override {
    return unary_record("SliceBackward", self, ops::slice(self, d, start, end, step),
                        embed_grad(self, [=](const Tensor& x) { return ops::slice(x, d, start, end, step); }));
  }

  Tensor narrow(const Tensor& self, int64_t d, int64_t start, int64_t length) const override {
    return unary_record("NarrowBackward", self, ops::narrow(self, d, start, length),
                        embed_grad(self, [=](const Tensor& x) { return ops::narrow(x, d, start, length); }));
  }

  Tensor select(const Tensor& self, int64_t d, int64_t index) const override {
    return unary_record("SelectBackward", self, ops::select(self, d, index),
                        embed_grad(self, [=](const Tensor& x) { return ops::select(x, d, index); }));
  }

  Tensor contiguous(const Tensor& self) const override {
    return unary_record("ContiguousBackward", self, ops::contiguous(self),
                        [](const Tensor& g) { return g; });
  }

  Tensor clone(const Tensor& self) const override {
    return unary_record("CloneBackward", self, ops::clone(self), [](const Tensor& g) { return g; });
  }

  Tensor to(const Tensor& self, DType t) const override {
    DType in = self.dtype();
    Tensor out = ops::cast(self, t);
    if (!is_floating(t) || !is_floating(in)) return out;  // not differentiable
    return unary_record("ToDTypeBackward", self, out, [in](const Tensor& g) { return ops::cast(g, in); });
  }

  Tensor to(const Tensor& self, Device d) const override {
    Device in = self.device();
    return unary_record("ToDeviceBackward", self, ops::to_device(self, d),
                        [in](const Tensor& g) { return ops::to_device(g, in); });
  }

  Tensor sum(const Tensor& self, const Shape& dims, bool keepdim) const override {
    return qk::sum(self, dims, keepdim);
  }
  Tensor mean(const Tensor& self, const Shape& dims, bool keepdim) const override {
    return qk::mean(self, dims, keepdim);
  }

  bool requires_grad(const Tensor& self) const override {
    auto* m = autograd::meta(self);
    return m != nullptr && m->requires_grad;
  }

  bool is_leaf(const Tensor& self) const override {
    auto* m = autograd::meta(self);
    return m == nullptr || m->grad_fn == nullptr;
  }

  std::shared_ptr<autograd::Node> grad_fn(const Tensor& self) const override {
    auto* m = autograd::meta(self);
    return m ? m->grad_fn : nullptr;
  }

  const Tensor& grad(const Tensor& self) const override {
    static const Tensor kUndefined;
    auto* m = autograd::meta(self);
    return m ? m->grad : kUndefined;
  }

  void backward(const Tensor& self, const Tensor& grad, bool retain_graph) const override {
    autograd::backward({self}, {grad}, retain_graph);
  }
};

constinit const TensorAutograd kTensorAutograd;

// Before main(), so that grad() and backward() in a program with this layer
// never mistake "no gradient yet" for "no autograd here".
[[maybe_unused]] const bool kInstalledAtStart = (autograd::install_tensor_hooks(), true);

}  // namespace

void autograd::install_tensor_hooks() { detail::install_autograd_hooks(&kTensorAutograd); }

// ---- the methods that give a tensor autograd state ----

const Tensor& Tensor::requires_grad_(bool on) const {
  QK_CHECK(on == false || is_floating(dtype()),
           "requires_grad_: only floating-point tensors can require gradients, got ",
           dtype_name(dtype()));
  auto& m = autograd::ensure_meta(*this);
  QK_CHECK(m.grad_fn == nullptr || on,
           "requires_grad_(false) on a non-leaf tensor (it has grad_fn ", m.grad_fn->name(),
           "); use detach() instead");
  m.requires_grad = on;
  return *this;
}

Tensor& Tensor::requires_grad_(bool on) {
  static_cast<const Tensor&>(*this).requires_grad_(on);
  return *this;
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined())
    QK_CHECK(g.shape() == shape(), "set_grad: gradient of shape ", shape_str(g.shape()),
             " for a tensor of shape ", shape_str(shape()));
  autograd::ensure_meta(*this).grad = g;
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  QK_CHECK(is_leaf() && requires_grad(),
           "register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate "
           "gradients");
  autograd::ensure_meta(*this).post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace qk
