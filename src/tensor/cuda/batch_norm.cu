// Batch norm on CUDA in one or two launches per call instead of the twenty
// or so small kernels of the composed form (norm_ops.cc keeps it for what
// these do not take): contiguous [N, C, S] input of f32/f16/bf16, f32
// statistics, weight, bias and running statistics. The formulas and the
// order of the per-channel arithmetic are the composed form's (and so the
// CPU's, src/tensor/cpu/norm_batch.cc), in f32; only the order of the sums
// differs (one block per channel, a tree over its threads).
//
//   training forward: one block per channel: mean, then the variance about
//     it (two passes), then the running statistics, then y = x scale + shift;
//   eval forward: the per-channel scale and shift, then y (two launches);
//   backward: one block per channel: sum dy and sum dy (x - mean), then dx,
//     with the weight and bias gradients.
// Channels last ([N, S, C] storage, rows of C): the same formulas in three
// launches each way (per-channel sums over parts of the rows, coalesced
// along the channels; the parts combined per channel; the elementwise
// pass). The forward's sums are of x shifted by its first row (one pass,
// as the CPU's shifted moments), not two passes about the mean.
#include <cstdint>
#include <type_traits>

#include "batch_norm_kernels.h"
#include "cuda_check.h"
#include "dtypes.cuh"
#include "reduce_plan.h"

namespace qk::cuda {

namespace {

constexpr int kThreads = kBlock;

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// Element i of channel c's N x S elements.
__device__ __forceinline__ int64_t at(int64_t i, int64_t c, int64_t C, int64_t S) {
  return (i / S * C + c) * S + i % S;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) bn_train_forward(BatchNormShape s, const T* x, T* y, float* save_mean,
                                                             float* save_invstd, float* running_mean,
                                                             float* running_var, const float* weight,
                                                             const float* bias) {
  __shared__ float scratch[kThreads];
  __shared__ float scale_shift[2];
  const int64_t c = blockIdx.x, M = s.N * s.S;
  float sum = 0;
  for (int64_t i = threadIdx.x; i < M; i += kThreads) sum += convert<float>(x[at(i, c, s.C, s.S)]);
  // As ops::mean: the f32 sum divided by M in f64, rounded once.
  const float mean = static_cast<float>(static_cast<double>(block_reduce(sum, Add{}, scratch)) / M);
  float sq = 0;
  for (int64_t i = threadIdx.x; i < M; i += kThreads) {
    const float d = convert<float>(x[at(i, c, s.C, s.S)]) - mean;
    sq += d * d;
  }
  const float var = static_cast<float>(static_cast<double>(block_reduce(sq, Add{}, scratch)) / M);
  if (threadIdx.x == 0) {
    const float invstd = 1.0f / sqrtf(var + s.eps_f32);
    const float scale = weight ? invstd * weight[c] : invstd;
    const float ms = mean * scale;
    scale_shift[0] = scale;
    scale_shift[1] = bias ? bias[c] - ms : -ms;
    save_mean[c] = mean;
    save_invstd[c] = invstd;
    if (running_mean) running_mean[c] = running_mean[c] * s.one_minus_momentum + mean * s.momentum;
    if (running_var) running_var[c] = running_var[c] * s.one_minus_momentum + var * s.unbias * s.momentum;
  }
  __syncthreads();
  const float scale = scale_shift[0], shift = scale_shift[1];
  for (int64_t i = threadIdx.x; i < M; i += kThreads) {
    const int64_t k = at(i, c, s.C, s.S);
    y[k] = convert<T>(convert<float>(x[k]) * scale + shift);
  }
}

// Eval: the per-channel statistics, scale and shift from the running ones.
__global__ void bn_eval_params(BatchNormShape s, const float* running_mean, const float* running_var,
                               const float* weight, const float* bias, float* save_mean, float* save_invstd,
                               float* scale, float* shift) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= s.C) return;
  const float mean = running_mean[c];
  const float invstd = 1.0f / sqrtf(running_var[c] + s.eps_f32);
  const float sc = weight ? invstd * weight[c] : invstd;
  const float ms = mean * sc;
  save_mean[c] = mean;
  save_invstd[c] = invstd;
  scale[c] = sc;
  shift[c] = bias ? bias[c] - ms : -ms;
}

