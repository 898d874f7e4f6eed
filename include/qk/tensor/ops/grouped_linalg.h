// Grouped matrix products: many independent GEMMs in one call, where the
// left operands are consecutive row blocks of one matrix (a mixture of
// experts' per-expert layers over tokens sorted by expert; Megatron's
// --moe-grouped-gemm, grouped_gemm.ops.gmm).
//
//   // x [M, K] with rows sorted by group: group g is the next rows[g] rows
//   // (sum(rows) == M; a group may be empty); w[g] [N, K], one per group.
//   Tensor y  = qk::ops::grouped_mm(x, rows, w, /*trans_b=*/true);     // rows of g: x_g . w[g]^T  [M, N]
//   Tensor dx = qk::ops::grouped_mm(dy, rows, w, /*trans_b=*/false);   // rows of g: dy_g . w[g]   [M, K]
//   std::vector<Tensor> dw = qk::ops::grouped_mm_tn(dy, x, rows);      // dy_g^T . x_g             [N, K] each
//
// One call cuts every group into tiles and the threads take tiles from all
// groups as they come, so many small groups keep every core busy where a
// loop of per-group products would run each small product alone. f32/f64
// through the BLAS the plain products use, bf16 with f32 accumulation
// (oneDNN's bf16 matmul where the CPU has it, f32 otherwise), f16 in f32.
#pragma once

#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::ops {

// a [M, K]; b[g] [N, K] when trans_b (a linear layer's weight), else [K, N];
// bias: empty, or one [N] per group added to that group's rows.
// Returns [M, N] in a's dtype.
Tensor grouped_mm(const Tensor& a, const std::vector<int64_t>& rows, const std::vector<Tensor>& b, bool trans_b,
                  const std::vector<Tensor>& bias = {});
// a [M, P], b [M, Q] with the same row groups: a_g^T . b_g [P, Q] per group
// (zeros for an empty group). The weight gradients of grouped_mm.
std::vector<Tensor> grouped_mm_tn(const Tensor& a, const Tensor& b, const std::vector<int64_t>& rows);

}  // namespace qk::ops
