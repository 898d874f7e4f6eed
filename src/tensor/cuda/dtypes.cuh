// Device-side dtype traits shared by the .cu files: the storage type of a
// dtype code, the type arithmetic happens in (float for f16/bf16, as the
// CPU), conversions as the CPU's cast_value, and a dispatch on the code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels.h"

namespace qk::cuda {

template <typename T> struct ComputeOf { using type = T; };
template <> struct ComputeOf<__half> { using type = float; };
template <> struct ComputeOf<__nv_bfloat16> { using type = float; };

// The CPU's cast_value: through float for the 16-bit floats, != 0 for bool.
template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, __half>) {
    return convert<To>(__half2float(v));
  } else if constexpr (std::is_same_v<From, __nv_bfloat16>) {
    return convert<To>(__bfloat162float(v));
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

// Calls f(T{}) with T the storage type of `code`.
template <typename F>
void dispatch(int code, F&& f) {
  switch (code) {
    case kF32: return f(float{});
    case kF64: return f(double{});
    case kF16: return f(__half{});
    case kBF16: return f(__nv_bfloat16{});
    case kI32: return f(int32_t{});
    case kI64: return f(int64_t{});
    case kU8: return f(uint8_t{});
    case kBool: return f(bool{});
  }
}

// The floating codes only.
template <typename F>
void dispatch_floating(int code, F&& f) {
  switch (code) {
    case kF32: return f(float{});
    case kF64: return f(double{});
    case kF16: return f(__half{});
    case kBF16: return f(__nv_bfloat16{});
  }
}

// A block-wide reduction of one value per thread (blockDim.x a power of two,
// at most kBlock): the result in every thread. `scratch` holds kBlock values.
constexpr int kBlock = 256;

// Blocks of kBlock threads for a grid-stride loop over n items: at least
// one, at most 65535 * 8 (the loop covers the rest).
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  constexpr int64_t kMax = 65535 * 8;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < kMax ? blocks : kMax));
}

// for (i over [0, n)) in a grid-stride loop.
#define QK_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)
template <typename Acc, typename Combine>
__device__ Acc block_reduce(Acc v, Combine comb, Acc* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) scratch[threadIdx.x] = comb(scratch[threadIdx.x], scratch[threadIdx.x + s]);
    __syncthreads();
  }
  Acc r = scratch[0];
  __syncthreads();  // scratch may be reused at once
  return r;
}

}  // namespace qk::cuda
