// Batch norm's fused CUDA kernels (batch_norm.cu): the sizes of one call and
// its scalars, already in f32 as the composed form rounds them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace qk::cuda {

// x contiguous [N, C, S] (S: the dims after the channels, multiplied).
struct BatchNormShape {
  int64_t N = 0, C = 0, S = 1;
  float eps_f32 = 0;             // float(eps)
  float momentum = 0, one_minus_momentum = 1;  // float(m), float(1 - m)
  float unbias = 1;              // float(M / (M - 1)), M = N S
  float minus_inv_m = 0;         // float(-1 / M)
};

// Training: y, the batch's mean and 1/sqrt(var + eps) per channel, and the
// running statistics (either may be null) updated in place. dtype: f32, f16
// or bf16 (x and y); everything per channel is f32.
void launch_batch_norm_train(const BatchNormShape& s, int dtype, const void* x, void* y, float* save_mean,
                             float* save_invstd, float* running_mean, float* running_var, const float* weight,
                             const float* bias, cudaStream_t stream);
// Eval: y from the running statistics; scale and shift are [C] scratch.
void launch_batch_norm_eval(const BatchNormShape& s, int dtype, const void* x, void* y, const float* running_mean,
                            const float* running_var, const float* weight, const float* bias, float* save_mean,
                            float* save_invstd, float* scale, float* shift, cudaStream_t stream);
// dx (training: through the batch statistics; eval: w invstd dy), and
// dweight, dbias (either may be null).
void launch_batch_norm_backward(const BatchNormShape& s, int dtype, bool training, const void* gy, const void* x,
                                const float* save_mean, const float* save_invstd, const float* weight, void* dx,
                                float* dweight, float* dbias, cudaStream_t stream);

// Channels last (memory_format.h): x, y, dy and dx stored [N, S, C], seen
// as rows [M, C] (M = N S). Each call is three launches: per-channel sums
// over `splits` parts of `span` rows in tiles of kReduceTileCols channels
// (reduce_plan.h's column plan), a per-channel pass combining the parts in
// order, and the elementwise pass. `work` holds nhwc_work_floats(C, splits)
// f32 (the caller's, from the caching allocator).
struct NhwcPlan {
  int64_t splits = 1, span = 0;
};
inline int64_t nhwc_work_floats(int64_t C, int64_t splits) { return 2 * C * splits + 3 * C; }
void launch_batch_norm_nhwc_train(const BatchNormShape& s, const NhwcPlan& p, int dtype, const void* x, void* y,
                                  float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                                  const float* weight, const float* bias, float* work, cudaStream_t stream);
void launch_batch_norm_nhwc_eval(const BatchNormShape& s, int dtype, const void* x, void* y,
                                 const float* running_mean, const float* running_var, const float* weight,
                                 const float* bias, float* save_mean, float* save_invstd, float* work,
                                 cudaStream_t stream);
void launch_batch_norm_nhwc_backward(const BatchNormShape& s, const NhwcPlan& p, int dtype, bool training,
                                     const void* gy, const void* x, const float* save_mean, const float* save_invstd,
                                     const float* weight, void* dx, float* dweight, float* dbias, float* work,
                                     cudaStream_t stream);

}  // namespace qk::cuda
