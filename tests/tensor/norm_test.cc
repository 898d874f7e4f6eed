// batch_norm, layer_norm, rms_norm raw ops: PyTorch parity (fixtures from
// tests/fixtures/gen_norm_nn.py) forward and backward in f64 and f32,
// running-stat updates, hand-computed values, reduced floats and bad input.
#include "qk/tensor/ops/norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/fixtures.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

using test::all_close;

// Tolerances: f64 checks the formulas, f32 the float kernels.
struct Tol {
  double rtol, atol;
};
Tol tol_for(DType dt) { return dt == DType::f64 ? Tol{1e-10, 1e-11} : Tol{2e-4, 2e-5}; }

Tensor as(const Tensor& t, DType dt) { return ops::cast(t, dt); }

void check_batch_norm_fixture(const std::string& name, DType dt) {
  SCOPED_TRACE(name + " " + dtype_name(dt));
  auto fx = test::load_fixture(name + ".json");
  const bool training = fx.scalar("training") != 0;
  Tensor x = as(fx.tensor("x"), dt), w = as(fx.tensor("weight"), dt), b = as(fx.tensor("bias"), dt);
  Tensor rm = as(fx.tensor("running_mean"), dt), rv = as(fx.tensor("running_var"), dt);
  auto r = ops::batch_norm(x, w, b, rm, rv, training, fx.scalar("momentum"), fx.scalar("eps"));
  const Tol t = tol_for(dt);
  EXPECT_TRUE(all_close(r.out, as(fx.tensor("out"), dt), t.rtol, t.atol));
  EXPECT_TRUE(all_close(rm, as(fx.tensor("running_mean_after"), dt), t.rtol, t.atol));
  EXPECT_TRUE(all_close(rv, as(fx.tensor("running_var_after"), dt), t.rtol, t.atol));
  auto [dx, dw, db] =
      ops::batch_norm_backward(as(fx.tensor("dy"), dt), x, w, r.save_mean, r.save_invstd, training);
  EXPECT_TRUE(all_close(dx, as(fx.tensor("dx"), dt), t.rtol, t.atol));
  EXPECT_TRUE(all_close(dw, as(fx.tensor("dweight"), dt), t.rtol, t.atol));
  EXPECT_TRUE(all_close(db, as(fx.tensor("dbias"), dt), t.rtol, t.atol));
}

TEST(BatchNorm, MatchesTorchTrainingForwardBackwardAndRunningStats) {
  for (DType dt : {DType::f64, DType::f32}) {
    check_batch_norm_fixture("batch_norm_train", dt);
    check_batch_norm_fixture("batch_norm_train_2d", dt);
  }
}

TEST(BatchNorm, MatchesTorchEval) {
  for (DType dt : {DType::f64, DType::f32}) check_batch_norm_fixture("batch_norm_eval", dt);
}

TEST(BatchNorm, HandComputedTrainingValues) {
  // One channel holding {1, 2, 3, 4}: mean 2.5, biased var 1.25, unbiased 5/3.
  Tensor x = from_vector<double>({1, 2, 3, 4}, {4, 1}, DType::f64);
  Tensor rm = zeros({1}, DType::f64), rv = ones({1}, DType::f64);
  auto r = ops::batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.5, 1e-5);
  const double inv = 1 / std::sqrt(1.25 + 1e-5);
  EXPECT_TRUE(all_close(
      r.out,
      from_vector<double>({-1.5 * inv, -0.5 * inv, 0.5 * inv, 1.5 * inv}, {4, 1}, DType::f64),
      1e-12, 1e-12));
  EXPECT_NEAR(rm.item<double>(), 0.5 * 2.5, 1e-12);
  EXPECT_NEAR(rv.item<double>(), 0.5 * 1 + 0.5 * 5.0 / 3.0, 1e-12);
  EXPECT_NEAR(r.save_invstd.item<double>(), inv, 1e-12);
}

