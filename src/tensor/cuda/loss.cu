// Cross entropy on CUDA from log-probabilities lp [N, C, S] (S = product of
// trailing dims, contiguous) and targets [N, S] (i32 or i64), with the CPU's
// formulas (src/tensor/cpu/loss.cc): with smoothing ls,
//   loss = -(1-ls) lp[t] - (ls/C) sum_c lp[c]
//   dloss/dlogit[c] = exp(lp[c]) - (1-ls) [c == t] - ls/C
// Positions whose target is ignore_index count for nothing. A target out of
// range is reported through *bad (the first such position + 1, else 0)
// instead of a device assert, so the host can raise IndexError.
#include <cstdint>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "kernels.h"

namespace qk::cuda {

namespace {

__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }

template <typename I>
__device__ __forceinline__ bool counted(I t, int64_t C, int64_t ignore, int64_t p, unsigned long long* bad) {
  if (static_cast<int64_t>(t) == ignore) return false;
  if (t < 0 || static_cast<int64_t>(t) >= C) {
    atomicMin(bad, static_cast<unsigned long long>(p + 1));
    return false;
  }
  return true;
}

// One thread per position: per[p] (f64) and whether it counts.
template <typename T, typename I>
__global__ void ce_positions(double* per, int64_t* on, const T* lp, const I* target, int64_t N, int64_t C, int64_t S,
                             int64_t ignore, double ls, unsigned long long* bad) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < N * S; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = p / S, s = p % S;
    const T* row = lp + n * C * S + s;
    const I t = target[p];
    if (!counted(t, C, ignore, p, bad)) {
      per[p] = 0;
      on[p] = 0;
      continue;
    }
    double l = -(1.0 - ls) * convert<double>(row[static_cast<int64_t>(t) * S]);
    if (ls > 0) {
      double all = 0;
      for (int64_t c = 0; c < C; ++c) all += convert<double>(row[c * S]);
      l -= ls / static_cast<double>(C) * all;
    }
    per[p] = l;
    on[p] = 1;
  }
}

// out (of dtype T) <- total / count (mean) or total (sum); one thread.
template <typename T>
__global__ void ce_finish(T* out, const double* total, const int64_t* count, bool mean) {
  double v = *total;
  if (mean) v /= static_cast<double>(*count);  // 0/0 = NaN, as PyTorch
  *out = convert<T>(v);
}

template <typename T>
__global__ void per_to_dtype(T* out, const double* per, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = convert<T>(per[i]);
}

// One thread per (position, class).
template <typename T, typename I>
__global__ void ce_backward_kernel(T* dx, const T* lp, const I* target, const T* grad, bool grad_per_position,
                                   const int64_t* count, bool mean, int64_t N, int64_t C, int64_t S, int64_t ignore,
                                   double ls, unsigned long long* bad) {
  using A = typename ComputeOf<T>::type;
  const int64_t total = N * C * S;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = i % S, c = (i / S) % C, n = i / (C * S), p = n * S + s;
    const I t = target[p];
    const bool on = counted(t, C, ignore, p, bad);
    double scale = mean ? 1.0 / static_cast<double>(*count) : 1.0;
    const A g = on ? static_cast<A>(scale * convert<double>(grad[grad_per_position ? p : 0])) : A(0);
    A v = g * (m_exp(convert<A>(lp[i])) - static_cast<A>(ls / static_cast<double>(C)));
    if (on && static_cast<int64_t>(t) == c) v -= g * static_cast<A>(1.0 - ls);
    dx[i] = convert<T>(v);
  }
}


template <typename F>
void dispatch_index(int code, F&& f) {
  if (code == kI32) f(int32_t{});
  else if (code == kI64) f(int64_t{});
}

}  // namespace

void launch_cross_entropy_positions(double* per, int64_t* on, const void* lp, int dtype, const void* target,
                                    int target_dtype, int64_t N, int64_t C, int64_t S, int64_t ignore_index,
                                    double label_smoothing, unsigned long long* bad, cudaStream_t stream) {
  if (N * S <= 0) return;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    dispatch_index(target_dtype, [&](auto it) {
      using I = decltype(it);
      ce_positions<T, I><<<grid_for(N * S), kBlock, 0, stream>>>(per, on, static_cast<const T*>(lp),
                                                                 static_cast<const I*>(target), N, C, S, ignore_index,
                                                                 label_smoothing, bad);
      QK_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void launch_cross_entropy_finish(void* out, int dtype, const double* total, const int64_t* count, bool mean,
                                 cudaStream_t stream) {
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    ce_finish<T><<<1, 1, 0, stream>>>(static_cast<T*>(out), total, count, mean);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_f64_to(void* out, int dtype, const double* in, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    per_to_dtype<T><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(out), in, n);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_cross_entropy_backward(void* dx, const void* lp, int dtype, const void* target, int target_dtype,
                                   const void* grad, bool grad_per_position, const int64_t* count, bool mean,
                                   int64_t N, int64_t C, int64_t S, int64_t ignore_index, double label_smoothing,
                                   unsigned long long* bad, cudaStream_t stream) {
  if (N * C * S <= 0) return;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    dispatch_index(target_dtype, [&](auto it) {
      using I = decltype(it);
      ce_backward_kernel<T, I><<<grid_for(N * C * S), kBlock, 0, stream>>>(
          static_cast<T*>(dx), static_cast<const T*>(lp), static_cast<const I*>(target), static_cast<const T*>(grad),
          grad_per_position, count, mean, N, C, S, ignore_index, label_smoothing, bad);
      QK_CUDA_CHECK(cudaGetLastError());
    });
  });
}

}  // namespace qk::cuda
