// Softmax and log_softmax on the CPU. x is viewed as [outer, D, inner] with
// the softmax over D (split_at's [outer, n, inner], n = D).
//   inner == 1 (the last dim, the common case): one row of D per task item;
//     softmax: max, then exp into a row buffer with the sum, then scale;
//     log_softmax: max, sum of exp, then x - (max + log(sum)).
//   inner > 1: tiles of D x (up to 64 inner positions), so each pass runs
//     along contiguous inner elements.
// Numerically stable: the row max is subtracted before exp.
#include "cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "qk/base/thread_pool.h"
#include "cpu/norm_lanes.h"
#include "outer_dim_inner.h"

namespace qk::cpu {
namespace {

// Columns per tile of the strided (inner > 1) case; not measured against
// other widths.
constexpr int64_t kTile = 64;

template <typename T>
void softmax_rows(const T* xp, T* op, int64_t rows, int64_t D, bool log) {
  using A = acc_t<T>;
  // Grain: not measured (docs/tensor.md, "Threads").
  parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(D, 1)),
               [&](int64_t lo, int64_t hi) {
                 std::vector<A> buf(log ? 0 : D);
                 for (int64_t r = lo; r < hi; ++r) {
                   const T* x = xp + r * D;
                   T* o = op + r * D;
                   const A m = row_max<A>(x, D);
                   constexpr int L = kLanes<A>;
                   A acc[L] = {};
                   int64_t i = 0;
                   if (log) {
                     for (; i + L <= D; i += L)
                       for (int j = 0; j < L; ++j) acc[j] += exp_vec(ld<A>(x, i + j) - m);
                   } else {
                     for (; i + L <= D; i += L)
                       for (int j = 0; j < L; ++j) {
                         const A e = exp_vec(ld<A>(x, i + j) - m);
                         buf[i + j] = e;
                         acc[j] += e;
                       }
                   }
                   A s = 0;
                   for (; i < D; ++i) {
                     const A e = exp_vec(ld<A>(x, i) - m);
                     if (!log) buf[i] = e;
                     s += e;
                   }
                   for (int j = 0; j < L; ++j) s += acc[j];
                   if (log) {
                     const A lse = m + std::log(s);
                     for (int64_t k = 0; k < D; ++k) st(o, k, ld<A>(x, k) - lse);
                   } else {
                     const A inv = A(1) / s;
                     for (int64_t k = 0; k < D; ++k) st(o, k, buf[k] * inv);
                   }
                 }
               });
}

template <typename T>
void softmax_tiles(const T* xp, T* op, ONI d, bool log) {
  using A = acc_t<T>;
  const int64_t tiles_per = (d.inner + kTile - 1) / kTile;
  // Grain: not measured (docs/tensor.md, "Threads").
  parallel_for(0, d.outer * tiles_per, std::max<int64_t>(1, 4096 / (d.n * kTile)),
               [&](int64_t lo, int64_t hi) {
                 A mx[kTile], sm[kTile];
                 for (int64_t t = lo; t < hi; ++t) {
                   const int64_t o = t / tiles_per, i0 = (t % tiles_per) * kTile;
                   const int64_t w = std::min(kTile, d.inner - i0);
                   const T* x = xp + o * d.n * d.inner + i0;
                   T* out = op + o * d.n * d.inner + i0;
                   for (int64_t i = 0; i < w; ++i) {
                     mx[i] = -std::numeric_limits<A>::infinity();
                     sm[i] = 0;
                   }
                   for (int64_t k = 0; k < d.n; ++k)
                     for (int64_t i = 0; i < w; ++i) {
                       const A v = ld<A>(x, k * d.inner + i);
                       mx[i] = v > mx[i] ? v : mx[i];
                     }
                   for (int64_t k = 0; k < d.n; ++k)
                     for (int64_t i = 0; i < w; ++i)
                       sm[i] += exp_vec(ld<A>(x, k * d.inner + i) - mx[i]);
                   if (log) {
                     for (int64_t i = 0; i < w; ++i) sm[i] = mx[i] + std::log(sm[i]);  // lse
                     for (int64_t k = 0; k < d.n; ++k)
                       for (int64_t i = 0; i < w; ++i)
                         st(out, k * d.inner + i, ld<A>(x, k * d.inner + i) - sm[i]);
                   } else {
                     for (int64_t i = 0; i < w; ++i) sm[i] = A(1) / sm[i];
                     for (int64_t k = 0; k < d.n; ++k)
                       for (int64_t i = 0; i < w; ++i)
                         st(out, k * d.inner + i,
                            exp_vec(ld<A>(x, k * d.inner + i) - mx[i]) * sm[i]);
                   }
                 }
               });
}

