// Row reductions (sum, mean, amax, amin) and (log_)softmax forward and
// backward, one thread block per row of a contiguous [rows, n] matrix; the
// glue (reduce_ops.cc) moves the reduced dimensions last. Accumulation as
// the CPU's: f64 for floating sums, i64 for integers; softmax in float (f64
// for f64). The order of additions is fixed by the launch, so results repeat.
#include <cfloat>
#include <cstdint>
#include <limits>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "kernels.h"

namespace qk::cuda {

namespace {

enum : int { kSum, kMean, kAmax, kAmin };  // qk::cpu::ReduceOp

template <int Op, typename Acc>
struct Combine {
  __device__ Acc operator()(Acc x, Acc y) const {
    if constexpr (Op == kAmax) return (y > x || y != y) ? y : x;
    if constexpr (Op == kAmin) return (y < x || y != y) ? y : x;
    return x + y;
  }
};

template <int Op, typename Acc>
__device__ Acc init_value() {
  if constexpr (Op == kAmax) return std::numeric_limits<Acc>::lowest();
  if constexpr (Op == kAmin) return std::numeric_limits<Acc>::max();
  return Acc(0);
}

template <int Op, typename T, typename Acc>
__global__ void reduce_rows(T* out, const T* a, int64_t n) {
  __shared__ Acc scratch[kBlock];
  const T* row = a + blockIdx.x * n;
  Combine<Op, Acc> comb;
  Acc acc = init_value<Op, Acc>();
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) acc = comb(acc, convert<Acc>(row[j]));
  acc = block_reduce(acc, comb, scratch);
  if (threadIdx.x == 0) {
    if constexpr (Op == kMean) acc = static_cast<Acc>(static_cast<double>(acc) / static_cast<double>(n));
    out[blockIdx.x] = convert<T>(acc);
  }
}

template <int Op, typename T>
void reduce_as(void* out, const void* a, int64_t rows, int64_t n, cudaStream_t s) {
  using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  reduce_rows<Op, T, Acc><<<static_cast<unsigned>(rows), kBlock, 0, s>>>(static_cast<T*>(out),
                                                                         static_cast<const T*>(a), n);
  QK_CUDA_CHECK(cudaGetLastError());
}

struct Max {
  template <typename C>
  __device__ C operator()(C x, C y) const { return (y > x || y != y) ? y : x; }
};
struct Add {
  template <typename C>
  __device__ C operator()(C x, C y) const { return x + y; }
};

__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }

template <typename T>
__global__ void softmax_rows(T* y, const T* x, int64_t n, bool log) {
  using C = typename ComputeOf<T>::type;
  __shared__ C scratch[kBlock];
  const T* xr = x + blockIdx.x * n;
  T* yr = y + blockIdx.x * n;
  C m = -std::numeric_limits<C>::infinity();
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = Max()(m, convert<C>(xr[j]));
  m = block_reduce(m, Max(), scratch);
  C sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += m_exp(convert<C>(xr[j]) - m);
  sum = block_reduce(sum, Add(), scratch);
  if (log) {
    const C lse = m + m_log(sum);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = convert<T>(convert<C>(xr[j]) - lse);
  } else {
    const C inv = C(1) / sum;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = convert<T>(m_exp(convert<C>(xr[j]) - m) * inv);
  }
}

// softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g).
template <typename T>
__global__ void softmax_backward_rows(T* dx, const T* g, const T* y, int64_t n, bool log) {
  using C = typename ComputeOf<T>::type;
  __shared__ C scratch[kBlock];
  const int64_t base = blockIdx.x * n;
  C acc = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    acc += log ? convert<C>(g[base + j]) : convert<C>(g[base + j]) * convert<C>(y[base + j]);
  acc = block_reduce(acc, Add(), scratch);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const C gj = convert<C>(g[base + j]), yj = convert<C>(y[base + j]);
    dx[base + j] = convert<T>(log ? gj - m_exp(yj) * acc : yj * (gj - acc));
  }
}

}  // namespace

void launch_reduce_rows(int op, void* out, const void* a, int dtype, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows <= 0) return;
  dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (!std::is_same_v<T, bool>) {
      switch (op) {
        case kSum: return reduce_as<kSum, T>(out, a, rows, n, stream);
        case kMean: return reduce_as<kMean, T>(out, a, rows, n, stream);
        case kAmax: return reduce_as<kAmax, T>(out, a, rows, n, stream);
        case kAmin: return reduce_as<kAmin, T>(out, a, rows, n, stream);
      }
    }
  });
}

void launch_softmax_rows(void* y, const void* x, int dtype, int64_t rows, int64_t n, bool log, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    softmax_rows<T><<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x),
                                                                        n, log);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_softmax_backward_rows(void* dx, const void* grad, const void* y, int dtype, int64_t rows, int64_t n,
                                  bool log, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    softmax_backward_rows<T><<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(grad), static_cast<const T*>(y), n, log);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace qk::cuda
