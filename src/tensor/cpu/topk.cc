// topk on the CPU: the indexed dim is moved last (one contiguous copy), then
// each row's k best positions are found with partial_sort over an index
// array. NaN ranks above every number (as PyTorch); ties keep the lower
// index first, so results are deterministic.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"
#include "cpu/index.h"

namespace qk::cpu {
namespace {

template <typename V>
bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>)
    return std::isnan(v);
  else
    return false;
}

template <typename T>
void topk_rows(const T* ap, T* vp, int64_t* ip, int64_t rows, int64_t n, int64_t k, bool largest) {
  using A = compute_t<T>;
  // Grain: not measured (docs/tensor.md, "Threads").
  parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, n)),
               [&](int64_t lo, int64_t hi) {
                 std::vector<int64_t> order(static_cast<size_t>(n));
                 std::vector<A> vals(static_cast<size_t>(n));
                 for (int64_t r = lo; r < hi; ++r) {
                   const T* row = ap + r * n;
                   for (int64_t i = 0; i < n; ++i) vals[i] = cast_value<A>(row[i]);
                   std::iota(order.begin(), order.end(), int64_t{0});
                   // "better" is a strict weak order: NaN first, then by value, then index.
                   auto better = [&](int64_t i, int64_t j) {
                     const A x = vals[i], y = vals[j];
                     const bool xn = is_nan(x), yn = is_nan(y);
                     if (xn != yn) return xn;
                     if (!xn && x != y) return largest ? x > y : x < y;
                     return i < j;
                   };
                   std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
                   for (int64_t j = 0; j < k; ++j) {
                     vp[r * k + j] = row[order[j]];
                     ip[r * k + j] = order[j];
                   }
                 }
               });
}

}  // namespace

std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim, bool largest,
                               bool /*sorted: results are always sorted*/) {
  const int64_t last = a.dim() - 1;
  Tensor moved = dim == last ? a : ops::contiguous(ops::transpose(a, dim, last));
  const int64_t n = moved.size(last), rows = n == 0 ? 0 : moved.numel() / n;
  Shape shape = moved.shape();
  shape[last] = k;
  Tensor values = empty(shape, a.dtype()), indices = empty(shape, DType::i64);
  if (k > 0 && rows > 0) {
    dispatch_numeric(a.dtype(), "topk", [&](auto tag) {
      using T = decltype(tag);
      topk_rows<T>(moved.data_ptr<T>(), values.data_ptr<T>(), indices.data_ptr<int64_t>(), rows, n,
                   k, largest);
    });
  }
  if (dim != last) {
    values = ops::contiguous(ops::transpose(values, dim, last));
    indices = ops::contiguous(ops::transpose(indices, dim, last));
  }
  return {values, indices};
}

}  // namespace qk::cpu
