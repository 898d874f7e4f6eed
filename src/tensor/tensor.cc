// Tensor metadata, data access and factories.
#include "qk/tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "qk/tensor/backend.h"
#include "qk/tensor/ops/view.h"

namespace qk {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(sizes[i], 1);
  }
  return st;
}

int64_t shape_numel(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

int64_t Tensor::wrap_dim(int64_t d, const char* op) const {
  int64_t nd = dim();
  int64_t lim = nd == 0 ? 1 : nd;  // a 0-d tensor accepts dim 0 / -1
  QK_CHECK_INDEX(d >= -lim && d < lim, op, ": dim ", d, " out of range for a ", nd,
                 "-d tensor of shape ", shape_str(shape()));
  return d < 0 ? d + lim : d;
}

int64_t Tensor::size(int64_t d) const { return checked().sizes[wrap_dim(d, "size")]; }
int64_t Tensor::stride(int64_t d) const { return checked().strides[wrap_dim(d, "stride")]; }
int64_t Tensor::numel() const { return shape_numel(checked().sizes); }

bool Tensor::is_contiguous() const {
  const auto& im = checked();
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(im.sizes.size()) - 1; i >= 0; --i) {
    if (im.sizes[i] == 1) continue;
    if (im.strides[i] != expected) return false;
    expected *= im.sizes[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  const auto& im = checked();
  return static_cast<char*>(im.storage->data()) + im.offset * static_cast<int64_t>(dtype_size(im.dtype));
}

template <typename T>
T Tensor::item() const {
  QK_CHECK(numel() == 1, "item(): expected a tensor with one element, got shape ", shape_str(shape()));
  Tensor host = device().is_cpu() ? *this : ops::to_device(*this, kCPU);
  return dispatch_all(dtype(), "item", [&](auto tag) -> T {
    using S = decltype(tag);
    return cast_value<T>(*static_cast<const S*>(host.raw_data()));
  });
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template int32_t Tensor::item<int32_t>() const;
template bool Tensor::item<bool>() const;

double Tensor::item_double() const { return item<double>(); }

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = ops::contiguous(device().is_cpu() ? *this : ops::to_device(*this, kCPU));
  std::vector<T> out(static_cast<size_t>(c.numel()));
  dispatch_all(c.dtype(), "to_vector", [&](auto tag) {
    using S = decltype(tag);
    const S* p = static_cast<const S*>(c.raw_data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = cast_value<T>(p[i]);
  });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;

Tensor& Tensor::fill_(double value) {
  ops::fill_(*this, value);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  ops::copy_(*this, src);
  return *this;
}

// ---------------------------------------------------------------------------
// Factories

Tensor make_tensor(std::shared_ptr<Storage> storage, DType dtype, const Shape& sizes,
                   const Shape& strides, int64_t offset) {
  QK_CHECK(sizes.size() == strides.size(), "make_tensor: ", sizes.size(), " sizes but ",
           strides.size(), " strides");
  int64_t max_index = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    QK_CHECK(sizes[i] >= 0, "make_tensor: negative size in ", shape_str(sizes));
    if (sizes[i] == 0) {
      max_index = -1;
      break;
    }
    QK_CHECK(strides[i] >= 0, "make_tensor: negative stride in ", shape_str(strides));
    max_index += (sizes[i] - 1) * strides[i];
  }
  QK_CHECK(offset >= 0, "make_tensor: negative offset ", offset);
  QK_CHECK(max_index < 0 ||
               static_cast<size_t>(max_index + 1) * dtype_size(dtype) <= storage->nbytes(),
           "make_tensor: shape ", shape_str(sizes), " with strides ", shape_str(strides),
           " and offset ", offset, " exceeds the storage of ", storage->nbytes(), " bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->offset = offset;
  impl->sizes = sizes;
  impl->strides = strides;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty(const Shape& shape, TensorOptions opts) {
  for (int64_t s : shape)
    QK_CHECK(s >= 0, "empty: negative dimension in shape ", shape_str(shape));
  size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(opts.dtype_);
  auto storage = std::make_shared<Storage>(nbytes, opts.device_);
  return make_tensor(std::move(storage), opts.dtype_, shape, contiguous_strides(shape), 0);
}

Tensor empty_pinned(const Shape& shape, DType dtype, DeviceType for_device) {
  for (int64_t s : shape)
    QK_CHECK(s >= 0, "empty_pinned: negative dimension in shape ", shape_str(shape));
  Backend& b = backend(for_device);
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* p = b.allocate_pinned(std::max<size_t>(nbytes, 1));
  QK_CHECK_DEVICE(p != nullptr, "pin_memory: the ", device_type_name(for_device), " backend cannot pin host memory (",
                  b.unavailable_reason().empty() ? std::string("it has no pinned allocator") : b.unavailable_reason(),
                  ")");
  auto storage = std::make_shared<Storage>(p, nbytes, kCPU, [&b](void* q) { b.deallocate_pinned(q); }, true);
  return make_tensor(std::move(storage), dtype, shape, contiguous_strides(shape), 0);
}

Tensor Tensor::pin_memory(DeviceType for_device) const {
  QK_CHECK_DEVICE(device().is_cpu(), "pin_memory: expected a CPU tensor, got one on ", device().str());
  Tensor out = empty_pinned(shape(), dtype(), for_device);
  ops::copy_(out, *this);
  return out;
}

bool Tensor::is_pinned() const { return storage()->pinned(); }

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  Tensor t = empty(shape, opts);
  ops::fill_(t, value);
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor empty_like(const Tensor& t) {
  return empty(t.shape(), TensorOptions().dtype(t.dtype()).device(t.device()));
}
Tensor zeros_like(const Tensor& t) { return full_like(t, 0.0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1.0); }
Tensor full_like(const Tensor& t, double value) {
  return full(t.shape(), value, TensorOptions().dtype(t.dtype()).device(t.device()));
}
Tensor scalar_tensor(double value, TensorOptions opts) { return full({}, value, opts); }

Tensor arange(int64_t n, TensorOptions opts) {
  QK_CHECK(n >= 0, "arange: expected n >= 0, got ", n);
  return arange(0.0, static_cast<double>(n), 1.0, opts);
}

Tensor arange(double start, double end, double step, TensorOptions opts) {
  QK_CHECK(step != 0, "arange: step must be non-zero");
  QK_CHECK((end - start) / step >= 0, "arange: empty or backwards range [", start, ", ", end,
           ") with step ", step);
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor host = empty({n}, TensorOptions().dtype(opts.dtype_));
  dispatch_numeric(opts.dtype_, "arange", [&](auto tag) {
    using T = decltype(tag);
    T* p = host.data_ptr<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = cast_value<T>(start + static_cast<double>(i) * step);
  });
  return opts.device_.is_cpu() ? host : ops::to_device(host, opts.device_);
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opts) {
  QK_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ",
           values.size(), " values do not fill shape ", shape_str(shape));
  Tensor host = empty(shape, TensorOptions().dtype(opts.dtype_));
  dispatch_all(opts.dtype_, "from_vector", [&](auto tag) {
    using S = decltype(tag);
    S* p = static_cast<S*>(host.raw_data());
    for (size_t i = 0; i < values.size(); ++i) p[i] = cast_value<S>(values[i]);
  });
  return opts.device_.is_cpu() ? host : ops::to_device(host, opts.device_);
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, TensorOptions);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, TensorOptions);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, const Shape&, TensorOptions);
template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&, TensorOptions);

Tensor from_blob(void* data, const Shape& shape, DType dtype, std::function<void(void*)> deleter,
                 Device device) {
  size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(data, nbytes, device, std::move(deleter));
  return make_tensor(std::move(storage), dtype, shape, contiguous_strides(shape), 0);
}

}  // namespace qk
