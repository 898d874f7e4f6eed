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
#include <cstdint>
#include <type_traits>

#include "batch_norm_kernels.h"
#include "cuda_check.h"
#include "dtypes.cuh"

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

}  // namespace qk::cuda
