// Rotary embedding and SwiGLU on CUDA, elementwise with the CPU's formulas
// (src/tensor/cpu/rotary.cc, swiglu.cc) in A = f32 (f64 for f64):
//   rotary, h = R/2, lo = [0, h), hi = [h, R), dims [R, D) passed through:
//     forward:  y_lo = x_lo cos_lo - x_hi sin_lo,  y_hi = x_hi cos_hi + x_lo sin_hi
//     backward: y_lo = x_lo cos_lo + x_hi sin_hi,  y_hi = x_hi cos_hi - x_lo sin_lo
//   swiglu, a = x[:F], b = x[F:], s = 1 / (1 + exp(-a)):
//     y = a s b,  da = g b s (1 + a (1 - s)),  db = g a s
// One thread per output element; x of rotary at any outer strides (its last
// dim contiguous), the output contiguous.
#include <cstdint>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "llm_kernels.h"

namespace qk::cuda {

namespace {


__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }

template <typename T, typename S>
__global__ void rotary_kernel(T* out, const T* x, int64_t total, int64_t npos, int64_t H, int64_t D, int64_t sb,
                              int64_t st, int64_t sh, const S* cs, const S* sn, int64_t R, bool backward) {
  using A = typename ComputeOf<T>::type;
  const int64_t h = R / 2;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / D, d = e - r * D;
    const int64_t hd = r % H, t = (r / H) % npos, b = r / (H * npos);
    const T* xr = x + b * sb + t * st + hd * sh;
    if (d >= 2 * h) {
      out[e] = xr[d];
      continue;
    }
    const S* c = cs + t * R;
    const S* s = sn + t * R;
    A v;
    if (d < h) {
      const A lo = convert<A>(xr[d]), hi = convert<A>(xr[d + h]);
      v = backward ? lo * static_cast<A>(c[d]) + hi * static_cast<A>(s[d + h])
                   : lo * static_cast<A>(c[d]) - hi * static_cast<A>(s[d]);
    } else {
      const int64_t j = d - h;
      const A lo = convert<A>(xr[j]), hi = convert<A>(xr[d]);
      v = backward ? hi * static_cast<A>(c[d]) - lo * static_cast<A>(s[j])
                   : hi * static_cast<A>(c[d]) + lo * static_cast<A>(s[d]);
    }
    out[e] = convert<T>(v);
  }
}

template <typename A>
__device__ __forceinline__ A sigmoid(A a) {
  return A(1) / (A(1) + m_exp(-a));
}

template <typename T>
__global__ void swiglu_kernel(T* y, const T* x, int64_t rows, int64_t F) {
  using A = typename ComputeOf<T>::type;
  const int64_t total = rows * F;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / F, j = e - r * F;
    const T* xr = x + r * 2 * F;
    const A a = convert<A>(xr[j]), b = convert<A>(xr[j + F]);
    y[e] = convert<T>(a * sigmoid(a) * b);
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dx, const T* g, const T* x, int64_t rows, int64_t F) {
  using A = typename ComputeOf<T>::type;
  const int64_t total = rows * F;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / F, j = e - r * F;
    const T* xr = x + r * 2 * F;
    T* dr = dx + r * 2 * F;
    const A a = convert<A>(xr[j]), b = convert<A>(xr[j + F]), gj = convert<A>(g[e]);
    const A s = sigmoid(a);
    dr[j] = convert<T>(gj * b * s * (A(1) + a * (A(1) - s)));
    dr[j + F] = convert<T>(gj * a * s);
  }
}

}  // namespace

void launch_rotary(void* out, const void* x, int dtype, int64_t B, int64_t T, int64_t H, int64_t D, int64_t sb,
                   int64_t st, int64_t sh, const void* cos, const void* sin, int cs_dtype, int64_t R, bool backward,
                   cudaStream_t stream) {
  const int64_t total = B * T * H * D;
  if (total <= 0) return;
  dispatch_floating(dtype, [&](auto t) {
    using X = decltype(t);
    auto go = [&](auto s) {
      using S = decltype(s);
      rotary_kernel<X, S><<<grid_for(total), kBlock, 0, stream>>>(static_cast<X*>(out), static_cast<const X*>(x),
                                                                  total, T, H, D, sb, st, sh,
                                                                  static_cast<const S*>(cos),
                                                                  static_cast<const S*>(sin), R, backward);
      QK_CUDA_CHECK(cudaGetLastError());
    };
    if (cs_dtype == kF64) go(double{});
    else go(float{});
  });
}

void launch_swiglu(void* y, const void* x, int dtype, int64_t rows, int64_t F, cudaStream_t stream) {
  if (rows <= 0 || F <= 0) return;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    swiglu_kernel<T><<<grid_for(rows * F), kBlock, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), rows, F);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_swiglu_backward(void* dx, const void* g, const void* x, int dtype, int64_t rows, int64_t F,
                            cudaStream_t stream) {
  if (rows <= 0 || F <= 0) return;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    swiglu_backward_kernel<T><<<grid_for(rows * F), kBlock, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(g), static_cast<const T*>(x), rows, F);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace qk::cuda