// softmax: dx = y * (dy - sum(dy * y));  log_softmax: dx = dy - exp(y) * sum(dy).
template <typename T>
void softmax_bwd_rows(const T* gp, const T* yp, T* dp, int64_t rows, int64_t D, bool log) {
  using A = acc_t<T>;
  // Grain: not measured (docs/tensor.md, "Threads").
  parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(D, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) {
                   const T* g = gp + r * D;
                   const T* y = yp + r * D;
                   T* dx = dp + r * D;
                   constexpr int L = kLanes<A>;
                   A acc[L] = {};
                   int64_t i = 0;
                   // Two loops rather than a select inside one: the select kept GCC
                   // from vectorizing the lanes.
                   if (log) {
                     for (; i + L <= D; i += L)
                       for (int j = 0; j < L; ++j) acc[j] += ld<A>(g, i + j);
                   } else {
                     for (; i + L <= D; i += L)
                       for (int j = 0; j < L; ++j) acc[j] += ld<A>(g, i + j) * ld<A>(y, i + j);
                   }
                   A s = 0;
                   for (; i < D; ++i) s += log ? ld<A>(g, i) : ld<A>(g, i) * ld<A>(y, i);
                   for (int j = 0; j < L; ++j) s += acc[j];
                   if (log) {
                     for (int64_t k = 0; k < D; ++k)
                       st(dx, k, ld<A>(g, k) - exp_vec(ld<A>(y, k)) * s);
                   } else {
                     for (int64_t k = 0; k < D; ++k) st(dx, k, ld<A>(y, k) * (ld<A>(g, k) - s));
                   }
                 }
               });
}

template <typename T>
void softmax_bwd_tiles(const T* gp, const T* yp, T* dp, ONI d, bool log) {
  using A = acc_t<T>;
  const int64_t tiles_per = (d.inner + kTile - 1) / kTile;
  parallel_for(0, d.outer * tiles_per, 1, [&](int64_t lo, int64_t hi) {
    A sm[kTile];
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t o = t / tiles_per, i0 = (t % tiles_per) * kTile;
      const int64_t w = std::min(kTile, d.inner - i0);
      const int64_t base = o * d.n * d.inner + i0;
      const T* g = gp + base;
      const T* y = yp + base;
      T* dx = dp + base;
      for (int64_t i = 0; i < w; ++i) sm[i] = 0;
      for (int64_t k = 0; k < d.n; ++k)
        for (int64_t i = 0; i < w; ++i) {
          const int64_t p = k * d.inner + i;
          sm[i] += log ? ld<A>(g, p) : ld<A>(g, p) * ld<A>(y, p);
        }
      for (int64_t k = 0; k < d.n; ++k)
        for (int64_t i = 0; i < w; ++i) {
          const int64_t p = k * d.inner + i;
          st(dx, p,
             log ? ld<A>(g, p) - exp_vec(ld<A>(y, p)) * sm[i]
                 : ld<A>(y, p) * (ld<A>(g, p) - sm[i]));
        }
    }
  });
}

}  // namespace

Tensor softmax_forward(const Tensor& x, int64_t dim, bool log) {
  Tensor out = empty(x.shape(), x.dtype());
  const ONI d = split_at(x.shape(), dim);
  if (x.numel() == 0) return out;
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = decltype(tag);
    if (d.inner == 1)
      softmax_rows<T>(x.data_ptr<T>(), out.data_ptr<T>(), d.outer, d.n, log);
    else
      softmax_tiles<T>(x.data_ptr<T>(), out.data_ptr<T>(), d, log);
  });
  return out;
}

Tensor softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim, bool log) {
  Tensor dx = empty(out.shape(), out.dtype());
  const ONI d = split_at(out.shape(), dim);
  if (out.numel() == 0) return dx;
  dispatch_floating(out.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    if (d.inner == 1)
      softmax_bwd_rows<T>(grad.data_ptr<T>(), out.data_ptr<T>(), dx.data_ptr<T>(), d.outer, d.n,
                          log);
    else
      softmax_bwd_tiles<T>(grad.data_ptr<T>(), out.data_ptr<T>(), dx.data_ptr<T>(), d, log);
  });
  return dx;
}

}  // namespace qk::cpu