TEST(BatchNorm, LargeMeanKeepsVarianceInF32) {
  // Mean 1e3, unit variance: E[x^2] - E[x]^2 in plain f32 would lose it;
  // the shifted sums must agree with the f64 result.
  Generator g(3);
  Tensor x64 = ops::binary_scalar(BinaryOp::add, randn({16, 2, 8, 8}, DType::f64, g), 1e3);
  Tensor x32 = ops::cast(x64, DType::f32);
  auto r64 = ops::batch_norm(x64, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  auto r32 = ops::batch_norm(x32, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  EXPECT_TRUE(all_close(r32.save_invstd, ops::cast(r64.save_invstd, DType::f32), 1e-4, 0));
  EXPECT_TRUE(all_close(ops::cast(r32.out, DType::f64), r64.out, 0, 2e-3));
}

TEST(BatchNorm, ReducedFloatsFollowF32) {
  Generator g(5);
  Tensor x = randn({4, 3, 5, 5}, {}, g), w = randn({3}, {}, g), b = randn({3}, {}, g);
  auto ref = ops::batch_norm(x, w, b, Tensor(), Tensor(), true, 0.1, 1e-5);
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    // f32 weights with reduced-precision activations (autocast's layout).
    auto r = ops::batch_norm(ops::cast(x, dt), w, b, Tensor(), Tensor(), true, 0.1, 1e-5);
    EXPECT_EQ(r.out.dtype(), dt);
    EXPECT_TRUE(all_close(ops::cast(r.out, DType::f32), ref.out, 2e-2, 3e-2));
    auto dy = randn(x.shape(), {}, g);
    auto [dx, dw, db] = ops::batch_norm_backward(ops::cast(dy, dt), ops::cast(x, dt), w,
                                                 r.save_mean, r.save_invstd, true);
    auto [rdx, rdw, rdb] = ops::batch_norm_backward(dy, x, w, ref.save_mean, ref.save_invstd, true);
    EXPECT_EQ(dw.dtype(), DType::f32);
    EXPECT_TRUE(all_close(ops::cast(dx, DType::f32), rdx, 3e-2, 5e-2));
    EXPECT_TRUE(all_close(db, rdb, 3e-2, 5e-2));
  }
}

TEST(BatchNorm, ResultDoesNotDependOnThreadCount) {
  Generator g(9);
  Tensor x = randn({8, 5, 6, 6}, {}, g), dy = randn({8, 5, 6, 6}, {}, g);
  const int saved = num_threads();
  set_num_threads(1);
  auto a = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  auto da = ops::batch_norm_backward(dy, x, Tensor(), a.save_mean, a.save_invstd, true);
  set_num_threads(2);
  auto b = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  auto dbk = ops::batch_norm_backward(dy, x, Tensor(), b.save_mean, b.save_invstd, true);
  set_num_threads(saved);
  EXPECT_TRUE(all_close(a.out, b.out, 0, 0));
  EXPECT_TRUE(all_close(std::get<0>(da), std::get<0>(dbk), 0, 0));
}

TEST(BatchNorm, NonContiguousInput) {
  Generator g(2);
  Tensor base = randn({3, 4, 5, 2}, DType::f64, g);
  Tensor x = ops::permute(base, {0, 3, 1, 2});  // [3, 2, 4, 5], strided
  auto r = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  auto ref =
      ops::batch_norm(ops::contiguous(x), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  EXPECT_TRUE(all_close(r.out, ref.out, 1e-12, 1e-12));
}

TEST(BatchNorm, BadInputRaisesNamedErrors) {
  Tensor x = zeros({4, 3, 2, 2});
  EXPECT_THROW(ops::batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5),
               ValueError);
  try {
    ops::batch_norm(x, zeros({4}), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("batch_norm"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 3, 2, 2]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3]"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::batch_norm(zeros({4, 3}, DType::i64), Tensor(), Tensor(), Tensor(), Tensor(),
                               true, 0.1, 1e-5),
               TypeError);
  EXPECT_THROW(
      ops::batch_norm(x, zeros({3}, DType::i32), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5),
      TypeError);
  // Eval without running stats; one value per channel in training.
  EXPECT_THROW(ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false, 0.1, 1e-5),
               ValueError);
  EXPECT_THROW(
      ops::batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5),
      ValueError);
  auto r = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  EXPECT_THROW(
      ops::batch_norm_backward(zeros({4, 3, 2}), x, Tensor(), r.save_mean, r.save_invstd, true),
      ValueError);
}

// ---- layer_norm ----

void check_layer_norm_fixture(const std::string& name, DType dt) {
  SCOPED_TRACE(name + " " + dtype_name(dt));
  auto fx = test::load_fixture(name + ".json");
  Tensor x = as(fx.tensor("x"), dt), w = as(fx.tensor("weight"), dt), b = as(fx.tensor("bias"), dt);
  const Shape ns = w.shape();
  auto [out, mean, rstd] = ops::layer_norm(x, ns, w, b, fx.scalar("eps"));
  const Tol t = tol_for(dt);
  EXPECT_TRUE(all_close(out, as(fx.tensor("out"), dt), t.rtol, t.atol));
  Shape stat = x.shape();
  for (size_t i = stat.size() - ns.size(); i < stat.size(); ++i) stat[i] = 1;
  EXPECT_EQ(mean.shape(), stat);
  auto [dx, dw, db] = ops::layer_norm_backward(as(fx.tensor("dy"), dt), x, ns, mean, rstd, w);
  EXPECT_TRUE(all_close(dx, as(fx.tensor("dx"), dt), t.rtol, t.atol));
  EXPECT_TRUE(all_close(dw, as(fx.tensor("dweight"), dt), t.rtol, t.atol));
  EXPECT_TRUE(all_close(db, as(fx.tensor("dbias"), dt), t.rtol, t.atol));
}

TEST(LayerNorm, MatchesTorchForwardBackward) {
  for (DType dt : {DType::f64, DType::f32}) {
    check_layer_norm_fixture("layer_norm_last", dt);
    check_layer_norm_fixture("layer_norm_two_dims", dt);
  }
}

