// Raw matrix products through OpenBLAS (f32/f64 native; f16/bf16 converted to
// f32, multiplied with f32 accumulation, rounded back).
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
