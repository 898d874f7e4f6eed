// Device and page-locked host arrays for qk md's CUDA kernels
// (nonbonded_cuda.cu, pme_cuda.cu): grown as needed, freed with the owner, a
// CUDA error reported as a DeviceError naming what was being done.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "nonbonded_gpu_device.h"  // nb_device_error

namespace qk::md::gpu {

inline void cuda_check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) nb_device_error("qk md on the GPU: " + what + ": " + cudaGetErrorString(e));
}

// Memory that grows to the largest size asked for; a failed allocation leaves it empty.
template <typename T, cudaError_t (*kAlloc)(void**, size_t), cudaError_t (*kFree)(void*)>
struct GrowingArray {
  T* ptr = nullptr;
  size_t capacity = 0;
  GrowingArray() = default;
  GrowingArray(const GrowingArray&) = delete;
  GrowingArray& operator=(const GrowingArray&) = delete;
  ~GrowingArray() {
    if (ptr) kFree(ptr);
  }
  void reserve(size_t n, const char* what) {
    if (n <= capacity) return;
    if (ptr) cuda_check(kFree(ptr), what);
    ptr = nullptr;
    capacity = 0;
    cuda_check(kAlloc(reinterpret_cast<void**>(&ptr), n * sizeof(T)), what);
    capacity = n;
  }
};

inline cudaError_t device_alloc(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
inline cudaError_t host_alloc(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }

template <typename T>
struct DeviceArray : GrowingArray<T, device_alloc, cudaFree> {
  void upload(const T* data, size_t n, cudaStream_t s, const char* what) {
    this->reserve(n, what);
    if (n) cuda_check(cudaMemcpyAsync(this->ptr, data, n * sizeof(T), cudaMemcpyHostToDevice, s), what);
  }
};

// Page-locked host memory, so a stream's copies run without the host waiting on them.
template <typename T>
using PinnedArray = GrowingArray<T, host_alloc, cudaFreeHost>;

}  // namespace qk::md::gpu