template <typename T>
__global__ void bn_apply(BatchNormShape s, const T* x, T* y, const float* scale, const float* shift) {
  const int64_t n = s.N * s.C * s.S;
  QK_GRID_STRIDE(k, n) {
    const int64_t c = k / s.S % s.C;
    y[k] = convert<T>(convert<float>(x[k]) * scale[c] + shift[c]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) bn_backward(BatchNormShape s, bool training, const T* gy, const T* x,
                                                        const float* save_mean, const float* save_invstd,
                                                        const float* weight, T* dx, float* dweight,
                                                        float* dbias) {
  __shared__ float scratch[kThreads];
  __shared__ float k[3];
  const int64_t c = blockIdx.x, M = s.N * s.S;
  const float mean = save_mean[c], invstd = save_invstd[c];
  float sdy = 0, sdyx = 0;
  for (int64_t i = threadIdx.x; i < M; i += kThreads) {
    const int64_t e = at(i, c, s.C, s.S);
    const float g = convert<float>(gy[e]);
    sdy += g;
    sdyx += g * (convert<float>(x[e]) - mean);
  }
  sdy = block_reduce(sdy, Add{}, scratch);
  sdyx = block_reduce(sdyx, Add{}, scratch);
  if (threadIdx.x == 0) {
    const float k1 = weight ? invstd * weight[c] : invstd;
    k[0] = k1;
    k[1] = training ? k1 * (invstd * (invstd * sdyx)) * s.minus_inv_m : 0.0f;
    k[2] = training ? k1 * sdy * s.minus_inv_m : 0.0f;
    if (dweight) dweight[c] = sdyx * invstd;
    if (dbias) dbias[c] = sdy;
  }
  __syncthreads();
  const float k1 = k[0], k2 = k[1], k3 = k[2];
  for (int64_t i = threadIdx.x; i < M; i += kThreads) {
    const int64_t e = at(i, c, s.C, s.S);
    float d = convert<float>(gy[e]) * k1;
    if (training) d = d + (convert<float>(x[e]) - mean) * k2 + k3;
    dx[e] = convert<T>(d);
  }
}

// ---- channels last ----

constexpr int kCols = static_cast<int>(kReduceTileCols), kRows = static_cast<int>(kReduceTileRows);

// Part `part` of the rows of kCols channels: the sums of a(r, c) and
// b(r, c) over rows [part span, (part + 1) span), written to
// partial[(c * splits + part) * 2 + {0, 1}]. Block (kCols, kRows);
// blockIdx.x = tile * splits + part.
template <typename Pair>
__device__ void nhwc_part_sums(int64_t M, int64_t C, int64_t span, int64_t splits, float* partial, Pair pair) {
  __shared__ float s1s[kRows][kCols + 1], s2s[kRows][kCols + 1];
  const int64_t part = blockIdx.x % splits, tile = blockIdx.x / splits;
  const int64_t c = tile * kCols + threadIdx.x;
  float s1 = 0, s2 = 0;
  if (c < C) {
    const int64_t lo = part * span, hi = min(M, lo + span);
    for (int64_t r = lo + threadIdx.y; r < hi; r += kRows) {
      const float2 v = pair(r * C + c, c);
      s1 += v.x;
      s2 += v.y;
    }
  }
  s1s[threadIdx.y][threadIdx.x] = s1;
  s2s[threadIdx.y][threadIdx.x] = s2;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < kRows; ++y) {
      s1 += s1s[y][threadIdx.x];
      s2 += s2s[y][threadIdx.x];
    }
    partial[(c * splits + part) * 2] = s1;
    partial[(c * splits + part) * 2 + 1] = s2;
  }
}

// Sums of (x - k) and (x - k)^2, k = x's first row.
template <typename T>
__global__ void __launch_bounds__(kCols * kRows) bn_nhwc_moments(int64_t M, int64_t C, int64_t span, int64_t splits,
                                                                  const T* x, float* partial) {
  nhwc_part_sums(M, C, span, splits, partial, [x](int64_t e, int64_t c) {
    const float v = convert<float>(x[e]) - convert<float>(x[c]);
    return make_float2(v, v * v);
  });
}

// Sums of dy and dy (x - mean).
template <typename T>
__global__ void __launch_bounds__(kCols * kRows) bn_nhwc_grad_sums(int64_t M, int64_t C, int64_t span, int64_t splits,
                                                                    const T* gy, const T* x, const float* mean,
                                                                    float* partial) {
  nhwc_part_sums(M, C, span, splits, partial, [gy, x, mean](int64_t e, int64_t c) {
    const float g = convert<float>(gy[e]);
    return make_float2(g, g * (convert<float>(x[e]) - mean[c]));
  });
}

// The parts of channel c, in order, in f64.
__device__ __forceinline__ double2 combined(const float* partial, int64_t c, int64_t splits) {
  double a = 0, b = 0;
  for (int64_t p = 0; p < splits; ++p) {
    a += partial[(c * splits + p) * 2];
    b += partial[(c * splits + p) * 2 + 1];
  }
  return make_double2(a, b);
}

