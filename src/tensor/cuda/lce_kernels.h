// The fused output layer + cross entropy on CUDA (lce.cu): the per-row step
// between its matrix products (lce_ops.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace qk::cuda {

// *bad <- min over rows i whose target is neither ignore_index nor in [0, V)
// of i + 1 (start it at ~0: an atomicMin).
void launch_lce_check_targets(const void* target, int target_dtype, int64_t N, int64_t V, int64_t ignore_index,
                              unsigned long long* bad, cudaStream_t stream);
// For rows [0, r) of logits [r, V] (f32, or f64 for f64 inputs), targets
// and token weights (of their dtypes; weights null: ones) already offset to
// the chunk: loss[i] = w (logsumexp - logit[t]) in f64 (0 for an ignored
// row); with grad, the gradient w (softmax - onehot(t)) (zeros for an
// ignored row) in place, or into low (bf16 or f16 of low_dtype, [r, V]) when
// low is not null.
void launch_lce_rows(void* logits, int dtype, const void* target, int target_dtype, const void* weight,
                     int weight_dtype, int64_t r, int64_t V, int64_t ignore_index, bool grad, double* loss, void* low,
                     int low_dtype, cudaStream_t stream);

}  // namespace qk::cuda
