// Joining and indexing on the CPU. A tensor is viewed as [outer, n, inner]
// around the indexed dim; cat and index_select move whole rows of `inner`
// elements with memcpy (any dtype); index_add adds them. gather and
// scatter_add index element by element, one run of the last dim at a time.
#include "cpu/index.h"

#include <cstring>
#include <type_traits>
#include <vector>

#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"
#include "cpu/norm_lanes.h"
#include "outer_dim_inner.h"

namespace qk::cpu {
namespace {


template <typename I>
inline int64_t checked_index(I v, int64_t size, const char* op, int64_t pos) {
  QK_CHECK_INDEX(v >= 0 && static_cast<int64_t>(v) < size, op, ": index ", static_cast<int64_t>(v),
                 " at position ", pos, " is out of range for a dim of size ", size);
  return static_cast<int64_t>(v);
}

// Index values as i64, range-checked (index tensors are small next to data).
std::vector<int64_t> index_values(const Tensor& index, int64_t size, const char* op) {
  const int64_t n = index.numel();  // not in the loop's test: numel() is a product over the shape, not a field
  std::vector<int64_t> out(static_cast<size_t>(n));
  dispatch_index(index.dtype(), op, [&](auto tag) {
    using I = decltype(tag);
    const I* p = index.data_ptr<I>();
    for (int64_t i = 0; i < n; ++i) out[i] = checked_index(p[i], size, op, i);
  });
  return out;
}

// Element-wise index walk shared by gather and scatter_add: for every
// position p of `index` (shape `is`), calls f(p, offset in the indexed
// tensor of strides `as`, offset in a tensor of strides `ss`), where the
// indexed tensor's `dim` coordinate is replaced by index[p]. Work is split
// by runs of the last dim, or by columns of it when `by_columns` (so that
// scatter writes from different tasks never collide).
template <typename F>
void index_walk(const Shape& is, const Shape& as, const Shape& ss, int64_t dim,
                const std::vector<int64_t>& idx, bool by_columns, F&& f) {
  const int64_t nd = static_cast<int64_t>(is.size());
  const int64_t last = is[nd - 1];
  const int64_t rows = last == 0 ? 0 : shape_numel(is) / last;
  auto run_rows = [&](int64_t rlo, int64_t rhi, int64_t jlo, int64_t jhi) {
    for (int64_t r = rlo; r < rhi; ++r) {
      int64_t rem = r, a_base = 0, s_base = 0;
      for (int64_t d = nd - 2; d >= 0; --d) {
        const int64_t c = rem % is[d];
        rem /= is[d];
        if (d != dim) a_base += c * as[d];
        s_base += c * ss[d];
      }
      for (int64_t j = jlo; j < jhi; ++j) {
        const int64_t p = r * last + j;
        int64_t a_off = a_base + idx[p] * as[dim];
        if (dim != nd - 1) a_off += j * as[nd - 1];
        f(p, a_off, s_base + j * ss[nd - 1]);
      }
    }
  };
  if (by_columns) {
    // Grain: not measured (docs/tensor.md, "Threads").
    parallel_for(0, last, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, rows)),
                 [&](int64_t lo, int64_t hi) { run_rows(0, rows, lo, hi); });
  } else {
    parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, last)),
                 [&](int64_t lo, int64_t hi) { run_rows(lo, hi, 0, last); });
  }
}

Shape at_least_1d(const Shape& s) { return s.empty() ? Shape{1} : s; }

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim, const Shape& out_shape) {
  Tensor out = empty(out_shape, tensors[0].dtype());
  const ONI o = split_at(out_shape, dim);
  const size_t item = out.itemsize();
  char* op = static_cast<char*>(out.raw_data());
  const int64_t row_bytes = o.n * o.inner * static_cast<int64_t>(item);
  // Byte offset of each input's piece within an output row.
  std::vector<int64_t> piece(tensors.size()), at(tensors.size());
  int64_t acc = 0;
  for (size_t j = 0; j < tensors.size(); ++j) {
    piece[j] = tensors[j].size(dim) * o.inner * static_cast<int64_t>(item);
    at[j] = acc;
    acc += piece[j];
  }
  parallel_for(0, o.outer * static_cast<int64_t>(tensors.size()),
               std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, row_bytes)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t t = lo; t < hi; ++t) {
                   const int64_t r = t / static_cast<int64_t>(tensors.size());
                   const size_t j = static_cast<size_t>(t % static_cast<int64_t>(tensors.size()));
                   if (piece[j] == 0) continue;
                   std::memcpy(op + r * row_bytes + at[j],
                               static_cast<const char*>(tensors[j].raw_data()) + r * piece[j],
                               piece[j]);
                 }
               });
  return out;
}

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  const Shape as = at_least_1d(a.shape());
  const ONI o = split_at(as, dim);
  const auto idx = index_values(index, o.n, "index_select");
  const int64_t k = static_cast<int64_t>(idx.size());
  Shape shape = a.shape();
  if (!shape.empty()) shape[dim] = k;
  Tensor out = empty(shape, a.dtype());
  const size_t row = static_cast<size_t>(o.inner) * a.itemsize();
  const char* ap = static_cast<const char*>(a.raw_data());
  char* op = static_cast<char*>(out.raw_data());
  // Grain: not measured (docs/tensor.md, "Threads").
  parallel_for(0, o.outer * k, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, o.inner)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t t = lo; t < hi; ++t) {
                   const int64_t r = t / k, i = t % k;
                   std::memcpy(op + t * row, ap + (r * o.n + idx[i]) * row, row);
                 }
               });
  return out;
}

