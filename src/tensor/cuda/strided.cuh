// The elementwise loop over an ElementwiseLayout (kernels.h) for kernels
// outside elementwise.cu: element i's offset in each operand, and a
// grid-stride kernel that hands those offsets to a functor. elementwise.cu
// has the same loop in its own anonymous namespace (its map1/map2/map3
// take value functors of fixed arity); select.cu's clamp, clamp backward
// and where need the offsets themselves, so the loop is shared from here.
#pragma once

#include <cstdint>

#include "kernels.h"

namespace qk::cuda {

// Element i's offset (in elements) in operands 0..K-1.
template <int K>
__device__ __forceinline__ void strided_offsets(const ElementwiseLayout& l, int64_t i, int64_t (&off)[K]) {
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    const int64_t c = i % l.sizes[d];
    i /= l.sizes[d];
    for (int k = 0; k < K; ++k) off[k] += c * l.strides[k][d];
  }
}

// f(off) for every element, off the K operands' offsets.
template <int K, typename F>
__global__ void strided_for_each(ElementwiseLayout l, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < l.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[K];
    strided_offsets<K>(l, i, off);
    f(off);
  }
}

// Blocks of `threads` for n elements, capped (a grid-stride loop covers the rest).
inline unsigned strided_grid(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

}  // namespace qk::cuda
