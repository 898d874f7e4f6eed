// Raw matrix products (f32/f64 through oneDNN's sgemm or OpenBLAS; bf16
// through oneDNN's bf16 matmul on CPUs with AVX512-BF16 or AMX; f16, and bf16
// elsewhere, converted to f32). Reduced floats always accumulate in f32 and
// round once at the end.
#pragma once

#include "qk/tensor/tensor.h"

namespace qk::ops {

// [M,K] x [K,N] -> [M,N]; transposed (column-major) inputs are passed to BLAS without a copy.
Tensor mm(const Tensor& a, const Tensor& b);
// [B,M,K] x [B,K,N] -> [B,M,N].
Tensor bmm(const Tensor& a, const Tensor& b);
// numpy matmul semantics: 1-D vectors, batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [.., in] . w[out, in]^T + b[out] -> [.., out] (b may be undefined).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

}  // namespace qk::ops
