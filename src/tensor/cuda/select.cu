// clamp and its backward, where, and max/min along a dim on CUDA, with the
// CPU kernels' rules (src/tensor/cpu/elementwise.cc, cpu/reduce.cc):
//  * clamp compares in the compute type (f32 for f16/bf16): v < lo -> lo,
//    then v > hi -> hi, so NaN passes through and -0 stays -0;
//  * clamp backward passes grad where lo <= x <= hi in f64 (NaN x: 0);
//  * where copies bits;
//  * max/min: the first NaN wins, else the first occurrence of the extreme.
//    Threads fold their elements with a combine that is associative and
//    commutative (NaN over numbers, then the extreme, ties and NaN against
//    NaN to the lower index), so any split of a row gives the CPU's scan.
#include <cstdint>
#include <type_traits>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "index_kernels.h"
#include "strided.cuh"

namespace qk::cuda {

namespace {

constexpr int kThreads = 256;

// ---- clamp, clamp backward, where ---------------------------------------

// Functors, not device lambdas (the build has no --extended-lambda).
template <typename T>
struct ClampFn {
  using C = typename ComputeOf<T>::type;
  T* out;
  const T* a;
  C lo, hi;
  bool has_lo, has_hi;
  __device__ void operator()(const int64_t (&off)[2]) const {
    C v = convert<C>(a[off[1]]);
    if (has_lo && v < lo) v = lo;
    if (has_hi && v > hi) v = hi;
    out[off[0]] = convert<T>(v);
  }
};

template <typename T, typename X>
struct ClampBackwardFn {
  T* dx;
  const T* grad;
  const X* x;
  double lo, hi;
  __device__ void operator()(const int64_t (&off)[3]) const {
    const double v = convert<double>(x[off[2]]);
    dx[off[0]] = (v >= lo && v <= hi) ? grad[off[1]] : convert<T>(typename ComputeOf<T>::type(0));
  }
};

template <typename U>
struct WhereFn {
  U* out;
  const bool* cond;
  const U* a;
  const U* b;
  __device__ void operator()(const int64_t (&off)[4]) const { out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]]; }
};

template <int K, typename F>
void for_each(const ElementwiseLayout& l, const F& f, cudaStream_t stream) {
  strided_for_each<K><<<strided_grid(l.numel, kThreads), kThreads, 0, stream>>>(l, f);
  QK_CUDA_CHECK(cudaGetLastError());
}

// The storage types of an integer dtype's clamp bounds: i64 bits through.
template <typename C>
C bound(double f, int64_t i) {
  if constexpr (std::is_floating_point_v<C>) return static_cast<C>(f);
  else return static_cast<C>(i);
}

// ---- max / min along a dim -----------------------------------------------

template <typename C>
__device__ __forceinline__ bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) return v != v;
  else return false;
}

// (bv, bi) <- the better of (bv, bi) and (v, i) (i < 0: no element).
template <bool IsMax, typename C>
__device__ __forceinline__ void take(C& bv, int64_t& bi, C v, int64_t i) {
  if (i < 0) return;
  if (bi < 0) {
    bv = v;
    bi = i;
    return;
  }
  const bool bn = is_nan(bv), vn = is_nan(v);
  bool better;
  if (bn || vn) better = (bn && vn) ? i < bi : vn;
  else if (v == bv) better = i < bi;
  else better = IsMax ? v > bv : v < bv;
  if (better) {
    bv = v;
    bi = i;
  }
}

// Rows of a contiguous [rows, n]: G threads per row (a warp, or the block),
// kThreads / G rows per block, then a tree over shared memory.
template <bool IsMax, typename T, int G>
__global__ void max_min_rows(T* values, int64_t* indices, const T* a, int64_t rows, int64_t n) {
  using C = typename ComputeOf<T>::type;
  constexpr int R = kThreads / G;
  __shared__ C sv[kThreads];
  __shared__ int64_t si[kThreads];
  const int g = threadIdx.x / G, lane = threadIdx.x % G;
  // Every thread of the block runs the same iterations (barriers inside).
  for (int64_t base = blockIdx.x * int64_t(R); base < rows; base += int64_t(gridDim.x) * R) {
    const int64_t r = base + g;
    C bv = C(0);
    int64_t bi = -1;
    if (r < rows) {
      const T* row = a + r * n;
      for (int64_t j = lane; j < n; j += G) take<IsMax>(bv, bi, convert<C>(row[j]), j);
    }
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int s = G / 2; s > 0; s /= 2) {
      if (lane < s) {
        C v = sv[threadIdx.x];
        int64_t i = si[threadIdx.x];
        take<IsMax>(v, i, sv[threadIdx.x + s], si[threadIdx.x + s]);
        sv[threadIdx.x] = v;
        si[threadIdx.x] = i;
      }
      __syncthreads();
    }
    if (lane == 0 && r < rows) {
      const int64_t i = si[threadIdx.x];
      values[r] = a[r * n + i];  // the element itself: the CPU's value (exact in C)
      indices[r] = i;
    }
    __syncthreads();  // sv/si reused by the next rows
  }
}