// Note [Reduced-float sums]: f16/bf16 sums rounded at every add stall once
// the total's ulp passes the addends (in bf16, 256 + 1 == 256), and an index
// may repeat thousands of times (a frequent token). index_add and
// scatter_add accumulate in compute_t (f32 for f16/bf16) and round once; for
// the other dtypes the additions are the same, in the same order, as adding
// in place.
Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  const ONI o = split_at(at_least_1d(a.shape()), dim);
  const auto idx = index_values(index, o.n, "index_add");
  const int64_t k = static_cast<int64_t>(idx.size());
  // The source rows of each target row, in source order (a counting sort).
  std::vector<int64_t> start(static_cast<size_t>(o.n + 1), 0), order(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) ++start[idx[i] + 1];
  for (int64_t j = 0; j < o.n; ++j) start[j + 1] += start[j];
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < k; ++i) order[next[idx[i]]++] = i;
  }
  std::vector<int64_t> targets;
  for (int64_t j = 0; j < o.n; ++j)
    if (start[j + 1] > start[j]) targets.push_back(j);
  Tensor out = ops::clone(a);
  dispatch_numeric(a.dtype(), "index_add", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    T* op = out.data_ptr<T>();
    const T* sp = src.data_ptr<T>();
    // Tasks own (outer row, block of inner columns): disjoint writes.
    const int64_t bw = 1024, nblk = (o.inner + bw - 1) / bw;
    parallel_for(0, o.outer * nblk, 1, [&](int64_t lo, int64_t hi) {
      std::vector<A> acc(std::is_same_v<A, T> ? 0 : static_cast<size_t>(std::min(bw, o.inner)));
      for (int64_t t = lo; t < hi; ++t) {
        const int64_t r = t / nblk, c0 = (t % nblk) * bw, c1 = std::min(o.inner, c0 + bw);
        for (int64_t j : targets) {
          T* dst = op + (r * o.n + j) * o.inner;
          if constexpr (std::is_same_v<A, T>) {  // in place, no rounding between adds
            for (int64_t q = start[j]; q < start[j + 1]; ++q) {
              const T* s = sp + (r * k + order[q]) * o.inner;
              for (int64_t c = c0; c < c1; ++c) dst[c] += s[c];
            }
            continue;
          }
          for (int64_t c = c0; c < c1; ++c) acc[c - c0] = cast_value<A>(dst[c]);
          for (int64_t q = start[j]; q < start[j + 1]; ++q) {
            const T* s = sp + (r * k + order[q]) * o.inner;
            for (int64_t c = c0; c < c1; ++c) acc[c - c0] += cast_value<A>(s[c]);
          }
          for (int64_t c = c0; c < c1; ++c) dst[c] = cast_value<T>(acc[c - c0]);
        }
      }
    });
  });
  return out;
}

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  const Shape as = at_least_1d(a.shape()), is = at_least_1d(index.shape());
  const auto idx = index_values(index, as[dim], "gather");
  Tensor out = empty(index.shape(), a.dtype());
  dispatch_all(a.dtype(), "gather", [&](auto tag) {
    using T = decltype(tag);
    const T* ap = a.data_ptr<T>();
    T* op = out.data_ptr<T>();
    index_walk(is, contiguous_strides(as), contiguous_strides(is), dim, idx, false,
               [&](int64_t p, int64_t a_off, int64_t) { op[p] = ap[a_off]; });
  });
  return out;
}

Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  const Shape as = at_least_1d(a.shape()), is = at_least_1d(index.shape());
  const Shape ss = at_least_1d(src.shape());
  const auto idx = index_values(index, as[dim], "scatter_add");
  // Reduced floats add into an f32 copy (Note [Reduced-float sums]).
  const DType acc_dtype = is_reduced_float(a.dtype()) ? DType::f32 : a.dtype();
  Tensor out = acc_dtype == a.dtype() ? ops::clone(a) : ops::cast(a, acc_dtype);
  const bool dim_is_last = dim == static_cast<int64_t>(is.size()) - 1;
  dispatch_numeric(a.dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    A* op = out.data_ptr<A>();
    const T* sp = src.data_ptr<T>();
    // Along the last dim a run only writes its own output row; otherwise
    // columns of the last dim are disjoint.
    index_walk(is, contiguous_strides(as), contiguous_strides(ss), dim, idx,
               /*by_columns=*/!dim_is_last, [&](int64_t, int64_t o_off, int64_t s_off) {
                 op[o_off] += cast_value<A>(sp[s_off]);
               });
  });
  return acc_dtype == a.dtype() ? out : ops::cast(out, a.dtype());
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  const auto idx = index_values(index, num_classes, "one_hot");
  Shape shape = index.shape();
  shape.push_back(num_classes);
  Tensor out = zeros(shape, DType::i64);
  int64_t* op = out.data_ptr<int64_t>();
  for (size_t i = 0; i < idx.size(); ++i) op[static_cast<int64_t>(i) * num_classes + idx[i]] = 1;
  return out;
}

}  // namespace qk::cpu
