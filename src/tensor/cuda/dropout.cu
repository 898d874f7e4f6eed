// Inverted dropout on CUDA with the CPU's random stream (src/tensor/cpu/
// dropout.cc): element i is kept (and scaled by 1/(1-p)) when word i % 4 of
// Philox-4x32-10(seed, counter offset + i / 4), its top 24 bits as a fraction
// of 2^24, is below 1 - p. Same seed and offset, same mask, bit for bit.
#include <cstdint>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "kernels.h"
#include "philox.cuh"

namespace qk::cuda {

namespace {

// One thread per group of 4 elements (one Philox counter).
template <typename T>
__global__ void dropout_kernel(T* out, T* mask, const T* x, int64_t n, uint32_t keep_below, float scale_f,
                               double scale_d, uint64_t seed, uint64_t offset, const int64_t* offset_base) {
  using A = typename ComputeOf<T>::type;
  if (offset_base) offset += static_cast<uint64_t>(*offset_base);  // a graph's counters, set before each replay
  const A scale = sizeof(A) == 8 ? static_cast<A>(scale_d) : static_cast<A>(scale_f);
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups; g += int64_t(gridDim.x) * blockDim.x) {
    uint32_t bits[4];
    philox(seed, offset + static_cast<uint64_t>(g), bits);
    for (int w = 0; w < 4; ++w) {
      const int64_t i = 4 * g + w;
      if (i >= n) break;
      const A m = scale * static_cast<A>((bits[w] >> 8) < keep_below);
      mask[i] = convert<T>(m);
      out[i] = convert<T>(convert<A>(x[i]) * m);
    }
  }
}

}  // namespace

void launch_dropout(void* out, void* mask, const void* x, int dtype, int64_t n, double p, uint64_t seed,
                    uint64_t offset, const int64_t* offset_base, cudaStream_t stream) {
  if (n <= 0) return;
  const uint32_t keep_below = static_cast<uint32_t>((1.0 - p) * 16777216.0);
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  const int64_t groups = (n + 3) / 4;
  const int64_t blocks = (groups + kBlock - 1) / kBlock;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    dropout_kernel<T><<<grid, kBlock, 0, stream>>>(static_cast<T*>(out), static_cast<T*>(mask),
                                                   static_cast<const T*>(x), n, keep_below,
                                                   static_cast<float>(scale), scale, seed, offset, offset_base);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace qk::cuda