// Columns of a contiguous [outer, n, inner]: one thread per (o, i) walking n
// (neighbouring threads read neighbouring elements).
template <bool IsMax, typename T>
__global__ void max_min_columns(T* values, int64_t* indices, const T* a, int64_t outer, int64_t n, int64_t inner) {
  using C = typename ComputeOf<T>::type;
  const int64_t total = outer * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, c = t % inner;
    const T* col = a + o * n * inner + c;
    C bv = C(0);
    int64_t bi = -1;
    for (int64_t j = 0; j < n; ++j) {
      take<IsMax>(bv, bi, convert<C>(col[j * inner]), j);
      if (is_nan(bv)) break;  // NaN wins, first occurrence
    }
    values[t] = col[bi * inner];
    indices[t] = bi;
  }
}

template <bool IsMax, typename T>
void max_min_as(void* values, int64_t* indices, const void* a, int64_t outer, int64_t n, int64_t inner,
                cudaStream_t stream) {
  T* v = static_cast<T*>(values);
  const T* x = static_cast<const T*>(a);
  if (inner == 1) {
    if (n >= 1024) {
      max_min_rows<IsMax, T, kThreads><<<strided_grid(outer, 1), kThreads, 0, stream>>>(v, indices, x, outer, n);
    } else {
      constexpr int R = kThreads / 32;
      max_min_rows<IsMax, T, 32><<<strided_grid(outer, R), kThreads, 0, stream>>>(v, indices, x, outer, n);
    }
  } else {
    max_min_columns<IsMax, T><<<strided_grid(outer * inner, kThreads), kThreads, 0, stream>>>(v, indices, x, outer,
                                                                                             n, inner);
  }
  QK_CUDA_CHECK(cudaGetLastError());
}

template <typename F>
void dispatch_numeric(int code, F&& f) {
  if (code != kBool) dispatch(code, [&](auto t) {
      using T = decltype(t);
      if constexpr (!std::is_same_v<T, bool>) f(T{});
    });
}

}  // namespace

void launch_clamp(void* out, const void* a, int dtype, const ClampBounds& b, const ElementwiseLayout& l,
                  cudaStream_t stream) {
  if (l.numel <= 0) return;
  dispatch_numeric(dtype, [&](auto t) {
    using T = decltype(t);
    using C = typename ComputeOf<T>::type;
    ClampFn<T> f{static_cast<T*>(out), static_cast<const T*>(a), bound<C>(b.lo_f, b.lo_i), bound<C>(b.hi_f, b.hi_i),
                 b.has_lo, b.has_hi};
    for_each<2>(l, f, stream);
  });
}

void launch_clamp_backward(void* dx, const void* grad, const void* x, int dtype, int x_dtype, double lo, double hi,
                           const ElementwiseLayout& l, cudaStream_t stream) {
  if (l.numel <= 0) return;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    dispatch(x_dtype, [&](auto xt) {
      using X = decltype(xt);
      ClampBackwardFn<T, X> f{static_cast<T*>(dx), static_cast<const T*>(grad), static_cast<const X*>(x), lo, hi};
      for_each<3>(l, f, stream);
    });
  });
}

void launch_where(void* out, const void* cond, const void* a, const void* b, size_t itemsize,
                  const ElementwiseLayout& l, cudaStream_t stream) {
  if (l.numel <= 0) return;
  auto run = [&](auto u) {
    using U = decltype(u);
    WhereFn<U> f{static_cast<U*>(out), static_cast<const bool*>(cond), static_cast<const U*>(a),
                 static_cast<const U*>(b)};
    for_each<4>(l, f, stream);
  };
  switch (itemsize) {
    case 1: run(uint8_t{}); break;
    case 2: run(uint16_t{}); break;
    case 4: run(uint32_t{}); break;
    case 8: run(static_cast<unsigned long long>(0)); break;
  }
}

void launch_max_min_dim(bool is_max, void* values, int64_t* indices, const void* a, int dtype, int64_t outer,
                        int64_t n, int64_t inner, cudaStream_t stream) {
  if (outer * inner <= 0 || n <= 0) return;
  dispatch_numeric(dtype, [&](auto t) {
    using T = decltype(t);
    if (is_max) max_min_as<true, T>(values, indices, a, outer, n, inner, stream);
    else max_min_as<false, T>(values, indices, a, outer, n, inner, stream);
  });
}

}  // namespace qk::cuda
