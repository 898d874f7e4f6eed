// The CUDA backend's kernels (kernels.cu), launched on the current stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace qk::cuda {

// Fills n elements of `size` bytes each (1, 2, 4 or 8) at dst with the bit
// pattern `bits` (the value already converted to the element's dtype).
void launch_fill(void* dst, int64_t n, size_t size, uint64_t bits, cudaStream_t stream);

}  // namespace qk::cuda
