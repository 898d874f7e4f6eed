// Reductions (sum, mean, amax, amin) over the middle of a contiguous [outer,
// n, inner] array, split as reduce_plan.h plans (a second pass combines the
// parts), and (log_)softmax forward and backward, one thread block per row.
// Accumulation as PyTorch's on a GPU: f32 for f32/f16/bf16 (f64 only for
// f64: many GPUs add f64 at a small fraction of the f32 rate), i64 for
// integers; softmax in float (f64 for f64). The order of additions is fixed
// by the plan, so results repeat.
#include <cfloat>
#include <cstdint>
#include <limits>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "kernels.h"
#include "reduce_plan.h"

namespace qk::cuda {

namespace {

enum : int { kSum, kMean, kAmax, kAmin };  // qk::cpu::ReduceOp

// The accumulator, and the dtype of the parts (reduce_ops.cc allocates them).
template <typename T>
using ReduceAcc = std::conditional_t<std::is_integral_v<T>, int64_t,
                                     std::conditional_t<std::is_same_v<T, double>, double, float>>;

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
__device__ T finish(Acc acc, int64_t n) {
  if constexpr (Op == kMean) acc = static_cast<Acc>(static_cast<double>(acc) / static_cast<double>(n));
  return convert<T>(acc);
}

// Rows (inner == 1): block b reduces part b % splits of row b / splits.
template <int Op, typename T, typename Acc>
__global__ void reduce_rows(T* out, Acc* partial, const T* a, int64_t n, int64_t span, int64_t splits) {
  __shared__ Acc scratch[kReduceBlockThreads];
  const int64_t b = blockIdx.x, row = b / splits, part = b % splits;
  const T* p = a + row * n;
  const int64_t lo = part * span, hi = min(n, lo + span);
  Combine<Op, Acc> comb;
  Acc acc = init_value<Op, Acc>();
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) acc = comb(acc, convert<Acc>(p[j]));
  acc = block_reduce(acc, comb, scratch);
  if (threadIdx.x == 0) {
    if (splits == 1)
      out[row] = finish<Op, T>(acc, n);
    else
      partial[b] = acc;
  }
}

// Columns (inner > 1): block b reduces part b % splits of kReduceTileCols
// adjacent columns; thread (x, y) takes column x and every kReduceTileRows-th
// row from y, so a warp reads consecutive addresses.
template <int Op, typename T, typename Acc>
__global__ void reduce_cols(T* out, Acc* partial, const T* a, int64_t n, int64_t inner, int64_t tiles,
                            int64_t span, int64_t splits) {
  __shared__ Acc scratch[kReduceTileRows][kReduceTileCols + 1];
  const int64_t b = blockIdx.x, part = b % splits, tile = (b / splits) % tiles, o = b / (splits * tiles);
  const int64_t c = tile * kReduceTileCols + threadIdx.x;
  Combine<Op, Acc> comb;
  Acc acc = init_value<Op, Acc>();
  if (c < inner) {
    const T* p = a + o * n * inner + c;
    const int64_t lo = part * span, hi = min(n, lo + span);
    for (int64_t r = lo + threadIdx.y; r < hi; r += kReduceTileRows) acc = comb(acc, convert<Acc>(p[r * inner]));
  }
  scratch[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < inner) {
    for (int y = 1; y < kReduceTileRows; ++y) acc = comb(acc, scratch[y][threadIdx.x]);
    const int64_t k = o * inner + c;
    if (splits == 1)
      out[k] = finish<Op, T>(acc, n);
    else
      partial[k * splits + part] = acc;
  }
}

// The second pass: output k combines its parts in order.
template <int Op, typename T, typename Acc>
__global__ void reduce_parts(T* out, const Acc* partial, int64_t outputs, int64_t splits, int64_t n) {
  Combine<Op, Acc> comb;
  QK_GRID_STRIDE(k, outputs) {
    Acc acc = partial[k * splits];
    for (int64_t part = 1; part < splits; ++part) acc = comb(acc, partial[k * splits + part]);
    out[k] = finish<Op, T>(acc, n);
  }
}

template <int Op, typename T>
void reduce_as(void* out_v, const void* a_v, const ReduceShape& s, const ReducePlan& plan, void* partial_v,
               cudaStream_t stream) {
  using Acc = ReduceAcc<T>;
  T* out = static_cast<T*>(out_v);
  const T* a = static_cast<const T*>(a_v);
  Acc* partial = static_cast<Acc*>(partial_v);
  const auto blocks = static_cast<unsigned>(plan.blocks);
  if (s.inner == 1) {
    reduce_rows<Op, T, Acc><<<blocks, kReduceBlockThreads, 0, stream>>>(out, partial, a, s.n, plan.span, plan.splits);
  } else {
    const int64_t tiles = (s.inner + kReduceTileCols - 1) / kReduceTileCols;
    const dim3 threads(kReduceTileCols, kReduceTileRows);
    reduce_cols<Op, T, Acc><<<blocks, threads, 0, stream>>>(out, partial, a, s.n, s.inner, tiles, plan.span,
                                                            plan.splits);
  }
  QK_CUDA_CHECK(cudaGetLastError());
  if (plan.splits > 1) {
    const int64_t outputs = s.outer * s.inner;
    reduce_parts<Op, T, Acc><<<grid_for(outputs), kBlock, 0, stream>>>(out, partial, outputs, plan.splits, s.n);
    QK_CUDA_CHECK(cudaGetLastError());
  }
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

void launch_reduce(int op, void* out, const void* a, int dtype, const ReduceShape& shape, const ReducePlan& plan,
                   void* partial, cudaStream_t stream) {
  if (plan.blocks <= 0) return;
  dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (!std::is_same_v<T, bool>) {
      switch (op) {
        case kSum: return reduce_as<kSum, T>(out, a, shape, plan, partial, stream);
        case kMean: return reduce_as<kMean, T>(out, a, shape, plan, partial, stream);
        case kAmax: return reduce_as<kAmax, T>(out, a, shape, plan, partial, stream);
        case kAmin: return reduce_as<kAmin, T>(out, a, shape, plan, partial, stream);
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
