// Raw joining, splitting and indexing ops: validation, then the kernel.
// split/chunk/stack are views and cat around the kernels.
#include "qk/tensor/ops/index.h"

#include "qk/tensor/dispatch.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"
#include "cpu/index.h"
#include "op_kernel_tables.h"

namespace qk::ops {

QK_DEFINE_KERNEL(cat_kernel, CatFn);
QK_DEFINE_KERNEL(index_select_kernel, IndexSelectFn);
QK_DEFINE_KERNEL(index_add_kernel, IndexAddFn);
QK_DEFINE_KERNEL(gather_kernel, IndexSelectFn);
QK_DEFINE_KERNEL(scatter_add_kernel, IndexAddFn);
QK_DEFINE_KERNEL(topk_kernel, TopkFn);
QK_DEFINE_KERNEL(one_hot_kernel, OneHotFn);

namespace {

QK_REGISTER_KERNEL(cat_kernel, cpu, cpu::cat);
QK_REGISTER_KERNEL(index_select_kernel, cpu, cpu::index_select);
QK_REGISTER_KERNEL(index_add_kernel, cpu, cpu::index_add);
QK_REGISTER_KERNEL(gather_kernel, cpu, cpu::gather);
QK_REGISTER_KERNEL(scatter_add_kernel, cpu, cpu::scatter_add);
QK_REGISTER_KERNEL(topk_kernel, cpu, cpu::topk);
QK_REGISTER_KERNEL(one_hot_kernel, cpu, cpu::one_hot);

Tensor as_1d(const Tensor& t) { return t.dim() == 0 ? unsqueeze(t, 0) : t; }

// A 0-d tensor takes dim 0 or -1 as a 1-element dim (PyTorch's rule).
int64_t wrap(const Tensor& a, int64_t dim, const char* op) {
  if (a.dim() == 0) {
    QK_CHECK_INDEX(dim == 0 || dim == -1, op, ": dim ", dim, " out of range for a 0-d tensor");
    return 0;
  }
  return a.wrap_dim(dim, op);
}

void check_index_tensor(const char* op, const Tensor& a, const Tensor& index) {
  QK_CHECK_TYPE(index.dtype() == DType::i64 || index.dtype() == DType::i32, op,
                ": expected an index tensor of dtype i64 or i32, got ", dtype_name(index.dtype()));
  QK_CHECK_DEVICE(index.device() == a.device(), op, ": index is on ", index.device().str(),
                  " but the input is on ", a.device().str());
}

void check_src(const char* op, const Tensor& a, const Tensor& src) {
  QK_CHECK_TYPE(src.dtype() == a.dtype(), op, ": src is ", dtype_name(src.dtype()),
                " but the input is ", dtype_name(a.dtype()));
  QK_CHECK_DEVICE(src.device() == a.device(), op, ": src is on ", src.device().str(),
                  " but the input is on ", a.device().str());
}

// gather/scatter_add: index has a's rank and no dim larger than `bound`'s
// (except `dim` for gather, where index may be longer).
void check_gather_shape(const char* op, const Tensor& a, int64_t dim, const Tensor& index,
                        const Tensor& bound, bool check_dim) {
  const int64_t nd = std::max<int64_t>(1, a.dim());
  QK_CHECK(std::max<int64_t>(1, index.dim()) == nd, op, ": index ", shape_str(index.shape()),
           " must have as many dims as the input ", shape_str(a.shape()));
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (d == dim && !check_dim) continue;
    const int64_t lim = bound.dim() == 0 ? 1 : bound.size(d);
    QK_CHECK(index.size(d) <= lim, op, ": index ", shape_str(index.shape()), " is larger than ",
             shape_str(bound.shape()), " in dim ", d);
  }
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  QK_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& t0 = tensors[0];
  QK_CHECK(t0.dim() > 0, "cat: zero-dimensional tensor (at position 0) cannot be concatenated");
  const int64_t d = t0.wrap_dim(dim, "cat");
  Shape shape = t0.shape();
  shape[d] = 0;
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    QK_CHECK_TYPE(t.dtype() == t0.dtype(), "cat: tensor ", i, " is ", dtype_name(t.dtype()),
                  " but tensor 0 is ", dtype_name(t0.dtype()));
    QK_CHECK_DEVICE(t.device() == t0.device(), "cat: tensor ", i, " is on ", t.device().str(),
                    " but tensor 0 is on ", t0.device().str());
    bool ok = t.dim() == t0.dim();
    for (int64_t k = 0; ok && k < t.dim(); ++k) ok = k == d || t.size(k) == t0.size(k);
    QK_CHECK(ok, "cat: tensor ", i, " has shape ", shape_str(t.shape()), " but tensor 0 has ",
             shape_str(t0.shape()), "; all dims except dim ", d, " must match");
    shape[d] += t.size(d);
    parts.push_back(contiguous(t));
  }
  return cat_kernel.get(t0.device())(parts, d, shape);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  QK_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  const int64_t nd = tensors[0].dim() + 1;
  QK_CHECK_INDEX(dim >= -nd && dim < nd, "stack: dim ", dim, " out of range for ", nd - 1,
                 "-d tensors (valid: [", -nd, ", ", nd - 1, "])");
  const int64_t d = dim < 0 ? dim + nd : dim;
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    QK_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: tensor ", i, " has shape ",
             shape_str(tensors[i].shape()), " but tensor 0 has ", shape_str(tensors[0].shape()),
             "; stack needs equal shapes");
    parts.push_back(unsqueeze(tensors[i], d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim) {
  const int64_t d = a.wrap_dim(dim, "split");
  QK_CHECK(split_size > 0 || (split_size == 0 && a.size(d) == 0),
           "split: split_size must be positive, got ", split_size, " for shape ",
           shape_str(a.shape()));
  std::vector<Tensor> out;
  const int64_t n = a.size(d);
  if (n == 0) return {a};
  for (int64_t s = 0; s < n; s += split_size)
    out.push_back(narrow(a, d, s, std::min(split_size, n - s)));
  return out;
}

std::vector<Tensor> split_with_sizes(const Tensor& a, const Shape& sizes, int64_t dim) {
  const int64_t d = a.wrap_dim(dim, "split_with_sizes");
  int64_t total = 0;
  for (int64_t s : sizes) {
    QK_CHECK(s >= 0, "split_with_sizes: sizes must be >= 0, got ", shape_str(sizes));
    total += s;
  }
  QK_CHECK(total == a.size(d), "split_with_sizes: sizes ", shape_str(sizes), " sum to ", total,
           " but dim ", d, " of ", shape_str(a.shape()), " has size ", a.size(d));
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(a, d, at, s));
    at += s;
  }
  return out;
}

