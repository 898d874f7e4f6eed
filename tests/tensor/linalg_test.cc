// Matrix products: values against a naive f64 reference, BLAS layouts
// (transposed, strided, broadcast operands), numpy matmul ranks, reduced
// floats, and the errors for bad shapes and dtypes.
#include <gtest/gtest.h>

#include <string>

#include "common/fixtures.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/tensor/ops/view.h"
#include "cpu/gemm.h"

namespace qk {
namespace {

using test::all_close;

// out[i,j] = sum_k a[i,k] b[k,j] in f64, from any strides.
Tensor naive_mm(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  auto va = ops::contiguous(a).to_vector<double>(), vb = ops::contiguous(b).to_vector<double>();
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) c[i * n + j] += va[i * k + l] * vb[l * n + j];
  return from_vector<double>(c, {m, n}, DType::f64);
}

TEST(Linalg, MmHandValues) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector<float>({7, 8, 9, 10, 11, 12}, {3, 2});
  // [[1*7+2*9+3*11, 1*8+2*10+3*12], [4*7+5*9+6*11, 4*8+5*10+6*12]]
  Tensor expect = from_vector<float>({58, 64, 139, 154}, {2, 2});
  EXPECT_TRUE(all_close(ops::mm(a, b), expect, 0, 0));
}

TEST(Linalg, MmMatchesNaiveF32AndF64) {
  manual_seed(1);
  for (DType dt : {DType::f32, DType::f64}) {
    for (auto [m, k, n] : {std::tuple{1, 1, 1}, {5, 7, 3}, {33, 65, 17}, {130, 140, 150}}) {
      Tensor a = randn({m, k}, dt), b = randn({k, n}, dt);
      double tol = dt == DType::f64 ? 1e-12 : 1e-4;
      EXPECT_TRUE(all_close(ops::mm(a, b).to(DType::f64), naive_mm(a, b), tol, tol))
          << dtype_name(dt) << " " << m << "x" << k << "x" << n;
    }
  }
}

TEST(Linalg, TransposedOperandsNeedNoCopyAndAreRight) {
  manual_seed(2);
  Tensor at = randn({40, 30}), bt = randn({20, 40});
  Tensor a = at.t(), b = bt.t();  // [30,40] and [40,20], column-major views
  auto la = cpu::blas_layout(a.size(0), a.size(1), a.stride(0), a.stride(1));
  ASSERT_TRUE(la.has_value());
  EXPECT_TRUE(la->trans);
  EXPECT_EQ(la->ld, 30);
  EXPECT_TRUE(all_close(ops::mm(a, b).to(DType::f64), naive_mm(a, b), 1e-4, 1e-4));
  EXPECT_TRUE(all_close(ops::mm(bt, at).to(DType::f64), naive_mm(bt, at), 1e-4, 1e-4));
}

TEST(Linalg, StridedOperandsAreCopied) {
  manual_seed(3);
  Tensor big = randn({20, 30});
  Tensor a = big.slice(0, 0, 20, 2).slice(1, 1, 30, 3);  // [10, 10], both strides > 1
  EXPECT_FALSE(cpu::blas_layout(10, 10, a.stride(0), a.stride(1)).has_value());
  Tensor b = randn({10, 4});
  EXPECT_TRUE(all_close(ops::mm(a, b).to(DType::f64), naive_mm(a, b), 1e-4, 1e-4));
  // A row slice keeps its leading dimension: no copy needed.
  Tensor rows = big.slice(1, 5, 15);  // [20, 10], ld 30
  auto l = cpu::blas_layout(20, 10, rows.stride(0), rows.stride(1));
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->ld, 30);
  EXPECT_TRUE(all_close(ops::mm(rows, b).to(DType::f64), naive_mm(rows, b), 1e-4, 1e-4));
}

TEST(Linalg, BmmMatchesPerBatchMm) {
  manual_seed(4);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Tensor a = randn({6, 5, 4}, DType::f64), b = randn({6, 4, 3}, DType::f64);
    Tensor c = ops::bmm(a, b);
    ASSERT_EQ(c.shape(), (Shape{6, 5, 3}));
    for (int64_t i = 0; i < 6; ++i)
      EXPECT_TRUE(all_close(c.select(0, i), naive_mm(a.select(0, i), b.select(0, i)), 1e-12,
                            1e-12));
  }
  set_num_threads(2);
}

