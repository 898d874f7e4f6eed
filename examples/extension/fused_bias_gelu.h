// The CUDA launchers of my_ops, in plain C++ types: the .cu file needs no
// qianka header (nvcc compiles only the device code), the .cc file wraps
// them into kernels on qk::Tensor. They return a cudaError_t (0: success).
#pragma once

#include <cstdint>

namespace my_ops {

// y[r, c] = gelu(x[r, c] + bias[c]) over a rows x cols row-major matrix.
int fused_bias_gelu_forward_cuda(const void* x, const void* bias, void* y, int64_t rows,
                                 int64_t cols, bool is_f64);
// dx = grad * gelu'(x + bias); dbias[c] = sum over rows of dx[r, c].
int fused_bias_gelu_backward_cuda(const void* grad, const void* x, const void* bias, void* dx,
                                  void* dbias, int64_t rows, int64_t cols, bool is_f64);
const char* cuda_error_name(int err);

}  // namespace my_ops
