// The multi-tensor passes' launches (multi_tensor.cu): up to kMultiTensorMax
// tensors of one dtype per launch, their device pointers and element counts
// in the kernel's arguments. Plain data only: the .cu is compiled as C++17.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace qk::cuda {

inline constexpr int kMultiTensorMax = 48;

// Each tensor *= scale (not at 1), and out[0] += the squares of the stored
// results, out[1] += the count of inf/NaN values seen before scaling.
void launch_multi_tensor_unscale_norm(int dtype, void* const* data, const int64_t* n, int count, double scale,
                                      double* out, cudaStream_t stream);
// Each tensor *= scale.
void launch_multi_tensor_scale(int dtype, void* const* data, const int64_t* n, int count, double scale,
                               cudaStream_t stream);

}  // namespace qk::cuda
