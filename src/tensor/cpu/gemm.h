// CPU matrix products over OpenBLAS: the GEMM the convolution kernels share,
// and the kernels behind ops::mm / bmm / linear.
//
// Row-major throughout. An operand whose strides make it a row-major or a
// column-major matrix is handed to BLAS as is (a column-major one with the
// transpose flag), so `a.t()` costs no copy; only genuinely strided operands
// (slices with a step, expanded rows) are copied first.
#pragma once

#include <cstdint>
#include <optional>

#include "qk/tensor/tensor.h"

namespace qk::cpu {

// How a [rows, cols] matrix with element strides (rs, cs) looks to BLAS:
// row-major with leading dimension `ld` (trans = false) or column-major,
// i.e. the transpose of a row-major [cols, rows] (trans = true).
struct BlasOperand {
  bool trans = false;
  int64_t ld = 1;
};
// nullopt when neither layout fits and the operand must be copied.
std::optional<BlasOperand> blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs);

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major, for float
// and double. lda/ldb are the leading dimensions of A and B as stored.
//
// Note [One thread pool]: OpenBLAS runs single-threaded, always; a large
// product is split into row or column blocks run on qk's pool instead.
// OpenBLAS's own workers would spin for a while after every call, taking a
// core from the next kernel on qk's pool (or oneDNN's), and calls made from
// inside a parallel_for (a conv per sample) must not fan out again anyway.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// C[M,N] = op(A) op(B), or C += op(A) op(B) when accumulate, for bf16 A and
// B with f32 accumulation; C is f32 or bf16 (c_dtype), rounded once. With
// an addend (an f32 [M,N] matrix, dense; not with accumulate), C = addend +
// op(A) op(B) rounded once: the last step of a sum over chunks kept in f32.
// Runs oneDNN's bf16 matmul where onednn::has_bf16_matmul(), else widens the
// operands to f32 (a copy of each) and calls gemm<float>.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a,
               int64_t lda, const BFloat16* b, int64_t ldb, bool accumulate, void* c,
               DType c_dtype, int64_t ldc, const float* addend = nullptr);

// Puts OpenBLAS in single-threaded mode (idempotent; gemm() calls it).
void init_blas();

// Kernels behind ops::mm / ops::bmm / ops::linear. Inputs are validated by
// the front functions (src/tensor/linalg.cc); any strides are accepted.
// a [M,K], b [K,N] -> [M,N]
Tensor mm(const Tensor& a, const Tensor& b);
// a [B,M,K], b [B,K,N] -> [B,M,N]; a batch stride of 0 (broadcast) is fine.
Tensor bmm(const Tensor& a, const Tensor& b);
// x [R,in], w [out,in], bias [out] or undefined -> [R,out]
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);

}  // namespace qk::cpu