TEST(Linalg, MatmulRanks) {
  manual_seed(5);
  Tensor v = randn({4}, DType::f64), w = randn({4}, DType::f64);
  Tensor m = randn({3, 4}, DType::f64), n = randn({4, 2}, DType::f64);
  // 1-D . 1-D -> scalar
  Tensor dot = ops::matmul(v, w);
  EXPECT_EQ(dot.dim(), 0);
  auto vv = v.to_vector<double>(), wv = w.to_vector<double>();
  double expect = 0;
  for (int i = 0; i < 4; ++i) expect += vv[i] * wv[i];
  EXPECT_NEAR(dot.item<double>(), expect, 1e-12);
  // 2-D . 1-D -> [3]; 1-D . 2-D -> [2]
  EXPECT_TRUE(all_close(ops::matmul(m, v), naive_mm(m, v.view({4, 1})).view({3}), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(ops::matmul(v, n), naive_mm(v.view({1, 4}), n).view({2}), 1e-12, 1e-12));
  // [2,3,4] . [4,2] folds the batch into M
  Tensor a3 = randn({2, 3, 4}, DType::f64);
  Tensor c = ops::matmul(a3, n);
  ASSERT_EQ(c.shape(), (Shape{2, 3, 2}));
  EXPECT_TRUE(all_close(c.select(0, 1), naive_mm(a3.select(0, 1), n), 1e-12, 1e-12));
  // broadcast batch: [2,1,3,4] . [5,4,2] -> [2,5,3,2]
  Tensor a4 = randn({2, 1, 3, 4}, DType::f64), b3 = randn({5, 4, 2}, DType::f64);
  Tensor d = ops::matmul(a4, b3);
  ASSERT_EQ(d.shape(), (Shape{2, 5, 3, 2}));
  EXPECT_TRUE(all_close(d.select(0, 1).select(0, 3),
                        naive_mm(a4.select(0, 1).select(0, 0), b3.select(0, 3)), 1e-12, 1e-12));
  // [5,4,2] x 1-D [2] -> [5,4]; 1-D [4] x [5,4,2] -> [5,2]
  EXPECT_EQ(ops::matmul(b3, randn({2}, DType::f64)).shape(), (Shape{5, 4}));
  Tensor e = ops::matmul(v, b3);
  ASSERT_EQ(e.shape(), (Shape{5, 2}));
  EXPECT_TRUE(all_close(e.select(0, 2), naive_mm(v.view({1, 4}), b3.select(0, 2)).view({2}),
                        1e-12, 1e-12));
}

TEST(Linalg, LinearWithAndWithoutBias) {
  manual_seed(6);
  Tensor x = randn({2, 3, 5}, DType::f64), w = randn({4, 5}, DType::f64);
  Tensor b = randn({4}, DType::f64);
  Tensor y = ops::linear(x, w, b);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  Tensor ref = naive_mm(x.reshape({6, 5}), w.t());
  auto rv = ref.to_vector<double>(), bv = b.to_vector<double>();
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) rv[i * 4 + j] += bv[j];
  EXPECT_TRUE(all_close(y, from_vector<double>(rv, {2, 3, 4}), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(ops::linear(x, w, Tensor()), ref.view({2, 3, 4}), 1e-12, 1e-12));
}

TEST(Linalg, ReducedFloatsAccumulateInF32) {
  manual_seed(7);
  for (DType dt : {DType::f16, DType::bf16}) {
    // K = 512 of values ~1: an f16 accumulator would lose whole units.
    Tensor a = rand({8, 512}).to(dt), b = rand({512, 8}).to(dt);
    Tensor c = ops::mm(a, b);
    ASSERT_EQ(c.dtype(), dt);
    // Reference from the same (rounded) inputs in f64, then rounded once.
    Tensor ref = naive_mm(a.to(DType::f64), b.to(DType::f64)).to(dt).to(DType::f64);
    double rtol = dt == DType::f16 ? 2e-3 : 1.6e-2;
    EXPECT_TRUE(all_close(c.to(DType::f64), ref, rtol, 0)) << dtype_name(dt);
    Tensor bias = rand({8}).to(dt);
    Tensor y = ops::linear(a, b.t(), bias);
    EXPECT_EQ(y.dtype(), dt);
  }
}

TEST(Linalg, EmptyDimensions) {
  Tensor c = ops::mm(zeros({3, 0}), zeros({0, 4}));
  EXPECT_TRUE(all_close(c, zeros({3, 4}), 0, 0));
  EXPECT_EQ(ops::mm(zeros({0, 5}), zeros({5, 4})).shape(), (Shape{0, 4}));
  EXPECT_EQ(ops::bmm(zeros({0, 2, 3}), zeros({0, 3, 4})).shape(), (Shape{0, 2, 4}));
}

template <typename E, typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

TEST(Linalg, BadInputsRaiseNamedErrors) {
  expect_error<ValueError>([] { ops::mm(zeros({2, 3}), zeros({4, 5})); },
                           {"mm", "[2, 3]", "[4, 5]"});
  expect_error<ValueError>([] { ops::mm(zeros({2, 3, 1}), zeros({3, 5})); }, {"mm", "2-D"});
  expect_error<TypeError>([] { ops::mm(zeros({2, 3}), zeros({3, 5}, DType::f64)); },
                          {"mm", "f32", "f64"});
  expect_error<TypeError>([] { ops::matmul(zeros({2, 3}, DType::i64), zeros({3, 5}, DType::i64)); },
                          {"matmul", "i64"});
  expect_error<ValueError>([] { ops::bmm(zeros({2, 3, 4}), zeros({3, 4, 5})); },
                           {"bmm", "batch", "[2, 3, 4]"});
  expect_error<ValueError>([] { ops::matmul(zeros({2, 2, 3}), zeros({3, 3, 5})); },
                           {"matmul", "broadcast"});
  expect_error<ValueError>([] { ops::linear(zeros({2, 5}), zeros({4, 6}), Tensor()); },
                           {"linear", "[4, 6]"});
  expect_error<ValueError>([] { ops::linear(zeros({2, 5}), zeros({4, 5}), zeros({3})); },
                           {"linear", "bias", "[3]"});
}

}  // namespace
}  // namespace qk