// Training: the batch statistics from the moments, the running statistics,
// and each channel's scale and shift (into scale_shift[c], [C + c]).
template <typename T>
__global__ void bn_nhwc_train_finalize(BatchNormShape s, int64_t splits, const T* x, const float* partial,
                                       float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                                       const float* weight, const float* bias, float* scale_shift) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= s.C) return;
  const double M = static_cast<double>(s.N * s.S);
  const double2 m = combined(partial, c, splits);
  const double d = m.x / M;
  const float mean = static_cast<float>(convert<float>(x[c]) + d);
  const float var = static_cast<float>(fmax(0.0, m.y / M - d * d));
  const float invstd = 1.0f / sqrtf(var + s.eps_f32);
  const float scale = weight ? invstd * weight[c] : invstd;
  const float ms = mean * scale;
  scale_shift[c] = scale;
  scale_shift[s.C + c] = bias ? bias[c] - ms : -ms;
  save_mean[c] = mean;
  save_invstd[c] = invstd;
  if (running_mean) running_mean[c] = running_mean[c] * s.one_minus_momentum + mean * s.momentum;
  if (running_var) running_var[c] = running_var[c] * s.one_minus_momentum + var * s.unbias * s.momentum;
}

// y = x scale[c] + shift[c] over rows of C.
template <typename T>
__global__ void bn_nhwc_apply(int64_t n, int64_t C, const T* x, T* y, const float* scale, const float* shift) {
  QK_GRID_STRIDE(k, n) {
    const int64_t c = k % C;
    y[k] = convert<T>(convert<float>(x[k]) * scale[c] + shift[c]);
  }
}

// The backward's per-channel constants (into k3[c], [C + c], [2C + c]) and
// the parameter gradients.
__global__ void bn_nhwc_backward_finalize(BatchNormShape s, bool training, int64_t splits, const float* partial,
                                          const float* save_invstd, const float* weight, float* k3,
                                          float* dweight, float* dbias) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= s.C) return;
  const double2 m = combined(partial, c, splits);
  const float sdy = static_cast<float>(m.x), sdyx = static_cast<float>(m.y);
  const float invstd = save_invstd[c];
  const float k1 = weight ? invstd * weight[c] : invstd;
  k3[c] = k1;
  k3[s.C + c] = training ? k1 * (invstd * (invstd * sdyx)) * s.minus_inv_m : 0.0f;
  k3[2 * s.C + c] = training ? k1 * sdy * s.minus_inv_m : 0.0f;
  if (dweight) dweight[c] = sdyx * invstd;
  if (dbias) dbias[c] = sdy;
}

template <typename T>
__global__ void bn_nhwc_backward_apply(int64_t n, int64_t C, bool training, const T* gy, const T* x,
                                       const float* mean, const float* k3, T* dx) {
  QK_GRID_STRIDE(k, n) {
    const int64_t c = k % C;
    float d = convert<float>(gy[k]) * k3[c];
    if (training) d = d + (convert<float>(x[k]) - mean[c]) * k3[C + c] + k3[2 * C + c];
    dx[k] = convert<T>(d);
  }
}

unsigned nhwc_part_blocks(const BatchNormShape& s, const NhwcPlan& p) {
  return static_cast<unsigned>((s.C + kCols - 1) / kCols * p.splits);
}
unsigned per_channel_blocks(const BatchNormShape& s) { return static_cast<unsigned>((s.C + kThreads - 1) / kThreads); }

// f(T{}) for the f32/f16/bf16 codes (norm_ops.cc sends no other).
template <typename F>
void dispatch_16_32(int dtype, F&& f) {
  dispatch_floating(dtype, [&](auto tag) {
    if constexpr (!std::is_same_v<decltype(tag), double>) f(tag);
  });
}

}  // namespace

