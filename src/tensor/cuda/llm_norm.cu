// Layer and RMS norm on CUDA over contiguous rows x [M, D], with the CPU's
// arithmetic (src/tensor/cpu/norm_layer.cc) in A = f32 (f64 for f64):
//   layer: mu = sum x / D, var = sum (x - mu)^2 / D (two passes, no
//          cancellation), rstd = 1 / sqrt(var + eps) in f64,
//          y = (x - mu) rstd w + b;
//          dx = rstd (g w - sum(g w)/D - xhat sum(g w xhat)/D)
//   rms:   rstd = 1 / sqrt(sum x^2 / D + eps), y = x rstd w,
//          dx = rstd (g w - xhat sum(g w xhat)/D)
// One group of TPR threads per row: a warp (eight rows to a block) for rows
// up to 1024 elements, a whole block beyond. The row sums are shuffles then
// a fixed sum over the warps: the same order on every run (no atomics).
// The weight gradients (sums over rows) are per-chunk column partials, then
// one f64 sum over the chunks per column: the CPU's two-level scheme, again
// in a fixed order.
#include <cstdint>
#include <type_traits>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "llm_kernels.h"

namespace qk::cuda {

namespace {

unsigned grid_cap(int64_t blocks) {
  constexpr int64_t kMax = int64_t(1) << 20;  // grid-stride beyond
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < kMax ? blocks : kMax));
}

// The sum of v over the TPR threads (threadIdx.x) of a row, in every one of
// them. The xor butterfly leaves identical bits in every lane (each step adds
// the same two values, commuted); the warps' sums are then added in warp
// order by every thread. TPR > 32 only with one row per block (it syncs).
template <int TPR, typename A>
__device__ __forceinline__ A row_sum(A v, A* smem) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (TPR > 32) {
    constexpr int kWarps = TPR / 32;
    if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
    __syncthreads();
    v = smem[0];
    for (int w = 1; w < kWarps; ++w) v += smem[w];
    __syncthreads();  // smem is reused by the next sum
  }
  return v;
}

template <typename T, int TPR, bool Layer>
__global__ void norm_forward(T* out, typename ComputeOf<T>::type* mean, typename ComputeOf<T>::type* rstd,
                             const T* x, const typename ComputeOf<T>::type* w, const typename ComputeOf<T>::type* b,
                             int64_t M, int64_t D, double eps) {
  using A = typename ComputeOf<T>::type;
  __shared__ A smem[32];
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; r < M; r += step) {
    const T* xr = x + r * D;
    T* yr = out + r * D;
    if constexpr (Layer) {
      A s = 0;
      for (int64_t i = threadIdx.x; i < D; i += TPR) s += convert<A>(xr[i]);
      const A mu = row_sum<TPR>(s, smem) / static_cast<A>(D);
      A q = 0;
      for (int64_t i = threadIdx.x; i < D; i += TPR) {
        const A d = convert<A>(xr[i]) - mu;
        q += d * d;
      }
      const A var = row_sum<TPR>(q, smem) / static_cast<A>(D);
      const A rs = static_cast<A>(1.0 / sqrt(static_cast<double>(var) + eps));
      if (threadIdx.x == 0) {
        mean[r] = mu;
        rstd[r] = rs;
      }
      for (int64_t i = threadIdx.x; i < D; i += TPR) {
        const A wi = w ? w[i] : A(1), bi = b ? b[i] : A(0);
        yr[i] = convert<T>((convert<A>(xr[i]) - mu) * rs * wi + bi);
      }
    } else {
      A q = 0;
      for (int64_t i = threadIdx.x; i < D; i += TPR) {
        const A v = convert<A>(xr[i]);
        q += v * v;
      }
      const A ss = row_sum<TPR>(q, smem);
      const A rs = static_cast<A>(1.0 / sqrt(static_cast<double>(ss) / static_cast<double>(D) + eps));
      if (threadIdx.x == 0) rstd[r] = rs;
      for (int64_t i = threadIdx.x; i < D; i += TPR) {
        const A wi = w ? w[i] : A(1);
        yr[i] = convert<T>(convert<A>(xr[i]) * rs * wi);
      }
    }
  }
}

