// Tensor's differentiable methods and autograd state (declared in
// qk/tensor/tensor.h, defined here so the tensor layer never sees autograd).
#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

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
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Shape in = this->shape();
  return unary_record("ViewBackward", *this, ops::view(*this, shape),
                      [in](const Tensor& g) { return ops::reshape(g, in); });
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape in = this->shape();
  return unary_record("ReshapeBackward", *this, ops::reshape(*this, shape),
                      [in](const Tensor& g) { return ops::reshape(g, in); });
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  Shape in = this->shape();
  return unary_record("FlattenBackward", *this, ops::flatten(*this, start_dim, end_dim),
                      [in](const Tensor& g) { return ops::reshape(g, in); });
}

Tensor Tensor::permute(const Shape& dims) const {
  Tensor out = ops::permute(*this, dims);
  Shape inv(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inv[wrap_dim(dims[i], "permute")] = static_cast<int64_t>(i);
  return unary_record("PermuteBackward", *this, out, [inv](const Tensor& g) { return ops::permute(g, inv); });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  return unary_record("TransposeBackward", *this, ops::transpose(*this, d0, d1),
                      [d0, d1](const Tensor& g) { return ops::transpose(g, d0, d1); });
}

Tensor Tensor::t() const {
  QK_CHECK(dim() <= 2, "t(): expected a tensor with <= 2 dims, got shape ", shape_str(shape()),
           "; use transpose(d0, d1)");
  if (dim() < 2) return *this;
  return transpose(0, 1);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  Shape in = shape();
  return unary_record("UnsqueezeBackward", *this, ops::unsqueeze(*this, d),
                      [in](const Tensor& g) { return ops::reshape(g, in); });
}

Tensor Tensor::squeeze(int64_t d) const {
  Shape in = shape();
  return unary_record("SqueezeBackward", *this, ops::squeeze(*this, d),
                      [in](const Tensor& g) { return ops::reshape(g, in); });
}

Tensor Tensor::expand(const Shape& shape) const {
  Shape in = this->shape();
  return unary_record("ExpandBackward", *this, ops::expand(*this, shape),
                      [in](const Tensor& g) { return ops::sum_to(g, in); });
}

namespace {
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
}  // namespace

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  return unary_record("SliceBackward", *this, ops::slice(*this, d, start, end, step),
                      embed_grad(*this, [=](const Tensor& x) { return ops::slice(x, d, start, end, step); }));
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  return unary_record("NarrowBackward", *this, ops::narrow(*this, d, start, length),
                      embed_grad(*this, [=](const Tensor& x) { return ops::narrow(x, d, start, length); }));
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  return unary_record("SelectBackward", *this, ops::select(*this, d, index),
                      embed_grad(*this, [=](const Tensor& x) { return ops::select(x, d, index); }));
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return unary_record("ContiguousBackward", *this, ops::contiguous(*this),
                      [](const Tensor& g) { return g; });
}

Tensor Tensor::clone() const {
  return unary_record("CloneBackward", *this, ops::clone(*this), [](const Tensor& g) { return g; });
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  DType in = dtype();
  Tensor out = ops::cast(*this, t);
  if (!is_floating(t) || !is_floating(in)) return out;  // not differentiable
  return unary_record("ToDTypeBackward", *this, out, [in](const Tensor& g) { return ops::cast(g, in); });
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  Device in = device();
  return unary_record("ToDeviceBackward", *this, ops::to_device(*this, d),
                      [in](const Tensor& g) { return ops::to_device(g, in); });
}

Tensor Tensor::sum() const { return qk::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return qk::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return qk::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return qk::mean(*this, dims, keepdim); }

// ---- autograd state ----

bool Tensor::requires_grad() const {
  auto* m = autograd::meta(*this);
  return m != nullptr && m->requires_grad;
}

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

const Tensor& Tensor::grad() const {
  static const Tensor kUndefined;
  auto* m = autograd::meta(*this);
  return m ? m->grad : kUndefined;
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined())
    QK_CHECK(g.shape() == shape(), "set_grad: gradient of shape ", shape_str(g.shape()),
             " for a tensor of shape ", shape_str(shape()));
  autograd::ensure_meta(*this).grad = g;
}

bool Tensor::is_leaf() const {
  auto* m = autograd::meta(*this);
  return m == nullptr || m->grad_fn == nullptr;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  auto* m = autograd::meta(*this);
  return m ? m->grad_fn : nullptr;
}

Tensor Tensor::detach() const {
  return make_tensor(storage(), dtype(), shape(), strides(), storage_offset());
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  QK_CHECK(is_leaf() && requires_grad(),
           "register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate "
           "gradients");
  autograd::ensure_meta(*this).post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace qk
