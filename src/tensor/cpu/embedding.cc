// Embedding lookup on the CPU: out[i, :] = weight[indices[i], :], a row copy
// (any dtype). The backward adds grad rows into dweight [V, D]; to avoid
// write races without atomics, each task owns a range of vocabulary rows and
// scans all indices (indices are few next to M * D multiply-adds), summing
// each row in the accumulation type (f32 for f16/bf16) before one rounding.
#include "cpu/embedding.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "qk/base/thread_pool.h"
#include "cpu/norm_lanes.h"

namespace qk::cpu {
namespace {

template <typename I>
void check_indices(const I* ip, int64_t m, int64_t V, const char* op) {
  for (int64_t i = 0; i < m; ++i)
    QK_CHECK_INDEX(ip[i] >= 0 && static_cast<int64_t>(ip[i]) < V, op, ": index ",
                   static_cast<int64_t>(ip[i]), " at position ", i, " is out of range for ", V,
                   " embeddings");
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  const int64_t V = weight.size(0), D = weight.size(1), M = indices.numel();
  Shape shape = indices.shape();
  shape.push_back(D);
  Tensor out = empty(shape, weight.dtype());
  const size_t row_bytes = static_cast<size_t>(D) * weight.itemsize();
  const char* wp = static_cast<const char*>(weight.raw_data());
  char* op = static_cast<char*>(out.raw_data());
  dispatch_index(indices.dtype(), "embedding", [&](auto itag) {
    using I = decltype(itag);
    const I* ip = indices.data_ptr<I>();
    check_indices(ip, M, V, "embedding");
    // Grain: not measured (docs/tensor.md, "Threads").
    parallel_for(0, M, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, D)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t i = lo; i < hi; ++i)
                     std::memcpy(op + i * row_bytes, wp + static_cast<int64_t>(ip[i]) * row_bytes,
                                 row_bytes);
                 });
  });
  return out;
}

Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx) {
  const int64_t V = num_weights, D = grad.size(-1), M = indices.numel();
  Tensor dw = zeros({V, D}, grad.dtype());
  dispatch_floating(grad.dtype(), "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* gp = grad.data_ptr<T>();
    T* dp = dw.data_ptr<T>();
    dispatch_index(indices.dtype(), "embedding_backward", [&](auto itag) {
      using I = decltype(itag);
      const I* ip = indices.data_ptr<I>();
      check_indices(ip, M, V, "embedding_backward");
      const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(num_threads(), V));
      parallel_for(0, parts, 1, [&](int64_t plo, int64_t phi) {
        std::vector<int64_t> start, order, next;
        std::vector<A> acc(static_cast<size_t>(D));
        for (int64_t part = plo; part < phi; ++part) {
          int64_t vlo, vhi;
          block_range(V, parts, part, vlo, vhi);
          if constexpr (std::is_same_v<A, T>) {  // f32/f64: add in place
            for (int64_t i = 0; i < M; ++i) {
              const int64_t v = static_cast<int64_t>(ip[i]);
              if (v < vlo || v >= vhi || v == padding_idx) continue;
              T* drow = dp + v * D;
              const T* grow = gp + i * D;
              for (int64_t k = 0; k < D; ++k) drow[k] += grow[k];
            }
            continue;
          }
          // f16/bf16: sums rounded at every add stall (in bf16, 256 + 1 ==
          // 256), and a frequent token has thousands of rows. Bucket this
          // range's positions by row (a counting sort, in position order),
          // sum each row in f32 and round once.
          const int64_t n = vhi - vlo;
          start.assign(static_cast<size_t>(n + 1), 0);
          for (int64_t i = 0; i < M; ++i) {
            const int64_t v = static_cast<int64_t>(ip[i]);
            if (v >= vlo && v < vhi && v != padding_idx) ++start[v - vlo + 1];
          }
          for (int64_t r = 0; r < n; ++r) start[r + 1] += start[r];
          order.resize(static_cast<size_t>(start[n]));
          next.assign(start.begin(), start.end() - 1);
          for (int64_t i = 0; i < M; ++i) {
            const int64_t v = static_cast<int64_t>(ip[i]);
            if (v >= vlo && v < vhi && v != padding_idx) order[next[v - vlo]++] = i;
          }
          for (int64_t r = 0; r < n; ++r) {
            if (start[r] == start[r + 1]) continue;  // dw is zero there already
            const T* first = gp + order[start[r]] * D;
            for (int64_t k = 0; k < D; ++k) acc[k] = ld<A>(first, k);
            for (int64_t j = start[r] + 1; j < start[r + 1]; ++j) {
              const T* grow = gp + order[j] * D;
              for (int64_t k = 0; k < D; ++k) acc[k] += ld<A>(grow, k);
            }
            T* drow = dp + (vlo + r) * D;
            for (int64_t k = 0; k < D; ++k) st(drow, k, acc[k]);
          }
        }
      });
    });
  });
  return dw;
}

}  // namespace qk::cpu
