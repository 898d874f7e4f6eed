// qk::Tensor: an n-dimensional strided view of device memory.
//
//   auto x = qk::randn({64, 3, 32, 32});          // f32 on the CPU
//   auto w = qk::zeros({10, 3072}).requires_grad_();
//   auto y = qk::matmul(x.view({64, -1}), w.t()); // differentiable (qk/autograd)
//   y.sum().backward();                           // w.grad() now holds dL/dw
//   std::cout << y.slice(0, 0, 2) << "\n";
//
// A Tensor is a cheap handle (shared pointer) to a TensorImpl: storage,
// offset, sizes, strides, dtype. Views share storage. The methods in the
// "differentiable" block record onto the autograd tape when the program links
// qianka::autograd, and are the plain ops when it does not (the tensor
// library links alone); they reach the layer above through hooks it installs
// (qk/tensor/autograd_hooks.h). The tensor layer never looks inside
// AutogradMeta.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "qk/tensor/device.h"
#include "qk/tensor/dtype.h"
#include "qk/tensor/storage.h"

namespace qk {

namespace autograd {
struct AutogradMeta;
class Node;
}  // namespace autograd

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[64, 3, 32, 32]"

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape sizes;
  Shape strides;  // in elements
  DType dtype = DType::f32;
  std::shared_ptr<autograd::AutogradMeta> autograd;  // owned by the autograd layer
  uint64_t version = 0;  // bumped by in-place writes; saved tensors check it
};

// dtype + device for factories: TensorOptions().dtype(DType::bf16).device("cpu").
struct TensorOptions {
  DType dtype_ = DType::f32;
  Device device_ = kCPU;
  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}
  TensorOptions(Device d) : device_(d) {}
  TensorOptions& dtype(DType t) { dtype_ = t; return *this; }
  TensorOptions& device(Device d) { device_ = d; return *this; }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata ----
  const Shape& shape() const { return checked().sizes; }
  const Shape& sizes() const { return checked().sizes; }
  const Shape& strides() const { return checked().strides; }
  int64_t size(int64_t dim) const;    // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(checked().sizes.size()); }
  int64_t numel() const;
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().storage->device(); }
  size_t itemsize() const { return dtype_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(); }
  int64_t storage_offset() const { return checked().offset; }
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }
  bool is_contiguous() const;
  // Normalises a possibly negative dim; throws IndexError naming `op`.
  int64_t wrap_dim(int64_t dim, const char* op = "tensor") const;

  // ---- data ----
  void* raw_data() const;
  template <typename T>
  T* data_ptr() const {
    QK_CHECK_TYPE(dtype() == dtype_of_v<T>, "data_ptr: tensor is ", dtype_name(dtype()),
                  ", asked for ", dtype_name(dtype_of_v<T>));
    return static_cast<T*>(raw_data());
  }
  // The single value of a one-element tensor (copied to the host if needed).
  template <typename T>
  T item() const;
  double item_double() const;
  // All values in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;

  // ---- in-place writes (no autograd: use under no_grad or on non-leaves) ----
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  // Copies src into this tensor, broadcasting src and converting its dtype.
  Tensor& copy_(const Tensor& src);
  void bump_version() const { ++checked().version; }

  // ---- differentiable (with qianka::autograd linked) ----
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType t) const;
  Tensor to(Device d) const;
  // non_blocking: from or into pinned host memory (pin_memory), the copy is
  // queued on the device's current stream and this returns at once; the
  // host side must not be touched until the stream gets there (a device
  // synchronize). Otherwise, and for tensors that require grad, to(d).
  Tensor to(Device d, bool non_blocking) const;
  // A copy of this CPU tensor in page-locked memory of the `for_device`
  // backend (cudaHostAlloc for CUDA), which copies to and from that device
  // without staging and, with to(d, true), without waiting. DeviceError
  // where that backend cannot pin (no driver, no device, a CPU-only build).
  Tensor pin_memory(DeviceType for_device = DeviceType::cuda) const;
  bool is_pinned() const;
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;

  // ---- autograd state ----
  // requires_grad_, set_grad and register_post_accumulate_grad_hook give a
  // tensor autograd state, so only the autograd layer defines them: a program
  // that calls them links qianka::autograd. grad() and backward() throw an
  // error saying so when it does not.
  bool requires_grad() const;
  // Makes this leaf tensor track gradients; returns *this.
  Tensor& requires_grad_(bool on = true);
  const Tensor& requires_grad_(bool on = true) const;
  // The accumulated gradient (undefined until a backward reaches it).
  const Tensor& grad() const;
  void set_grad(const Tensor& g) const;
  bool is_leaf() const;
  std::shared_ptr<autograd::Node> grad_fn() const;
  // A new tensor sharing storage, cut from the graph.
  Tensor detach() const;
  // Runs backward from this tensor. A non-scalar needs `grad`.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // Called after a backward has accumulated into this leaf's .grad (DDP uses
  // it to start a bucket's all-reduce while backward goes on).
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;

  std::string str() const;  // printable form, PyTorch-like

 private:
  TensorImpl& checked() const {
    QK_CHECK(impl_ != nullptr, "operation on an undefined (empty) Tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- construction (tensor layer, no autograd) ----
Shape contiguous_strides(const Shape& sizes);
int64_t shape_numel(const Shape& sizes);
// A tensor over `storage` with the given geometry (checked to fit).
Tensor make_tensor(std::shared_ptr<Storage> storage, DType dtype, const Shape& sizes,
                   const Shape& strides, int64_t offset);

Tensor empty(const Shape& shape, TensorOptions opts = {});
// A CPU tensor in page-locked memory of `for_device`'s backend (see
// Tensor::pin_memory); DeviceError where that backend cannot pin.
Tensor empty_pinned(const Shape& shape, DType dtype, DeviceType for_device = DeviceType::cuda);
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// 0, 1, ..., n-1 (or start, start+step, ... < end).
Tensor arange(int64_t n, TensorOptions opts = DType::i64);
Tensor arange(double start, double end, double step, TensorOptions opts = {});
Tensor scalar_tensor(double value, TensorOptions opts = {});
// Copies host values into a new tensor of `shape` (numel must match).
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opts = dtype_of_v<T>);
// Wraps external memory without copying; `deleter` (may be empty) frees it.
Tensor from_blob(void* data, const Shape& shape, DType dtype, std::function<void(void*)> deleter = {},
                 Device device = kCPU);

// ---- explicit instantiations live in tensor.cc ----
extern template float Tensor::item<float>() const;
extern template double Tensor::item<double>() const;
extern template int64_t Tensor::item<int64_t>() const;
extern template int32_t Tensor::item<int32_t>() const;
extern template bool Tensor::item<bool>() const;

}  // namespace qk