void launch_batch_norm_train(const BatchNormShape& s, int dtype, const void* x, void* y, float* save_mean,
                             float* save_invstd, float* running_mean, float* running_var, const float* weight,
                             const float* bias, cudaStream_t stream) {
  if (s.C == 0) return;
  dispatch_16_32(dtype, [&](auto tag) {
    using T = decltype(tag);
    bn_train_forward<T><<<static_cast<unsigned>(s.C), kThreads, 0, stream>>>(
        s, static_cast<const T*>(x), static_cast<T*>(y), save_mean, save_invstd, running_mean, running_var, weight,
        bias);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_batch_norm_eval(const BatchNormShape& s, int dtype, const void* x, void* y, const float* running_mean,
                            const float* running_var, const float* weight, const float* bias, float* save_mean,
                            float* save_invstd, float* scale, float* shift, cudaStream_t stream) {
  if (s.C == 0) return;
  bn_eval_params<<<static_cast<unsigned>((s.C + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      s, running_mean, running_var, weight, bias, save_mean, save_invstd, scale, shift);
  QK_CUDA_CHECK(cudaGetLastError());
  if (s.N * s.S == 0) return;
  dispatch_16_32(dtype, [&](auto tag) {
    using T = decltype(tag);
    bn_apply<T><<<grid_for(s.N * s.C * s.S), kBlock, 0, stream>>>(s, static_cast<const T*>(x), static_cast<T*>(y),
                                                                  scale, shift);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_batch_norm_backward(const BatchNormShape& s, int dtype, bool training, const void* gy, const void* x,
                                const float* save_mean, const float* save_invstd, const float* weight, void* dx,
                                float* dweight, float* dbias, cudaStream_t stream) {
  if (s.C == 0) return;
  dispatch_16_32(dtype, [&](auto tag) {
    using T = decltype(tag);
    bn_backward<T><<<static_cast<unsigned>(s.C), kThreads, 0, stream>>>(
        s, training, static_cast<const T*>(gy), static_cast<const T*>(x), save_mean, save_invstd, weight,
        static_cast<T*>(dx), dweight, dbias);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_batch_norm_nhwc_train(const BatchNormShape& s, const NhwcPlan& p, int dtype, const void* x, void* y,
                                  float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                                  const float* weight, const float* bias, float* work, cudaStream_t stream) {
  const int64_t M = s.N * s.S;
  if (s.C == 0 || M == 0) return;
  float* partial = work;
  float* scale_shift = work + 2 * s.C * p.splits;
  dispatch_16_32(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    bn_nhwc_moments<T><<<nhwc_part_blocks(s, p), dim3(kCols, kRows), 0, stream>>>(M, s.C, p.span, p.splits, xt,
                                                                                 partial);
    QK_CUDA_CHECK(cudaGetLastError());
    bn_nhwc_train_finalize<T><<<per_channel_blocks(s), kThreads, 0, stream>>>(
        s, p.splits, xt, partial, save_mean, save_invstd, running_mean, running_var, weight, bias, scale_shift);
    QK_CUDA_CHECK(cudaGetLastError());
    bn_nhwc_apply<T><<<grid_for(M * s.C), kBlock, 0, stream>>>(M * s.C, s.C, xt, static_cast<T*>(y), scale_shift,
                                                              scale_shift + s.C);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_batch_norm_nhwc_eval(const BatchNormShape& s, int dtype, const void* x, void* y,
                                 const float* running_mean, const float* running_var, const float* weight,
                                 const float* bias, float* save_mean, float* save_invstd, float* work,
                                 cudaStream_t stream) {
  if (s.C == 0) return;
  float* scale = work;
  float* shift = work + s.C;
  bn_eval_params<<<per_channel_blocks(s), kThreads, 0, stream>>>(s, running_mean, running_var, weight, bias,
                                                                  save_mean, save_invstd, scale, shift);
  QK_CUDA_CHECK(cudaGetLastError());
  const int64_t n = s.N * s.S * s.C;
  if (n == 0) return;
  dispatch_16_32(dtype, [&](auto tag) {
    using T = decltype(tag);
    bn_nhwc_apply<T><<<grid_for(n), kBlock, 0, stream>>>(n, s.C, static_cast<const T*>(x), static_cast<T*>(y),
                                                          scale, shift);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_batch_norm_nhwc_backward(const BatchNormShape& s, const NhwcPlan& p, int dtype, bool training,
                                     const void* gy, const void* x, const float* save_mean, const float* save_invstd,
                                     const float* weight, void* dx, float* dweight, float* dbias, float* work,
                                     cudaStream_t stream) {
  const int64_t M = s.N * s.S;
  if (s.C == 0) return;
  float* partial = work;
  float* k3 = work + 2 * s.C * p.splits;
  dispatch_16_32(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* gt = static_cast<const T*>(gy);
    const T* xt = static_cast<const T*>(x);
    if (M > 0) {
      bn_nhwc_grad_sums<T><<<nhwc_part_blocks(s, p), dim3(kCols, kRows), 0, stream>>>(M, s.C, p.span, p.splits, gt,
                                                                                     xt, save_mean, partial);
      QK_CUDA_CHECK(cudaGetLastError());
    }
    bn_nhwc_backward_finalize<<<per_channel_blocks(s), kThreads, 0, stream>>>(s, training, M > 0 ? p.splits : 0,
                                                                               partial, save_invstd, weight, k3,
                                                                               dweight, dbias);
    QK_CUDA_CHECK(cudaGetLastError());
    if (M > 0) {
      bn_nhwc_backward_apply<T><<<grid_for(M * s.C), kBlock, 0, stream>>>(M * s.C, s.C, training, gt, xt, save_mean,
                                                                         k3, static_cast<T*>(dx));
      QK_CUDA_CHECK(cudaGetLastError());
    }
  });
}

}  // namespace qk::cuda
