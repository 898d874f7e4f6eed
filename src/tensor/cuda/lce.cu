// The per-row step of the fused output layer + cross entropy on CUDA, the
// CPU's row_loss_and_grad (src/tensor/cpu/linear_cross_entropy.cc): one
// block per row of logits, the max and the sum of exponentials as block
// reductions (a fixed order: repeatable), the loss in f64.
#include <cstdint>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "lce_kernels.h"

namespace qk::cuda {

namespace {

__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }

template <typename I>
__global__ void check_targets(const I* target, int64_t N, int64_t V, int64_t ignore, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = static_cast<int64_t>(target[i]);
    if (t != ignore && (t < 0 || t >= V)) atomicMin(bad, static_cast<unsigned long long>(i + 1));
  }
}

// A (f32 or f64) logits; I the target's type; W the weights' (any floating
// storage type, or void for none); L the low-precision gradient's type (A
// for in place).
template <typename A, typename I, typename W, typename L>
__global__ void lce_rows(A* logits, const I* target, const W* weight, int64_t V, int64_t ignore, bool grad,
                         double* loss, L* low) {
  __shared__ A scratch[kBlock];
  const int64_t i = blockIdx.x;
  A* l = logits + i * V;
  const int64_t t = static_cast<int64_t>(target[i]);
  const bool on = t != ignore;  // the targets were checked: on means t in [0, V)
  double w = 1;
  if constexpr (!std::is_same_v<W, void>) w = convert<double>(weight[i]);
  if (!on) {
    if (threadIdx.x == 0) loss[i] = 0;
    if (grad)
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        if constexpr (std::is_same_v<L, A>) l[j] = A(0);
        else low[i * V + j] = convert<L>(0.0f);
      }
    return;
  }
  A m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = l[j] > m ? l[j] : m;
  m = block_reduce(m, [](A x, A y) { return x > y ? x : y; }, scratch);
  A sum = 0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) sum += m_exp(l[j] - m);
  sum = block_reduce(sum, [](A x, A y) { return x + y; }, scratch);
  const A lt = l[t];
  if (threadIdx.x == 0) loss[i] = w * (static_cast<double>(m) + log(static_cast<double>(sum)) - static_cast<double>(lt));
  if (!grad) return;
  __syncthreads();  // every thread has read l[t] before it is overwritten
  const A scale = static_cast<A>(w) / sum;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    A g = m_exp(l[j] - m) * scale;
    if (j == t) g -= static_cast<A>(w);
    if constexpr (std::is_same_v<L, A>) l[j] = g;
    else low[i * V + j] = convert<L>(g);
  }
}

template <typename F>
void dispatch_target(int code, F&& f) {
  if (code == kI32) f(int32_t{});
  else f(int64_t{});
}

}  // namespace

void launch_lce_check_targets(const void* target, int target_dtype, int64_t N, int64_t V, int64_t ignore_index,
                              unsigned long long* bad, cudaStream_t stream) {
  if (N <= 0) return;
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
  dispatch_target(target_dtype, [&](auto it) {
    using I = decltype(it);
    check_targets<I><<<grid, kBlock, 0, stream>>>(static_cast<const I*>(target), N, V, ignore_index, bad);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_lce_rows(void* logits, int dtype, const void* target, int target_dtype, const void* weight,
                     int weight_dtype, int64_t r, int64_t V, int64_t ignore_index, bool grad, double* loss, void* low,
                     int low_dtype, cudaStream_t stream) {
  if (r <= 0) return;
  auto run = [&](auto a_tag, auto i_tag, auto w_tag, auto l_tag) {
    using A = decltype(a_tag);
    using I = decltype(i_tag);
    using W = typename decltype(w_tag)::type;
    using L = decltype(l_tag);
    lce_rows<A, I, W, L><<<static_cast<unsigned>(r), kBlock, 0, stream>>>(
        static_cast<A*>(logits), static_cast<const I*>(target), static_cast<const W*>(weight), V, ignore_index, grad,
        loss, static_cast<L*>(low));
    QK_CUDA_CHECK(cudaGetLastError());
  };
  struct None { using type = void; };
  dispatch_target(target_dtype, [&](auto it) {
    auto with_low = [&](auto wt) {
      if (dtype == kF64) return run(double{}, it, wt, double{});
      if (low == nullptr) return run(float{}, it, wt, float{});
      if (low_dtype == kBF16) return run(float{}, it, wt, __nv_bfloat16{});
      return run(float{}, it, wt, __half{});
    };
    if (weight == nullptr) return with_low(None{});
    dispatch_floating(weight_dtype, [&](auto w) {
      struct Some { using type = decltype(w); };
      with_low(Some{});
    });
  });
}

}  // namespace qk::cuda
