// Vectorizable row reductions shared by the normalisation, softmax and loss
// kernels.
//
// GCC does not vectorize a plain `s += x[i]` over floats without
// -ffast-math (it may not reassociate). Accumulating into an array of
// kLanes independent partial sums is a reassociation we choose explicitly,
// so the loop becomes SIMD adds; it is also more accurate than one serial
// accumulator (each lane sums n/kLanes values).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "qk/tensor/dtype.h"
#include "qk/tensor/tensor.h"

namespace qk::cpu {

// Accumulator type of a kernel over storage type T: double for f64, else float.
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename A>
inline constexpr int kLanes = std::is_same_v<A, double> ? 8 : 16;

template <typename A, typename T>
inline A ld(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, A>) {
    return p[i];
  } else {
    return static_cast<A>(static_cast<float>(p[i]));
  }
}

template <typename T, typename A>
inline void st(T* p, int64_t i, A v) {
  if constexpr (std::is_same_v<T, A>) {
    p[i] = v;
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    p[i] = static_cast<T>(v);
  } else {
    p[i] = T(static_cast<float>(v));
  }
}

// sum_i (p[i] - shift)
template <typename A, typename T>
inline A row_sum(const T* p, int64_t n, A shift = A(0)) {
  constexpr int L = kLanes<A>;
  A acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) acc[j] += ld<A>(p, i + j) - shift;
  A s = 0;
  for (; i < n; ++i) s += ld<A>(p, i) - shift;
  for (int j = 0; j < L; ++j) s += acc[j];
  return s;
}

// s1 = sum (p[i] - shift), s2 = sum (p[i] - shift)^2, in one pass.
template <typename A, typename T>
inline void row_sum_sumsq(const T* p, int64_t n, A shift, A& s1, A& s2) {
  constexpr int L = kLanes<A>;
  A a[L] = {}, b[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) {
      A v = ld<A>(p, i + j) - shift;
      a[j] += v;
      b[j] += v * v;
    }
  s1 = 0;
  s2 = 0;
  for (; i < n; ++i) {
    A v = ld<A>(p, i) - shift;
    s1 += v;
    s2 += v * v;
  }
  for (int j = 0; j < L; ++j) {
    s1 += a[j];
    s2 += b[j];
  }
}

// s1 = sum dy[i], s2 = sum dy[i] * (x[i] - xshift).
template <typename A, typename T>
inline void row_dot_sums(const T* dy, const T* x, int64_t n, A xshift, A& s1, A& s2) {
  constexpr int L = kLanes<A>;
  A a[L] = {}, b[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) {
      A g = ld<A>(dy, i + j);
      a[j] += g;
      b[j] += g * (ld<A>(x, i + j) - xshift);
    }
  s1 = 0;
  s2 = 0;
  for (; i < n; ++i) {
    A g = ld<A>(dy, i);
    s1 += g;
    s2 += g * (ld<A>(x, i) - xshift);
  }
  for (int j = 0; j < L; ++j) {
    s1 += a[j];
    s2 += b[j];
  }
}

// Lane sums kept across many short rows (batch_norm's N rows of S per
// channel): reducing 16 lanes after every row of, say, 256 values costs as
// much as the row. Flush into double every ~kFlushEvery values so that each
// float lane sums at most ~1024 values.
template <typename A>
struct LaneSums2 {
  static constexpr int L = kLanes<A>;
  static constexpr int64_t kFlushEvery = 1024 * L;
  A a[L] = {}, b[L] = {};
  int64_t pending = 0;
  double s1 = 0, s2 = 0;

  // a += (p - shift), b += (p - shift)^2
  template <typename T>
  void add_moments(const T* p, int64_t n, A shift) {
    int64_t i = 0;
    A la[L], lb[L];  // locals: the compiler keeps them in vector registers
    std::memcpy(la, a, sizeof(la));
    std::memcpy(lb, b, sizeof(lb));
    for (; i + L <= n; i += L) {
      A w[L];
      widen(w, p + i);
      for (int j = 0; j < L; ++j) {
        const A v = w[j] - shift;
        la[j] += v;
        lb[j] += v * v;
      }
    }
    std::memcpy(a, la, sizeof(la));
    std::memcpy(b, lb, sizeof(lb));
    for (; i < n; ++i) {
      const A v = ld<A>(p, i) - shift;
      a[0] += v;
      b[0] += v * v;
    }
    count(n);
  }
  // a += dy, b += dy * (x - shift)
  template <typename T>
  void add_dot(const T* dy, const T* x, int64_t n, A shift) {
    int64_t i = 0;
    A la[L], lb[L];
    std::memcpy(la, a, sizeof(la));
    std::memcpy(lb, b, sizeof(lb));
    for (; i + L <= n; i += L) {
      A g[L], v[L];
      widen(g, dy + i);
      widen(v, x + i);
      for (int j = 0; j < L; ++j) {
        la[j] += g[j];
        lb[j] += g[j] * (v[j] - shift);
      }
    }
    std::memcpy(a, la, sizeof(la));
    std::memcpy(b, lb, sizeof(lb));
    for (; i < n; ++i) {
      const A g = ld<A>(dy, i);
      a[0] += g;
      b[0] += g * (ld<A>(x, i) - shift);
    }
    count(n);
  }
  // One block of L values widened to A first: GCC vectorises this copy
  // (bf16: zero-extend and shift) but not a widening load fused into the lane
  // sums, which it leaves as L scalar loads.
  template <typename T>
  static void widen(A (&w)[L], const T* p) {
    if constexpr (std::is_same_v<T, BFloat16> && std::is_same_v<A, float>) {
      uint32_t u[L];
      for (int j = 0; j < L; ++j) u[j] = static_cast<uint32_t>(p[j].bits) << 16;
      std::memcpy(w, u, sizeof(u));
    } else {
      for (int j = 0; j < L; ++j) w[j] = ld<A>(p, j);
    }
  }
  void count(int64_t n) {
    pending += n;
    if (pending >= kFlushEvery) flush();
  }
  void flush() {
    for (int j = 0; j < L; ++j) {
      s1 += a[j];
      s2 += b[j];
      a[j] = 0;
      b[j] = 0;
    }
    pending = 0;
  }
};

// max_i p[i]. A NaN may be skipped here, but it still turns the row's
// softmax into NaNs through exp(NaN - max), as in PyTorch.
template <typename A, typename T>
inline A row_max(const T* p, int64_t n) {
  constexpr int L = kLanes<A>;
  A m = -std::numeric_limits<A>::infinity();
  A acc[L];
  for (int j = 0; j < L; ++j) acc[j] = m;
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) {
      A v = ld<A>(p, i + j);
      acc[j] = v > acc[j] ? v : acc[j];
    }
  for (; i < n; ++i) {
    A v = ld<A>(p, i);
    m = v > m ? v : m;
  }
  for (int j = 0; j < L; ++j) m = acc[j] > m ? acc[j] : m;
  return m;
}

// A small 1-D parameter (weight, bias, running stats) as accumulator values;
// empty when undefined. Parameters may have a different floating dtype from
// the input (f32 weights with bf16 activations under autocast).
template <typename A>
inline std::vector<A> param_values(const Tensor& t) {
  std::vector<A> out;
  if (!t.defined()) return out;
  auto v = t.to_vector<double>();
  out.assign(v.begin(), v.end());
  return out;
}

// Splits [0, n) into `parts` near-equal blocks; block b is [lo, hi).
inline void block_range(int64_t n, int64_t parts, int64_t b, int64_t& lo, int64_t& hi) {
  lo = n * b / parts;
  hi = n * (b + 1) / parts;
}

}  // namespace qk::cpu
