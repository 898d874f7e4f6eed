// The CUDA backend's kernels of LLM layers (llm_norm.cu, embedding.cu,
// llm.cu): layer and RMS norm, embedding, rotary embedding, SwiGLU. Plain
// data only, as kernels.h (dtype codes: its DtypeCode); the C++20 glue is
// llm_ops.cc, the CPU contracts these follow are src/tensor/cpu/norm.h,
// embedding.h, rotary.h and swiglu.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace qk::cuda {

// ---- layer norm (layer = true) and RMS norm over contiguous x [M, D] ----
// The accumulation type A is f32 (f64 for an f64 x); w and b are A values
// [D] or null (1 and 0); mean (layer norm only) and rstd are A values [M].
void launch_norm_forward(bool layer, void* out, void* mean, void* rstd, const void* x, int dtype, const void* w,
                         const void* b, int64_t M, int64_t D, double eps, cudaStream_t stream);
// dx from grad_out g and x (both [M, D] of `dtype`), the forward's mean
// (layer norm; ignored otherwise) and rstd, and w (A values [D] or null).
void launch_norm_backward_dx(bool layer, void* dx, const void* g, const void* x, const void* mean, const void* rstd,
                             const void* w, int dtype, int64_t M, int64_t D, cudaStream_t stream);
// The row chunks the weight gradients are summed over (a function of M and
// D only, so the sums repeat on any GPU): `partials` holds 2 * chunks * D
// accumulation values.
int64_t norm_param_chunks(int64_t M, int64_t D);
// dw[i] = sum_r g[r,i] xhat[r,i] (null: not wanted), db[i] = sum_r g[r,i]
// (layer norm only; null: not wanted), written in their dtypes (any
// floating): per-chunk partials in A, then a sum over chunks in f64, as the
// CPU's per-block partials.
void launch_norm_param_grads(bool layer, void* dw, int dw_dtype, void* db, int db_dtype, void* partials,
                             int64_t chunks, const void* g, const void* x, const void* mean, const void* rstd,
                             int dtype, int64_t M, int64_t D, cudaStream_t stream);

// ---- embedding ----
// out[i] <- weight row idx[i] (rows of row_bytes, any dtype) for M indices
// (idx_dtype kI32 or kI64); an index outside [0, V) writes nothing and sets
// *bad to min(*bad, i + 1) (start it at ~0).
void launch_embedding(void* out, const void* weight, size_t row_bytes, const void* idx, int idx_dtype, int64_t M,
                      int64_t V, unsigned long long* bad, cudaStream_t stream);
// Bytes of device workspace launch_embedding_backward needs for M indices and V rows.
size_t embedding_backward_workspace(int64_t M, int64_t V);
// dw [V, D] (zeroed by the caller) += the grad rows [M, D] of each index,
// summed in A in position order, skipping padding_idx and indices outside
// [0, V).
void launch_embedding_backward(void* dw, const void* grad, int dtype, const void* idx, int idx_dtype, int64_t M,
                               int64_t D, int64_t V, int64_t padding_idx, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream);

// ---- rotary embedding and SwiGLU (llm.cu) ----
// out [B, T, H, D] contiguous <- x at strides (sb, st, sh, 1) rotated on its
// first R dims by cos, sin [T, R] (cs_dtype kF32 or kF64); backward: the
// transposed rotation.
void launch_rotary(void* out, const void* x, int dtype, int64_t B, int64_t T, int64_t H, int64_t D, int64_t sb,
                   int64_t st, int64_t sh, const void* cos, const void* sin, int cs_dtype, int64_t R, bool backward,
                   cudaStream_t stream);
// y [rows, F] <- silu(x[:, :F]) * x[:, F:] of x [rows, 2F]; backward: dx [rows, 2F] from g [rows, F].
void launch_swiglu(void* y, const void* x, int dtype, int64_t rows, int64_t F, cudaStream_t stream);
void launch_swiglu_backward(void* dx, const void* g, const void* x, int dtype, int64_t rows, int64_t F,
                            cudaStream_t stream);

}  // namespace qk::cuda
