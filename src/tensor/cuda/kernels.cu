#include "kernels.h"

#include "cuda_check.h"

namespace qk::cuda {

namespace {

template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = value;
}

template <typename T>
void fill_as(void* dst, int64_t n, uint64_t bits, cudaStream_t stream) {
  T value;
  static_assert(sizeof(T) <= sizeof(bits));
  __builtin_memcpy(&value, &bits, sizeof(T));
  // A grid-stride loop: enough blocks to fill the GPU, not one per element.
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
  fill_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<T*>(dst), n, value);
  QK_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_fill(void* dst, int64_t n, size_t size, uint64_t bits, cudaStream_t stream) {
  if (n <= 0) return;
  switch (size) {
    case 1: return fill_as<uint8_t>(dst, n, bits, stream);
    case 2: return fill_as<uint16_t>(dst, n, bits, stream);
    case 4: return fill_as<uint32_t>(dst, n, bits, stream);
    case 8: return fill_as<uint64_t>(dst, n, bits, stream);
  }
}

}  // namespace qk::cuda
