// softmax/log_softmax, cross_entropy, dropout and embedding raw ops: PyTorch
// parity (tests/fixtures/gen_norm_nn.py) forward and backward in f64 and
// f32, numerical stability, hand-computed values and bad input.
#include "qk/tensor/ops/nn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "common/fixtures.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/view.h"
#include "cpu/softmax.h"

namespace qk {
namespace {

using test::all_close;

struct Tol {
  double rtol, atol;
};
Tol tol_for(DType dt) { return dt == DType::f64 ? Tol{1e-10, 1e-12} : Tol{1e-4, 1e-5}; }
Tensor as(const Tensor& t, DType dt) { return ops::cast(t, dt); }

template <typename E>
void expect_message(const std::function<void()>& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    std::string m = e.what();
    for (const char* p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
  }
}

// ---- softmax ----

TEST(Softmax, MatchesTorchForwardBackward) {
  for (const char* name : {"softmax_last", "softmax_first", "softmax_middle", "softmax_long_row"}) {
    auto fx = test::load_fixture(std::string(name) + ".json");
    const int64_t dim = static_cast<int64_t>(fx.scalar("dim"));
    for (DType dt : {DType::f64, DType::f32}) {
      SCOPED_TRACE(std::string(name) + " " + dtype_name(dt));
      const Tol t = tol_for(dt);
      Tensor x = as(fx.tensor("x"), dt);
      Tensor y = ops::softmax(x, dim), ly = ops::log_softmax(x, dim);
      EXPECT_TRUE(all_close(y, as(fx.tensor("softmax_out"), dt), t.rtol, t.atol));
      EXPECT_TRUE(all_close(ly, as(fx.tensor("log_softmax_out"), dt), t.rtol, t.atol));
      EXPECT_TRUE(all_close(ops::softmax_backward(as(fx.tensor("softmax_dy"), dt), y, dim),
                            as(fx.tensor("softmax_dx"), dt), t.rtol, t.atol));
      EXPECT_TRUE(all_close(ops::log_softmax_backward(as(fx.tensor("log_softmax_dy"), dt), ly, dim),
                            as(fx.tensor("log_softmax_dx"), dt), t.rtol, t.atol));
    }
  }
}

TEST(Softmax, StableForHugeAndInfiniteInputs) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = from_vector<double>({1000, 1001, -inf, 1000}, {1, 4}, DType::f32);
  auto y = ops::softmax(x, 1).to_vector<double>();
  const double e = std::exp(-1.0), s = 2 * e + 1;
  EXPECT_NEAR(y[0], e / s, 1e-6);
  EXPECT_NEAR(y[1], 1 / s, 1e-6);
  EXPECT_EQ(y[2], 0.0);
  auto ly = ops::log_softmax(x, 1).to_vector<double>();
  EXPECT_NEAR(ly[1], -std::log(s), 1e-5);
  EXPECT_TRUE(std::isinf(ly[2]) && ly[2] < 0);
}

TEST(Softmax, RowsSumToOneInReducedFloats) {
  Generator g(1);
  Tensor x = randn({5, 33}, {}, g);
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor y = ops::softmax(ops::cast(x, dt), -1);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(all_close(ops::cast(y, DType::f32), ops::softmax(x, -1), 1e-2, 2e-3));
  }
}

TEST(Softmax, ZeroDimAndEmpty) {
  EXPECT_DOUBLE_EQ(ops::softmax(scalar_tensor(3.0), 0).item<double>(), 1.0);
  EXPECT_DOUBLE_EQ(ops::log_softmax(scalar_tensor(3.0), -1).item<double>(), 0.0);
  EXPECT_EQ(ops::softmax(zeros({0, 4}), 1).shape(), (Shape{0, 4}));
}

