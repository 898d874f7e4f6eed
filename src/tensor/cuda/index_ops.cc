// The CUDA backend's joining and indexing kernel-table entries (cat,
// index_select, index_add, gather, scatter_add, one_hot, topk): the CPU
// kernels' contracts (cpu/index.h) with the launches of index.cu and
// topk.cu on the device's current stream. The fronts (src/tensor/index.cc)
// give contiguous tensors and wrapped dims.
//
// Index values are range-checked on the device: the kernels lower a flag to
// the first bad position + 1, read back once per call (the only wait here),
// and the host raises the CPU's IndexError with the offending value. As on
// the CPU, a bad index is reported before a bad dtype.
#include <algorithm>
#include <vector>

#include "cuda_check.h"
#include "index_kernels.h"
#include "op_kernel_tables.h"
#include "qk/base/error.h"
#include "qk/tensor/sync_debug.h"
#include "qk/tensor/ops/view.h"
#include "stream_handle.h"
#include "outer_dim_inner.h"

namespace qk::cuda {

namespace {

TensorOptions on(const Tensor& like, DType t) { return TensorOptions().dtype(t).device(like.device()); }

// Device pointers of possibly empty tensors (no element: never dereferenced).
void* data(const Tensor& t) { return t.numel() > 0 ? t.raw_data() : nullptr; }


Shape at_least_1d(const Shape& s) { return s.empty() ? Shape{1} : s; }

// The first bad position + 1, all ones while there is none (an atomicMin).
Tensor bad_flag(const Tensor& like, cudaStream_t stream) {
  Tensor bad = empty({1}, on(like, DType::i64));
  QK_CUDA_CHECK(cudaMemsetAsync(bad.raw_data(), 0xff, sizeof(int64_t), stream));
  return bad;
}

unsigned long long* flag_ptr(const Tensor& bad) { return static_cast<unsigned long long*>(bad.raw_data()); }

// Waits for the stream and raises the CPU's IndexError (cpu/index.cc
// checked_index) for the first bad position of the contiguous index.
void raise_if_bad(const Tensor& bad, const Tensor& index, int64_t size, const char* op, cudaStream_t stream) {
  uint64_t first = 0;
  note_host_sync(bad.device(), op);  // the index check reads its flag
  QK_CUDA_CHECK(cudaMemcpyAsync(&first, bad.raw_data(), sizeof first, cudaMemcpyDeviceToHost, stream));
  QK_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (first == ~uint64_t(0)) return;
  const int64_t pos = static_cast<int64_t>(first) - 1;
  int64_t value = 0;
  const char* at = static_cast<const char*>(index.raw_data()) + pos * static_cast<int64_t>(index.itemsize());
  if (index.dtype() == DType::i32) {
    int32_t v = 0;
    QK_CUDA_CHECK(cudaMemcpyAsync(&v, at, sizeof v, cudaMemcpyDeviceToHost, stream));
    QK_CUDA_CHECK(cudaStreamSynchronize(stream));
    value = v;
  } else {
    QK_CUDA_CHECK(cudaMemcpyAsync(&value, at, sizeof value, cudaMemcpyDeviceToHost, stream));
    QK_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  QK_THROW(IndexError, op, ": index ", value, " at position ", pos, " is out of range for a dim of size ", size);
}

// Only the index check (for a dtype the op then refuses, as the CPU's order).
void check_only(const Tensor& index, int64_t size, const char* op, cudaStream_t stream) {
  if (index.numel() == 0) return;
  Tensor bad = bad_flag(index, stream);
  launch_check_indices(index.raw_data(), int(index.dtype()), index.numel(), size, flag_ptr(bad), stream);
  raise_if_bad(bad, index, size, op, stream);
}

Tensor workspace(const Tensor& like, size_t bytes) {
  return empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, on(like, DType::u8));
}

// The walk of gather and scatter_add: the index's shape with a's and src's
// strides, size-1 dims (other than dim) dropped and neighbours that both
// strides walk as one merged.
GatherLayout gather_layout(const Shape& is, const Shape& a_strides, const Shape& s_strides, int64_t dim,
                           int64_t dim_size, const char* op) {
  struct Axis {
    int64_t size, a, s;
    bool is_dim;
  };
  std::vector<Axis> axes;
  for (size_t d = 0; d < is.size(); ++d) {
    const bool at_dim = static_cast<int64_t>(d) == dim;
    if (is[d] == 1 && !at_dim) continue;
    const Axis x{is[d], a_strides[d], s_strides[d], at_dim};
    if (!axes.empty() && !at_dim && !axes.back().is_dim && axes.back().a == x.size * x.a &&
        axes.back().s == x.size * x.s) {
      axes.back() = Axis{axes.back().size * x.size, x.a, x.s, false};
      continue;
    }
    axes.push_back(x);
  }
  QK_CHECK_DEVICE(axes.size() <= static_cast<size_t>(kMaxIndexDims), op, " on CUDA: ", axes.size(),
                  " dimensions that cannot be merged; the kernels take at most ", kMaxIndexDims);
  GatherLayout l;
  l.ndim = static_cast<int>(axes.size());
  l.numel = shape_numel(is);
  l.dim_size = dim_size;
  for (int d = 0; d < l.ndim; ++d) {
    l.sizes[d] = axes[d].size;
    l.a_strides[d] = axes[d].a;
    l.s_strides[d] = axes[d].s;
    if (axes[d].is_dim) l.dim = d;
  }
  return l;
}

Tensor cat_on_device(const std::vector<Tensor>& tensors, int64_t dim, const Shape& out_shape) {
  DeviceStream ds(tensors[0].device().index);
  Tensor out = empty(out_shape, on(tensors[0], tensors[0].dtype()));
  if (out.numel() == 0) return out;
  const ONI o = split_at(out_shape, dim);
  const int64_t item = static_cast<int64_t>(out.itemsize());
  std::vector<CatPiece> pieces;
  pieces.reserve(tensors.size());
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    const int64_t bytes = t.size(dim) * o.inner * item;
    pieces.push_back(CatPiece{data(t), bytes, at});
    at += bytes;
  }
  launch_cat(out.raw_data(), pieces.data(), static_cast<int64_t>(pieces.size()), o.outer, o.n * o.inner * item,
             ds.stream());
  return out;
}

Tensor index_select_on_device(const Tensor& a, int64_t dim, const Tensor& index) {
  DeviceStream ds(a.device().index);
  const ONI o = split_at(at_least_1d(a.shape()), dim);
  const int64_t k = index.numel();
  Shape shape = a.shape();
  if (!shape.empty()) shape[dim] = k;
  Tensor out = empty(shape, on(a, a.dtype()));
  if (k == 0) return out;
  Tensor bad = bad_flag(a, ds.stream());
  launch_check_indices(index.raw_data(), int(index.dtype()), k, o.n, flag_ptr(bad), ds.stream());
  launch_index_select(data(out), data(a), a.itemsize(), index.raw_data(), int(index.dtype()), o.outer, o.n, o.inner,
                      k, ds.stream());
  raise_if_bad(bad, index, o.n, "index_select", ds.stream());
  return out;
}

Tensor index_add_on_device(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  DeviceStream ds(a.device().index);
  const ONI o = split_at(at_least_1d(a.shape()), dim);
  const int64_t k = index.numel();
  if (a.dtype() == DType::boolean) {
    check_only(index, o.n, "index_add", ds.stream());
    qk::dispatch_numeric(a.dtype(), "index_add", [](auto) {});  // raises
  }
  Tensor out = ops::clone(a);
  if (k == 0) return out;
  Tensor bad = bad_flag(a, ds.stream());
  Tensor ws = workspace(a, index_add_workspace(k, o.n));
  launch_index_add(data(out), data(src), int(a.dtype()), index.raw_data(), int(index.dtype()), o.outer, o.n, o.inner,
                   k, ws.raw_data(), ws.nbytes(), flag_ptr(bad), ds.stream());
  raise_if_bad(bad, index, o.n, "index_add", ds.stream());
  return out;
}

Tensor gather_on_device(const Tensor& a, int64_t dim, const Tensor& index) {
  DeviceStream ds(a.device().index);
  const Shape as = at_least_1d(a.shape()), is = at_least_1d(index.shape());
  Tensor out = empty(index.shape(), on(a, a.dtype()));
  if (out.numel() == 0) return out;
  const GatherLayout l = gather_layout(is, contiguous_strides(as), contiguous_strides(is), dim, as[dim], "gather");
  Tensor bad = bad_flag(a, ds.stream());
  launch_gather(out.raw_data(), data(a), a.itemsize(), index.raw_data(), int(index.dtype()), l, flag_ptr(bad),
                ds.stream());
  raise_if_bad(bad, index, as[dim], "gather", ds.stream());
  return out;
}

Tensor scatter_add_on_device(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  DeviceStream ds(a.device().index);
  const Shape as = at_least_1d(a.shape()), is = at_least_1d(index.shape()), ss = at_least_1d(src.shape());
  if (a.dtype() == DType::boolean) {
    check_only(index, as[dim], "scatter_add", ds.stream());
    qk::dispatch_numeric(a.dtype(), "scatter_add", [](auto) {});  // raises
  }
  if (index.numel() == 0) return ops::clone(a);
  const GatherLayout l =
      gather_layout(is, contiguous_strides(as), contiguous_strides(ss), dim, as[dim], "scatter_add");
  Tensor bad = bad_flag(a, ds.stream());
  if (scatter_add_by_lines(l)) {
    // Lines add in place: f16/bf16 into an f32 copy, rounded once at the end (as the CPU).
    const DType acc_dtype = is_reduced_float(a.dtype()) ? DType::f32 : a.dtype();
    Tensor out = acc_dtype == a.dtype() ? ops::clone(a) : ops::cast(a, acc_dtype);
    launch_scatter_add_lines(out.raw_data(), int(acc_dtype), data(src), int(a.dtype()), index.raw_data(),
                             int(index.dtype()), l, flag_ptr(bad), ds.stream());
    raise_if_bad(bad, index, as[dim], "scatter_add", ds.stream());
    return acc_dtype == a.dtype() ? out : ops::cast(out, a.dtype());
  }
  Tensor out = ops::clone(a);
  const int64_t out_numel = shape_numel(as);
  Tensor ws = workspace(a, scatter_add_sort_workspace(l.numel, out_numel));
  launch_scatter_add_sorted(out.raw_data(), data(src), int(a.dtype()), index.raw_data(), int(index.dtype()), l,
                            out_numel, ws.raw_data(), ws.nbytes(), flag_ptr(bad), ds.stream());
  raise_if_bad(bad, index, as[dim], "scatter_add", ds.stream());
  return out;
}

Tensor one_hot_on_device(const Tensor& index, int64_t num_classes) {
  DeviceStream ds(index.device().index);
  Shape shape = index.shape();
  shape.push_back(num_classes);
  Tensor out = empty(shape, on(index, DType::i64));
  const int64_t m = index.numel();
  if (m == 0) return out;
  Tensor bad = bad_flag(index, ds.stream());
  launch_one_hot(static_cast<int64_t*>(data(out)), index.raw_data(), int(index.dtype()), m, num_classes,
                 flag_ptr(bad), ds.stream());
  raise_if_bad(bad, index, num_classes, "one_hot", ds.stream());
  return out;
}

std::pair<Tensor, Tensor> topk_on_device(const Tensor& a, int64_t k, int64_t dim, bool largest,
                                         bool /*sorted: results are always sorted, as the CPU's*/) {
  DeviceStream ds(a.device().index);
  // As the CPU: dim swapped with the last one (one contiguous copy), rows
  // of n, the results swapped back.
  const int64_t last = a.dim() - 1;
  Tensor moved = dim == last ? a : ops::contiguous(ops::transpose(a, dim, last));
  const int64_t n = moved.size(last), rows = n == 0 ? 0 : moved.numel() / n;
  Shape shape = moved.shape();
  shape[last] = k;
  Tensor values = empty(shape, on(a, a.dtype())), indices = empty(shape, on(a, DType::i64));
  if (k > 0 && rows > 0) {
    qk::dispatch_numeric(a.dtype(), "topk", [](auto) {});
    Tensor ws = workspace(a, topk_workspace(int(a.dtype()), rows, n));
    launch_topk(values.raw_data(), indices.data_ptr<int64_t>(), moved.raw_data(), int(a.dtype()), rows, n, k, largest,
                ws.raw_data(), ws.nbytes(), ds.stream());
  }
  if (dim != last) {
    values = ops::contiguous(ops::transpose(values, dim, last));
    indices = ops::contiguous(ops::transpose(indices, dim, last));
  }
  return {values, indices};
}

[[maybe_unused]] const bool registered = [] {
  ops::cat_kernel.set(DeviceType::cuda, &cat_on_device);
  ops::index_select_kernel.set(DeviceType::cuda, &index_select_on_device);
  ops::index_add_kernel.set(DeviceType::cuda, &index_add_on_device);
  ops::gather_kernel.set(DeviceType::cuda, &gather_on_device);
  ops::scatter_add_kernel.set(DeviceType::cuda, &scatter_add_on_device);
  ops::one_hot_kernel.set(DeviceType::cuda, &one_hot_on_device);
  ops::topk_kernel.set(DeviceType::cuda, &topk_on_device);
  return true;
}();

}  // namespace

}  // namespace qk::cuda
