// Error checking of CUDA runtime calls: a failed call becomes a DeviceError
// that names the call, CUDA's error name and text, and where it was made.
#pragma once

#include <cuda_runtime_api.h>

namespace qk::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);

}  // namespace qk::cuda

#define QK_CUDA_CHECK(call)                                                      \
  do {                                                                           \
    cudaError_t qk_cuda_err_ = (call);                                           \
    if (qk_cuda_err_ != cudaSuccess)                                             \
      ::qk::cuda::throw_cuda_error(qk_cuda_err_, #call, __FILE__, __LINE__);     \
  } while (0)