template <typename T, int TPR, bool Layer>
__global__ void norm_backward_dx(T* dx, const T* g, const T* x, const typename ComputeOf<T>::type* mean,
                                 const typename ComputeOf<T>::type* rstd, const typename ComputeOf<T>::type* w,
                                 int64_t M, int64_t D) {
  using A = typename ComputeOf<T>::type;
  __shared__ A smem[32];
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; r < M; r += step) {
    const T* xr = x + r * D;
    const T* gr = g + r * D;
    T* dr = dx + r * D;
    const A mu = Layer ? mean[r] : A(0), rs = rstd[r];
    A a = 0, bs = 0;
    for (int64_t i = threadIdx.x; i < D; i += TPR) {
      const A gw = convert<A>(gr[i]) * (w ? w[i] : A(1));
      if constexpr (Layer) {
        a += gw;
        bs += gw * ((convert<A>(xr[i]) - mu) * rs);
      } else {
        bs += gw * (convert<A>(xr[i]) * rs);
      }
    }
    const A mb = row_sum<TPR>(bs, smem) / static_cast<A>(D);
    A ma = 0;
    if constexpr (Layer) ma = row_sum<TPR>(a, smem) / static_cast<A>(D);
    for (int64_t i = threadIdx.x; i < D; i += TPR) {
      const A wi = w ? w[i] : A(1), gi = convert<A>(gr[i]);
      if constexpr (Layer) {
        const A xh = (convert<A>(xr[i]) - mu) * rs;
        dr[i] = convert<T>(rs * (gi * wi - ma - xh * mb));
      } else {
        const A xh = convert<A>(xr[i]) * rs;
        dr[i] = convert<T>(rs * (gi * wi - xh * mb));
      }
    }
  }
}

// Column partials of the weight gradients: block (32, kRowsPar) over 32
// columns (blockIdx.x) and one chunk of rows (blockIdx.y); each thread sums
// its column over every kRowsPar-th row of the chunk, then the kRowsPar
// sums are added in order. pdw/pdb: [chunks, D] each (pdb unused for rms).
constexpr int kRowsPar = 8;

template <typename T, bool Layer>
__global__ void norm_param_partials(typename ComputeOf<T>::type* pdw, typename ComputeOf<T>::type* pdb, const T* g,
                                    const T* x, const typename ComputeOf<T>::type* mean,
                                    const typename ComputeOf<T>::type* rstd, int64_t M, int64_t D, int64_t chunks) {
  using A = typename ComputeOf<T>::type;
  __shared__ A sw[kRowsPar][33], sb[kRowsPar][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  const int64_t p = blockIdx.y;
  const int64_t lo = M * p / chunks, hi = M * (p + 1) / chunks;
  A aw = 0, ab = 0;
  if (c < D) {
    for (int64_t r = lo + threadIdx.y; r < hi; r += kRowsPar) {
      const A gi = convert<A>(g[r * D + c]);
      const A xv = convert<A>(x[r * D + c]);
      const A xh = Layer ? (xv - mean[r]) * rstd[r] : xv * rstd[r];
      aw += gi * xh;
      ab += gi;
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < D) {
    A tw = sw[0][threadIdx.x], tb = sb[0][threadIdx.x];
    for (int k = 1; k < kRowsPar; ++k) {
      tw += sw[k][threadIdx.x];
      tb += sb[k][threadIdx.x];
    }
    pdw[p * D + c] = tw;
    if (Layer) pdb[p * D + c] = tb;
  }
}

// out[c] <- sum over chunks of part[chunk, c], in f64, then out's dtype.
template <typename W, typename A>
__global__ void sum_partials(W* out, const A* part, int64_t chunks, int64_t D) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < D; c += int64_t(gridDim.x) * blockDim.x) {
    double s = 0;
    for (int64_t p = 0; p < chunks; ++p) s += static_cast<double>(part[p * D + c]);
    out[c] = convert<W>(s);
  }
}

template <typename T, bool Layer>
void forward_as(void* out, void* mean, void* rstd, const void* x, const void* w, const void* b, int64_t M, int64_t D,
                double eps, cudaStream_t s) {
  using A = typename ComputeOf<T>::type;
  auto go = [&](auto kernel, dim3 block) {
    kernel<<<grid_cap((M + block.y - 1) / block.y), block, 0, s>>>(
        static_cast<T*>(out), static_cast<A*>(mean), static_cast<A*>(rstd), static_cast<const T*>(x),
        static_cast<const A*>(w), static_cast<const A*>(b), M, D, eps);
  };
  if (D <= 1024) go(norm_forward<T, 32, Layer>, dim3(32, 8));
  else if (D <= 8192) go(norm_forward<T, 256, Layer>, dim3(256, 1));
  else go(norm_forward<T, 512, Layer>, dim3(512, 1));
  QK_CUDA_CHECK(cudaGetLastError());
}