TEST(Softmax, VectorExpIsAccurate) {
  // exp_vec against std::exp over the range softmax uses (x - max <= 0) and beyond.
  double worst = 0;
  for (int i = -8800; i <= 8800; ++i) {
    const float x = static_cast<float>(i) / 100.0f;
    const double ref = std::exp(static_cast<double>(x));
    if (ref < 1.2e-38) continue;  // below normal floats
    worst = std::max(worst, std::fabs(exp_vec(x) - ref) / ref);
  }
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(exp_vec(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(exp_vec(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isinf(exp_vec(100.0f)));
}

TEST(Softmax, BadInputRaisesNamedErrors) {
  expect_message<TypeError>(
      [] {
        ops::softmax(zeros({2, 3}, DType::i64), 1);
      },
      {"softmax", "[2, 3]"});
  EXPECT_THROW(ops::softmax(zeros({2, 3}), 2), IndexError);
  expect_message<ValueError>(
      [] {
        ops::softmax_backward(zeros({2, 3}), zeros({3, 2}), 1);
      },
      {"softmax_backward", "[2, 3]", "[3, 2]"});
}

// ---- cross_entropy ----

ops::Reduction reduction_of(double code) {
  return code == 0 ? ops::Reduction::none : code == 1 ? ops::Reduction::mean : ops::Reduction::sum;
}

TEST(CrossEntropy, MatchesTorchForwardBackward) {
  for (const char* name :
       {"cross_entropy_mean", "cross_entropy_ignore", "cross_entropy_smooth", "cross_entropy_sum",
        "cross_entropy_none", "cross_entropy_spatial", "cross_entropy_spatial_none"}) {
    auto fx = test::load_fixture(std::string(name) + ".json");
    const auto ignore = static_cast<int64_t>(fx.scalar("ignore_index"));
    const double ls = fx.scalar("label_smoothing");
    const auto red = reduction_of(fx.scalar("reduction"));
    Tensor target = fx.tensor("target");
    ASSERT_EQ(target.dtype(), DType::i64);
    for (DType dt : {DType::f64, DType::f32}) {
      SCOPED_TRACE(std::string(name) + " " + dtype_name(dt));
      const Tol t = tol_for(dt);
      auto r = ops::cross_entropy(as(fx.tensor("logits"), dt), target, ignore, ls, red);
      EXPECT_TRUE(all_close(r.loss, as(fx.tensor("loss"), dt), t.rtol, t.atol));
      Tensor dx = ops::cross_entropy_backward(as(fx.tensor("dy"), dt), r.log_probs, target, ignore,
                                              ls, red);
      EXPECT_TRUE(all_close(dx, as(fx.tensor("dx"), dt), t.rtol, t.atol));
      // i32 targets give the same result.
      auto r32 = ops::cross_entropy(as(fx.tensor("logits"), dt), ops::cast(target, DType::i32),
                                    ignore, ls, red);
      EXPECT_TRUE(all_close(r32.loss, r.loss, 0, 0));
    }
  }
}

TEST(CrossEntropy, HandComputedUniformLogits) {
  // Uniform logits over C classes: loss = log C whatever the target or smoothing.
  Tensor logits = zeros({3, 4}, DType::f64);
  Tensor target = from_vector<int64_t>({0, 3, 1}, {3});
  auto r = ops::cross_entropy(logits, target, -100, 0.3, ops::Reduction::mean);
  EXPECT_NEAR(r.loss.item<double>(), std::log(4.0), 1e-12);
  // All targets ignored: mean is 0/0 = NaN, as PyTorch.
  auto none =
      ops::cross_entropy(logits, full({3}, -100, DType::i64), -100, 0.0, ops::Reduction::mean);
  EXPECT_TRUE(std::isnan(none.loss.item<double>()));
}

TEST(CrossEntropy, UnbatchedSample) {
  Tensor logits = from_vector<double>({1, 2, 3}, {3}, DType::f64);
  auto r =
      ops::cross_entropy(logits, scalar_tensor(2, DType::i64), -100, 0.0, ops::Reduction::none);
  EXPECT_EQ(r.loss.dim(), 0);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(r.loss.item<double>(), lse - 3, 1e-12);
}

TEST(CrossEntropy, BadInputRaisesNamedErrors) {
  Tensor logits = zeros({4, 5});
  expect_message<IndexError>(
      [&] {
        ops::cross_entropy(logits, from_vector<int64_t>({0, 1, 5, 2}, {4}), -100, 0,
                           ops::Reduction::mean);
      },
      {"cross_entropy", "target 5", "5 classes"});
  expect_message<ValueError>(
      [&] { ops::cross_entropy(logits, zeros({3}, DType::i64), -100, 0, ops::Reduction::mean); },
      {"cross_entropy", "[4, 5]", "[4]", "[3]"});
  EXPECT_THROW(ops::cross_entropy(logits, zeros({4}), -100, 0, ops::Reduction::mean), TypeError);
  EXPECT_THROW(ops::cross_entropy(logits, zeros({4}, DType::i64), -100, 1.5, ops::Reduction::mean),
               ValueError);
  EXPECT_THROW(ops::cross_entropy(zeros({4, 5}, DType::i64), zeros({4}, DType::i64), -100, 0,
                                  ops::Reduction::mean),
               TypeError);
}

// ---- dropout ----

TEST(Dropout, KeepsAboutOneMinusPAndScales) {
  Generator g(11);
  Tensor x = full({100000}, 2.0);
  auto [out, mask] = ops::dropout(x, 0.3, g);
  auto o = out.to_vector<double>(), m = mask.to_vector<double>();
  int64_t kept = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    const bool k = m[i] != 0;
    kept += k;
    ASSERT_NEAR(m[i], k ? 1 / 0.7 : 0.0, 1e-6);
    ASSERT_NEAR(o[i], 2.0 * m[i], 1e-5);
  }
  // 100000 Bernoulli(0.7): sd ~ 145; 6 sd bounds.
  EXPECT_NEAR(static_cast<double>(kept), 70000.0, 900.0);
}

TEST(Dropout, SameSeedSameMaskAcrossThreadCounts) {
  Tensor x = ones({5001});
  const int saved = num_threads();
  set_num_threads(1);
  Generator g1(5);
  auto a = ops::dropout(x, 0.5, g1).second;
  set_num_threads(2);
  Generator g2(5);
  auto b = ops::dropout(x, 0.5, g2).second;
  auto c = ops::dropout(x, 0.5, g2).second;  // the generator advanced: a new mask
  set_num_threads(saved);
  EXPECT_TRUE(all_close(a, b, 0, 0));
  EXPECT_FALSE(all_close(a, c, 0, 0));
  EXPECT_EQ(g2.offset(), 2 * ((5001 + 3) / 4));
}

TEST(Dropout, MaskFollowsPhiloxCounters) {
  // Element i keeps iff word i % 4 of philox4x32(seed, offset + i / 4), top
  // 24 bits, is below (1 - p) 2^24: the documented contract, which the
  // kernel's batched (16 counters at a time) Philox must reproduce exactly.
  Generator g(77);
  g.advance(5);                // a non-zero starting offset
  const int64_t n = 1000 + 3;  // a partial last batch and a partial last group
  const double p = 0.3;
  auto [out, mask] = ops::dropout(ones({n}), p, g);
  auto m = mask.to_vector<double>();
  const auto keep_below = static_cast<uint32_t>((1.0 - p) * 16777216.0);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t w[4];
    philox4x32(77, 5 + static_cast<uint64_t>(i / 4), w);
    const bool keep = (w[i % 4] >> 8) < keep_below;
    ASSERT_EQ(m[i] != 0, keep) << "element " << i;
  }
}

TEST(Dropout, EdgeProbabilities) {
  Generator g(1);
  Tensor x = ones({64});
  EXPECT_TRUE(all_close(ops::dropout(x, 0.0, g).first, x, 0, 0));
  EXPECT_TRUE(all_close(ops::dropout(x, 1.0, g).first, zeros({64}), 0, 0));
  EXPECT_THROW(ops::dropout(x, 1.5, g), ValueError);
  EXPECT_THROW(ops::dropout(ones({4}, DType::i64), 0.5, g), TypeError);
}

// ---- embedding ----

TEST(Embedding, LooksUpRows) {
  Tensor w = from_vector<double>({0, 1, 10, 11, 20, 21}, {3, 2}, DType::f32);
  Tensor idx = from_vector<int64_t>({2, 0, 2, 1}, {2, 2});
  Tensor out = ops::embedding(w, idx);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 2}));
  EXPECT_TRUE(
      all_close(out, from_vector<double>({20, 21, 0, 1, 20, 21, 10, 11}, {2, 2, 2}, DType::f32)));
  EXPECT_TRUE(all_close(ops::embedding(w, ops::cast(idx, DType::i32)), out, 0, 0));
}

