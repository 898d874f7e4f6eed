// The CUDA backend's one matrix-product entry (matmul.cc, through cuBLASLt),
// for its kernel-table glue: mm, bmm, linear, the grouped products and the
// fused linear + cross entropy.
#pragma once

#include <cstdint>

#include "qk/tensor/tensor.h"

namespace qk::cuda {

// out[b] (+)= a[b] @ bm[b] for b < batch (batch 1: plain 2-D); a [.., M, K],
// bm [.., K, N], out [.., M, N] row-major with leading dimension N (a row
// block of a larger output qualifies). Operands row-major or transposed
// views go in without a copy. out has the operands' dtype, or f32 for bf16
// and f16 operands (f32 accumulation either way). accumulate: out += a @ bm.
void gemm(const Tensor& out, const Tensor& a, const Tensor& bm, int64_t batch, bool accumulate = false);

}  // namespace qk::cuda