template <typename T, bool Layer>
void backward_as(void* dx, const void* g, const void* x, const void* mean, const void* rstd, const void* w, int64_t M,
                 int64_t D, cudaStream_t s) {
  using A = typename ComputeOf<T>::type;
  auto go = [&](auto kernel, dim3 block) {
    kernel<<<grid_cap((M + block.y - 1) / block.y), block, 0, s>>>(
        static_cast<T*>(dx), static_cast<const T*>(g), static_cast<const T*>(x), static_cast<const A*>(mean),
        static_cast<const A*>(rstd), static_cast<const A*>(w), M, D);
  };
  if (D <= 1024) go(norm_backward_dx<T, 32, Layer>, dim3(32, 8));
  else if (D <= 8192) go(norm_backward_dx<T, 256, Layer>, dim3(256, 1));
  else go(norm_backward_dx<T, 512, Layer>, dim3(512, 1));
  QK_CUDA_CHECK(cudaGetLastError());
}

template <typename A>
void finish(void* out, int out_dtype, const A* part, int64_t chunks, int64_t D, cudaStream_t s) {
  dispatch_floating(out_dtype, [&](auto t) {
    using W = decltype(t);
    sum_partials<W, A><<<grid_cap((D + kBlock - 1) / kBlock), kBlock, 0, s>>>(static_cast<W*>(out), part, chunks, D);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace

void launch_norm_forward(bool layer, void* out, void* mean, void* rstd, const void* x, int dtype, const void* w,
                         const void* b, int64_t M, int64_t D, double eps, cudaStream_t stream) {
  if (M <= 0 || D <= 0) return;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    if (layer) forward_as<T, true>(out, mean, rstd, x, w, b, M, D, eps, stream);
    else forward_as<T, false>(out, mean, rstd, x, w, b, M, D, eps, stream);
  });
}

void launch_norm_backward_dx(bool layer, void* dx, const void* g, const void* x, const void* mean, const void* rstd,
                             const void* w, int dtype, int64_t M, int64_t D, cudaStream_t stream) {
  if (M <= 0 || D <= 0) return;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    if (layer) backward_as<T, true>(dx, g, x, mean, rstd, w, M, D, stream);
    else backward_as<T, false>(dx, g, x, mean, rstd, w, M, D, stream);
  });
}

int64_t norm_param_chunks(int64_t M, int64_t D) {
  // About 1024 blocks in all, each chunk at least 32 rows, at most 1024 chunks.
  const int64_t tiles = (D + 31) / 32;
  int64_t chunks = 1024 / (tiles > 0 ? tiles : 1);
  const int64_t by_rows = (M + 31) / 32;
  if (chunks > by_rows) chunks = by_rows;
  return chunks < 1 ? 1 : chunks;
}

void launch_norm_param_grads(bool layer, void* dw, int dw_dtype, void* db, int db_dtype, void* partials,
                             int64_t chunks, const void* g, const void* x, const void* mean, const void* rstd,
                             int dtype, int64_t M, int64_t D, cudaStream_t stream) {
  if (D <= 0 || (!dw && !db)) return;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    using A = typename ComputeOf<T>::type;
    A* pdw = static_cast<A*>(partials);
    A* pdb = pdw + chunks * D;
    const dim3 grid(static_cast<unsigned>((D + 31) / 32), static_cast<unsigned>(chunks));
    const dim3 block(32, kRowsPar);
    if (layer)
      norm_param_partials<T, true><<<grid, block, 0, stream>>>(pdw, pdb, static_cast<const T*>(g),
                                                               static_cast<const T*>(x), static_cast<const A*>(mean),
                                                               static_cast<const A*>(rstd), M, D, chunks);
    else
      norm_param_partials<T, false><<<grid, block, 0, stream>>>(pdw, pdb, static_cast<const T*>(g),
                                                                static_cast<const T*>(x), static_cast<const A*>(mean),
                                                                static_cast<const A*>(rstd), M, D, chunks);
    QK_CUDA_CHECK(cudaGetLastError());
    if (dw) finish<A>(dw, dw_dtype, pdw, chunks, D, stream);
    if (db && layer) finish<A>(db, db_dtype, pdb, chunks, D, stream);
  });
}

}  // namespace qk::cuda