TEST(Embedding, BackwardSumsDuplicatesAndSkipsPadding) {
  Tensor idx = from_vector<int64_t>({2, 0, 2, 1}, {4});
  Tensor g = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, DType::f64);
  Tensor dw = ops::embedding_backward(g, idx, 4, /*padding_idx=*/-1);
  EXPECT_TRUE(all_close(dw, from_vector<double>({3, 4, 7, 8, 6, 8, 0, 0}, {4, 2}, DType::f64)));
  Tensor dwp = ops::embedding_backward(g, idx, 4, /*padding_idx=*/2);
  EXPECT_TRUE(all_close(dwp, from_vector<double>({3, 4, 7, 8, 0, 0, 0, 0}, {4, 2}, DType::f64)));
}

// Reduced floats sum a row's gradients in f32 and round once: summed in
// bf16, 1000 ones stall at 256 (256 + 1 rounds back to 256); in f16 at 2048.
TEST(Embedding, BackwardOfReducedFloatsAccumulatesInF32) {
  Tensor idx = ops::cast(from_vector<int64_t>(std::vector<int64_t>(1000, 1), {1000}), DType::i64);
  for (DType t : {DType::bf16, DType::f16}) {
    Tensor g = ones({1000, 3}, t);
    Tensor dw = ops::embedding_backward(g, idx, 3, /*padding_idx=*/-1);
    EXPECT_EQ(dw.dtype(), t);
    EXPECT_EQ(ops::cast(dw, DType::f64).to_vector<double>(),
              (std::vector<double>{0, 0, 0, 1000, 1000, 1000, 0, 0, 0}))
        << dtype_name(t);
  }
}

TEST(Embedding, BadInputRaisesNamedErrors) {
  Tensor w = zeros({3, 2});
  expect_message<IndexError>(
      [&] {
        ops::embedding(w, from_vector<int64_t>({0, 3}, {2}));
      },
      {"embedding", "index 3", "3 embeddings"});
  EXPECT_THROW(ops::embedding(w, from_vector<int64_t>({-1}, {1})), IndexError);
  EXPECT_THROW(ops::embedding(w, zeros({2})), TypeError);
  EXPECT_THROW(ops::embedding(zeros({3}), zeros({2}, DType::i64)), ValueError);
  EXPECT_THROW(ops::embedding_backward(zeros({2, 3}), zeros({2}, DType::i64), 3, 3), ValueError);
  EXPECT_THROW(ops::embedding_backward(zeros({2, 3}), zeros({3}, DType::i64), 3, -1), ValueError);
}

}  // namespace
}  // namespace qk
