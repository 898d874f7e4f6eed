// The multiprocessor count of each device, read once (reduction plans size
// their grids by it).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "cuda_check.h"

namespace qk::cuda {

inline int64_t multiprocessors(int device) {
  static std::array<std::atomic<int>, 64> known{};
  if (device < 0 || device >= static_cast<int>(known.size())) return 1;
  int n = known[device].load(std::memory_order_relaxed);
  if (n == 0) {
    QK_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    known[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace qk::cuda
