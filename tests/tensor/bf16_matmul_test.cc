// bf16 matrix products (oneDNN's bf16 matmul where the CPU has it, the f32
// fallback elsewhere; ctest also runs these with QK_GEMM_BF16=f32): each
// equals the f32 product of the same (bf16-rounded) inputs, for every layout
// the autograd backward uses and odd sizes.
//
// Tolerance: the product accumulates in f32 and rounds once to bf16, so a
// bf16 result is within half a bf16 ulp (2^-9 relative) of the f32 product,
// plus f32 summation-order differences (~k * 2^-24 of sum |a||b|); we allow
// 2^-8 relative + 1e-5 * k absolute. f32 results get 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/tensor/ops/view.h"
#include "cpu/gemm.h"

namespace qk {
namespace {

using test::all_close;

constexpr double kBf16Rtol = 1.0 / 256;

// A [rows, cols] bf16 matrix stored as such, or as the transpose of a
// contiguous [cols, rows] (a column-major view, as a.t() gives).
Tensor bf16_matrix(int64_t rows, int64_t cols, bool transposed, Generator& g) {
  if (transposed) return ops::cast(randn({cols, rows}, {}, g), DType::bf16).t();
  return ops::cast(randn({rows, cols}, {}, g), DType::bf16);
}

Tensor f32(const Tensor& t) { return ops::cast(t, DType::f32); }

struct Sizes {
  int64_t m, n, k;
};

TEST(Bf16Matmul, EqualsF32ProductOfRoundedInputsForAllLayouts) {
  Generator g(3);
  for (Sizes s : {Sizes{1, 1, 1}, Sizes{3, 5, 7}, Sizes{17, 33, 65}, Sizes{64, 129, 31},
                  Sizes{130, 67, 259}}) {
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;  // NN, TN, NT, TT
      Tensor a = bf16_matrix(s.m, s.k, ta, g), b = bf16_matrix(s.k, s.n, tb, g);
      Tensor got = ops::mm(a, b);
      ASSERT_EQ(got.dtype(), DType::bf16);
      Tensor ref = ops::mm(f32(a), f32(b));
      EXPECT_TRUE(all_close(f32(got), ref, kBf16Rtol, 1e-5 * static_cast<double>(s.k)))
          << "M=" << s.m << " N=" << s.n << " K=" << s.k << " trans_a=" << ta << " trans_b=" << tb;
    }
  }
}

TEST(Bf16Matmul, LinearWithBiasAndBatchedBroadcast) {
  Generator g(4);
  Tensor x = ops::cast(randn({2, 5, 19}, {}, g), DType::bf16);
  Tensor w = ops::cast(randn({23, 19}, {}, g), DType::bf16);
  Tensor b = ops::cast(randn({23}, {}, g), DType::bf16);
  Tensor got = ops::linear(x, w, b);
  ASSERT_EQ(got.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(f32(got), ops::linear(f32(x), f32(w), f32(b)), kBf16Rtol, 2e-4));
  // A batch broadcast along one side (stride 0) and batched operands.
  Tensor a3 = ops::cast(randn({3, 9, 11}, {}, g), DType::bf16);
  Tensor b2 = ops::cast(randn({11, 6}, {}, g), DType::bf16);
  Tensor b3 = ops::cast(randn({3, 11, 6}, {}, g), DType::bf16);
  Tensor a2 = ops::cast(randn({9, 11}, {}, g), DType::bf16);
  EXPECT_TRUE(all_close(f32(ops::matmul(a3, b2)), ops::matmul(f32(a3), f32(b2)), kBf16Rtol, 2e-4));
  EXPECT_TRUE(all_close(f32(ops::matmul(a2, b3)), ops::matmul(f32(a2), f32(b3)), kBf16Rtol, 2e-4));
  EXPECT_TRUE(all_close(f32(ops::bmm(a3, b3)), ops::bmm(f32(a3), f32(b3)), kBf16Rtol, 2e-4));
}

TEST(Bf16Matmul, LinearBackwardProductsMatchF32) {
  // The three products of a linear layer's step: NT forward, NN for dx, TN for dw.
  Generator g(5);
  Tensor x = ops::cast(randn({37, 24}, {}, g), DType::bf16).requires_grad_();
  Tensor w = ops::cast(randn({29, 24}, {}, g), DType::bf16).requires_grad_();
  Tensor probe = ops::cast(randn({37, 29}, {}, g), DType::bf16);
  Tensor y = linear(x, w);
  sum(mul(y, probe)).backward();
  Tensor x32 = f32(x).requires_grad_(), w32 = f32(w).requires_grad_();
  Tensor y32 = linear(x32, w32);
  sum(mul(y32, f32(probe))).backward();
  EXPECT_TRUE(all_close(f32(y), y32, kBf16Rtol, 1e-4));
  EXPECT_TRUE(all_close(f32(x.grad()), x32.grad(), kBf16Rtol, 1e-4));
  EXPECT_TRUE(all_close(f32(w.grad()), w32.grad(), kBf16Rtol, 1e-4));
}

TEST(Bf16Matmul, RawGemmWithF32ResultAccumulationAndAddend) {
  // gemm_bf16 (the fused cross entropy's GEMM): f32 out, C += A B, and a
  // bf16 C = addend + A B.
  Generator g(6);
  for (int layout = 0; layout < 4; ++layout) {
    const bool ta = layout & 1, tb = layout & 2;
    const int64_t m = 21, n = 35, k = 47;
    Tensor a = ops::contiguous(bf16_matrix(ta ? k : m, ta ? m : k, false, g));
    Tensor b = ops::contiguous(bf16_matrix(tb ? n : k, tb ? k : n, false, g));
    Tensor opa = ta ? f32(a).t() : f32(a), opb = tb ? f32(b).t() : f32(b);
    Tensor ref = ops::mm(opa, opb);
    Tensor c0 = randn({m, n}, {}, g);
    Tensor c = ops::clone(c0);
    cpu::gemm_bf16(ta, tb, m, n, k, a.data_ptr<BFloat16>(), a.size(1), b.data_ptr<BFloat16>(),
                   b.size(1), true, c.raw_data(), DType::f32, n);
    EXPECT_TRUE(all_close(c, add(c0, ref), 1e-5, 1e-5)) << "layout " << layout;
    Tensor cb = empty({m, n}, DType::bf16);
    cpu::gemm_bf16(ta, tb, m, n, k, a.data_ptr<BFloat16>(), a.size(1), b.data_ptr<BFloat16>(),
                   b.size(1), false, cb.raw_data(), DType::bf16, n);
    EXPECT_TRUE(all_close(f32(cb), ref, kBf16Rtol, 1e-5 * k)) << "layout " << layout;
    // bf16 C = f32 addend + product, rounded once.
    cpu::gemm_bf16(ta, tb, m, n, k, a.data_ptr<BFloat16>(), a.size(1), b.data_ptr<BFloat16>(),
                   b.size(1), false, cb.raw_data(), DType::bf16, n, c0.data_ptr<float>());
    EXPECT_TRUE(all_close(f32(cb), add(c0, ref), kBf16Rtol, 1e-5 * k)) << "layout " << layout;
  }
}

TEST(Bf16Matmul, EmptyInnerDimensionGivesZerosOrBias) {
  Tensor a = empty({3, 0}, DType::bf16), b = empty({0, 4}, DType::bf16);
  EXPECT_TRUE(all_close(f32(ops::mm(a, b)), zeros({3, 4}), 0, 0));
  Tensor bias = ops::cast(from_vector<float>({1, 2, 3, 4}, {4}), DType::bf16);
  Tensor y = ops::linear(empty({2, 0}, DType::bf16), empty({4, 0}, DType::bf16), bias);
  EXPECT_TRUE(all_close(f32(y), f32(ops::expand(bias, {2, 4})), 0, 0));
}

}  // namespace
}  // namespace qk
