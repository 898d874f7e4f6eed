// oneDNN matmul primitives: the bf16 GEMM (bf16 operands, f32 accumulation,
// f32 or bf16 result) on CPUs with AVX512-BF16 or AMX, one primitive per
// problem (shape, layouts, dtypes) created once and cached.
//
//   // C[M,N] f32 = A[M,K] . B^T, B stored [N,K] row-major (ldb = K):
//   if (onednn::has_bf16_matmul())
//     onednn::matmul({false, tb = true, m, n, k, DType::bf16, DType::f32}, a, k, b, k, c, n);
//
// Without oneDNN (or on a CPU without native bf16 kernels, where oneDNN would
// run its reference code) has_bf16_matmul() is false and the callers
// (gemm.cc) multiply in f32 instead; matmul() itself then throws.
#pragma once

#include <cstdint>
#include <string>

#include "qk/tensor/dtype.h"

namespace qk::cpu::onednn {

// True when bf16 products run natively through oneDNN here: built with
// oneDNN, the CPU has AVX512-BF16 (or AMX), and QK_GEMM_BF16 is not "f32".
bool has_bf16_matmul();

// One product C = op(A) op(B) (+ bias) (+ C when accumulate), row-major, in
// BLAS terms: op(A) is [M,K] (A stored [K,M] when trans_a), op(B) [K,N].
struct MatmulShape {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  DType ab = DType::bf16;       // dtype of A and B: bf16 or f32
  DType c = DType::bf16;        // dtype of C: bf16 or f32
  bool accumulate = false;      // C += product (beta = 1) instead of C = product
  bool has_bias = false;        // + bias[N] on every row
  DType bias = DType::f32;      // dtype of the bias: bf16 or f32
  bool has_addend = false;      // + an f32 [M,N] matrix (dense, row-major)
};

// Runs the product on oneDNN's OpenMP team (qk::num_threads() threads, one
// inside a parallel region). lda/ldb/ldc are leading dimensions as stored.
// m, n, k > 0. The addend (when s.has_addend) is added in f32 before C's
// rounding: a bf16 C = f32 partial sums + product, in one pass.
void matmul(const MatmulShape& s, const void* a, int64_t lda, const void* b, int64_t ldb, void* c,
            int64_t ldc, const void* bias = nullptr, const float* addend = nullptr);

// oneDNN's name of the kernel it runs for that product, e.g.
// "brg:avx512_core_bf16" (benchmarks and logs; tests must not depend on it).
std::string matmul_impl(const MatmulShape& s, int64_t lda, int64_t ldb, int64_t ldc);

// Drops every cached matmul primitive.
void clear_matmul_cache();

}  // namespace qk::cpu::onednn