// As PyTorch: pieces of ceil(n / chunks), so there may be fewer than `chunks`.
std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim) {
  QK_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  const int64_t d = a.wrap_dim(dim, "chunk");
  const int64_t n = a.size(d);
  return split(a, n == 0 ? 0 : (n + chunks - 1) / chunks, d);
}

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  check_index_tensor("index_select", a, index);
  QK_CHECK(index.dim() <= 1, "index_select: index must be 0-d or 1-d, got ",
           shape_str(index.shape()));
  const int64_t d = wrap(a, dim, "index_select");
  QK_CHECK(a.dim() > 0 || index.numel() == 1,
           "index_select: a 0-d input takes exactly one index, got ", index.numel());
  return index_select_kernel.get(a.device())(contiguous(a), d, contiguous(as_1d(index)));
}

Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index_tensor("index_add", a, index);
  check_src("index_add", a, src);
  QK_CHECK(index.dim() <= 1, "index_add: index must be 0-d or 1-d, got ", shape_str(index.shape()));
  const int64_t d = wrap(a, dim, "index_add");
  Shape want = a.shape();
  if (!want.empty()) want[d] = index.numel();
  QK_CHECK(src.shape() == want, "index_add: src ", shape_str(src.shape()), " must have shape ",
           shape_str(want), " (input ", shape_str(a.shape()), " with dim ", d, " of size ",
           index.numel(), ")");
  return index_add_kernel.get(a.device())(contiguous(a), d, contiguous(as_1d(index)), contiguous(src));
}

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  check_index_tensor("gather", a, index);
  const int64_t d = wrap(a, dim, "gather");
  check_gather_shape("gather", a, d, index, a, /*check_dim=*/false);
  if (index.numel() == 0) return empty(index.shape(), TensorOptions().dtype(a.dtype()).device(a.device()));
  return gather_kernel.get(a.device())(contiguous(a), d, contiguous(index));
}

Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index_tensor("scatter_add", a, index);
  check_src("scatter_add", a, src);
  const int64_t d = wrap(a, dim, "scatter_add");
  check_gather_shape("scatter_add", a, d, index, a, /*check_dim=*/false);
  check_gather_shape("scatter_add", a, d, index, src, /*check_dim=*/true);
  if (index.numel() == 0) return clone(a);
  return scatter_add_kernel.get(a.device())(contiguous(a), d, contiguous(index), contiguous(src));
}

std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim, bool largest, bool sorted) {
  const int64_t d = wrap(a, dim, "topk");
  const int64_t n = a.dim() == 0 ? 1 : a.size(d);
  QK_CHECK(k >= 0 && k <= n, "topk: k = ", k, " is out of range for dim ", d, " of size ", n,
           " (input ", shape_str(a.shape()), ")");
  QK_CHECK_TYPE(a.dtype() != DType::boolean, "topk: bool input is not supported");
  if (a.dim() == 0) {
    auto r = topk_kernel.get(a.device())(unsqueeze(a, 0), k, 0, largest, sorted);
    if (k == 1) r = {squeeze(r.first, 0), squeeze(r.second, 0)};
    return r;
  }
  return topk_kernel.get(a.device())(contiguous(a), k, d, largest, sorted);
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  QK_CHECK_TYPE(index.dtype() == DType::i64 || index.dtype() == DType::i32,
                "one_hot: expected class indices of dtype i64 or i32, got ",
                dtype_name(index.dtype()));
  QK_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 (infer) or >= 0, got ", num_classes);
  if (num_classes == -1) {  // infer max + 1, as PyTorch
    QK_CHECK(index.numel() > 0, "one_hot: cannot infer num_classes from an empty index tensor");
    num_classes = static_cast<int64_t>(amax(cast(index, DType::i64)).item<int64_t>()) + 1;
  }
  return one_hot_kernel.get(index.device())(contiguous(index), num_classes);
}

}  // namespace qk::ops