TEST(LayerNorm, HandComputedRowWithoutAffine) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 10, 10, 10, 10}, {2, 4}, DType::f64);
  auto [out, mean, rstd] = ops::layer_norm(x, {4}, Tensor(), Tensor(), 1e-5);
  const double inv = 1 / std::sqrt(1.25 + 1e-5);
  EXPECT_TRUE(
      all_close(out,
                from_vector<double>({-1.5 * inv, -0.5 * inv, 0.5 * inv, 1.5 * inv, 0, 0, 0, 0},
                                    {2, 4}, DType::f64),
                1e-12, 1e-12));
  EXPECT_TRUE(all_close(mean, from_vector<double>({2.5, 10}, {2, 1}, DType::f64), 0, 1e-12));
  EXPECT_NEAR(rstd.to_vector<double>()[1], 1 / std::sqrt(1e-5), 1e-6);
}

TEST(LayerNorm, LongRowsUseAllLanes) {
  // D = 1000 is not a multiple of the lane count: the tail path must agree.
  Generator g(4);
  Tensor x = randn({3, 1000}, DType::f64, g), w = randn({1000}, DType::f64, g);
  auto [o64, m64, r64] = ops::layer_norm(x, {1000}, w, Tensor(), 1e-5);
  auto [o32, m32, r32] =
      ops::layer_norm(ops::cast(x, DType::f32), {1000}, ops::cast(w, DType::f32), Tensor(), 1e-5);
  EXPECT_TRUE(all_close(ops::cast(o32, DType::f64), o64, 1e-4, 1e-4));
}

TEST(LayerNorm, BadInputRaisesNamedErrors) {
  Tensor x = zeros({2, 3, 4});
  try {
    ops::layer_norm(x, {3}, Tensor(), Tensor(), 1e-5);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("layer_norm"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3, 4]"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::layer_norm(x, {4}, zeros({3}), Tensor(), 1e-5), ValueError);
  EXPECT_THROW(ops::layer_norm(x, {}, Tensor(), Tensor(), 1e-5), ValueError);
  EXPECT_THROW(ops::layer_norm(zeros({2, 4}, DType::i32), {4}, Tensor(), Tensor(), 1e-5),
               TypeError);
  auto [o, m, r] = ops::layer_norm(x, {4}, Tensor(), Tensor(), 1e-5);
  EXPECT_THROW(ops::layer_norm_backward(zeros({2, 3, 4}, DType::f64), x, {4}, m, r, Tensor()),
               TypeError);
}

// ---- rms_norm ----

TEST(RmsNorm, HandComputedValues) {
  // Row {3, 4}: mean square 12.5.
  Tensor x = from_vector<double>({3, 4}, {1, 2}, DType::f64);
  Tensor w = from_vector<double>({2, 0.5}, {2}, DType::f64);
  auto [out, rstd] = ops::rms_norm(x, {2}, w, 0.0 + 1e-12);
  const double rs = 1 / std::sqrt(12.5 + 1e-12);
  EXPECT_TRUE(all_close(out, from_vector<double>({3 * rs * 2, 4 * rs * 0.5}, {1, 2}, DType::f64),
                        1e-12, 1e-12));
  EXPECT_NEAR(rstd.item<double>(), rs, 1e-12);
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  // d/dx of sum(rms_norm(x) * dy), central differences in f64.
  Generator g(6);
  Tensor x = randn({3, 5}, DType::f64, g), w = randn({5}, DType::f64, g);
  Tensor dy = randn({3, 5}, DType::f64, g);
  auto [out, rstd] = ops::rms_norm(x, {5}, w, 1e-6);
  auto [dx, dw] = ops::rms_norm_backward(dy, x, {5}, rstd, w);
  auto loss = [&](const Tensor& xx, const Tensor& ww) {
    auto o = ops::rms_norm(xx, {5}, ww, 1e-6).first;
    auto a = o.to_vector<double>(), d = dy.to_vector<double>();
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * d[i];
    return s;
  };
  auto numeric = [&](Tensor t, size_t i, bool is_w) {
    auto v = t.to_vector<double>();
    const double h = 1e-6;
    v[i] += h;
    Tensor p = from_vector<double>(v, t.shape(), DType::f64);
    v[i] -= 2 * h;
    Tensor m = from_vector<double>(v, t.shape(), DType::f64);
    return is_w ? (loss(x, p) - loss(x, m)) / (2 * h) : (loss(p, w) - loss(m, w)) / (2 * h);
  };
  auto dxv = dx.to_vector<double>(), dwv = dw.to_vector<double>();
  for (size_t i = 0; i < dxv.size(); ++i) EXPECT_NEAR(dxv[i], numeric(x, i, false), 1e-7) << i;
  for (size_t i = 0; i < dwv.size(); ++i) EXPECT_NEAR(dwv[i], numeric(w, i, true), 1e-7) << i;
}

TEST(RmsNorm, BadInputRaisesNamedErrors) {
  EXPECT_THROW(ops::rms_norm(zeros({2, 4}), {5}, Tensor(), 1e-6), ValueError);
  EXPECT_THROW(ops::rms_norm(zeros({2, 4}), {4}, zeros({4}, DType::i64), 1e-6), TypeError);
  EXPECT_THROW(ops::rms_norm(zeros({2, 4}), {4}, Tensor(), 0.0), ValueError);
}

}  // namespace
}  // namespace qk
