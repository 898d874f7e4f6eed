// CUDA kernels of my_ops::fused_bias_gelu: the forward and the input
// gradient elementwise (grid-stride), the bias gradient as a column sum
// (one thread per column: consecutive threads read consecutive addresses).
#include <cuda_runtime.h>

#include "fused_bias_gelu.h"

namespace my_ops {
namespace {

template <typename T>
__device__ T gelu(T u) {
  return T(0.5) * u * (T(1) + erf(u * T(0.7071067811865476)));
}
// d/du gelu(u) = Phi(u) + u * phi(u).
template <typename T>
__device__ T gelu_grad(T u) {
  const T cdf = T(0.5) * (T(1) + erf(u * T(0.7071067811865476)));
  const T pdf = T(0.3989422804014327) * exp(T(-0.5) * u * u);
  return cdf + u * pdf;
}

template <typename T>
__global__ void forward_kernel(const T* x, const T* bias, T* y, int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = gelu(x[i] + bias[i % cols]);
}

template <typename T>
__global__ void grad_input_kernel(const T* grad, const T* x, const T* bias, T* dx, int64_t n,
                                  int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = grad[i] * gelu_grad(x[i] + bias[i % cols]);
}

template <typename T>
__global__ void grad_bias_kernel(const T* dx, T* dbias, int64_t rows, int64_t cols) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  double acc = 0;
  for (int64_t r = 0; r < rows; ++r) acc += dx[r * cols + c];
  dbias[c] = T(acc);
}

constexpr int kThreads = 256;
int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

template <typename T>
int forward(const void* x, const void* bias, void* y, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  forward_kernel<T><<<blocks_for(n), kThreads>>>(static_cast<const T*>(x),
                                                 static_cast<const T*>(bias), static_cast<T*>(y),
                                                 n, cols);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int backward(const void* grad, const void* x, const void* bias, void* dx, void* dbias,
             int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  grad_input_kernel<T><<<blocks_for(n), kThreads>>>(
      static_cast<const T*>(grad), static_cast<const T*>(x), static_cast<const T*>(bias),
      static_cast<T*>(dx), n, cols);
  grad_bias_kernel<T><<<blocks_for(cols), kThreads>>>(static_cast<const T*>(dx),
                                                      static_cast<T*>(dbias), rows, cols);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int fused_bias_gelu_forward_cuda(const void* x, const void* bias, void* y, int64_t rows,
                                 int64_t cols, bool is_f64) {
  return is_f64 ? forward<double>(x, bias, y, rows, cols) : forward<float>(x, bias, y, rows, cols);
}

int fused_bias_gelu_backward_cuda(const void* grad, const void* x, const void* bias, void* dx,
                                  void* dbias, int64_t rows, int64_t cols, bool is_f64) {
  return is_f64 ? backward<double>(grad, x, bias, dx, dbias, rows, cols)
                : backward<float>(grad, x, bias, dx, dbias, rows, cols);
}

const char* cuda_error_name(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

}  // namespace my_ops
