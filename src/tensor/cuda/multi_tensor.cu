// Multi-tensor passes over gradients (apex's multi_tensor_applier): the
// tensors' pointers and sizes travel in the kernel's arguments, each block
// takes one chunk of one tensor, and the block's sums go to the result with
// one atomic add each: one launch per group of tensors, no reduction kernel
// per tensor, nothing read back here.
#include "dtypes.cuh"
#include "multi_tensor.h"
#include "multi_tensor_list.cuh"

namespace qk::cuda {

namespace {

using TensorList = ChunkedTensorList<1>;

template <typename T>
__global__ void unscale_norm_kernel(TensorList l, double scale, double* out) {
  using C = typename ComputeOf<T>::type;  // f32 for f32/bf16/f16 (PyTorch's norms), f64 for f64
  __shared__ double scratch[kBlock];
  int64_t lo = 0, hi = 0;
  T* p = static_cast<T*>(l.data[0][tensor_of_block(l, &lo, &hi)]);
  const C k = static_cast<C>(scale);
  const bool apply = scale != 1.0;
  C squares = 0;
  int bad = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    C v = convert<C>(p[i]);
    bad += !isfinite(v);
    if (apply) {
      p[i] = convert<T>(v * k);
      v = convert<C>(p[i]);  // the square of what is stored, as the CPU
    }
    squares += v * v;
  }
  const auto plus = [](double a, double b) { return a + b; };
  const double block_squares = block_reduce<double>(static_cast<double>(squares), plus, scratch);
  const double block_bad = block_reduce<double>(static_cast<double>(bad), plus, scratch);
  if (threadIdx.x == 0) {
    atomicAdd(out, block_squares);
    if (block_bad > 0) atomicAdd(out + 1, block_bad);
  }
}

template <typename T>
__global__ void scale_kernel(TensorList l, double scale) {
  using C = typename ComputeOf<T>::type;
  int64_t lo = 0, hi = 0;
  T* p = static_cast<T*>(l.data[0][tensor_of_block(l, &lo, &hi)]);
  const C k = static_cast<C>(scale);
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) p[i] = convert<T>(convert<C>(p[i]) * k);
}

}  // namespace

void launch_multi_tensor_unscale_norm(int dtype, void* const* data, const int64_t* n, int count, double scale,
                                      double* out, cudaStream_t stream) {
  TensorList l;
  const int64_t blocks = make_chunked_list(&data, n, count, l);
  if (blocks == 0) return;
  dispatch_floating(dtype, [&](auto tag) {
    using T = decltype(tag);
    unscale_norm_kernel<T><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(l, scale, out);
  });
}

void launch_multi_tensor_scale(int dtype, void* const* data, const int64_t* n, int count, double scale,
                               cudaStream_t stream) {
  TensorList l;
  const int64_t blocks = make_chunked_list(&data, n, count, l);
  if (blocks == 0) return;
  dispatch_floating(dtype, [&](auto tag) {
    using T = decltype(tag);
    scale_kernel<T><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(l, scale);
  });
}

}  // namespace qk::cuda
