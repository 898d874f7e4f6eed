// batch_norm, layer_norm and rms_norm through autograd: finite-difference
// checks in f64 and f32 (each loss weights the output by a fixed random
// probe, since sum(normalised x) has a zero gradient), and module-style use
// (running stats updated in place, .grad filled).
#include <gtest/gtest.h>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/tensor/generator.h"

namespace qk {
namespace {

using autograd::gradcheck;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// gradcheck of sum(f(inputs) * probe) over inputs of `shapes` in `dt`.
void check(const std::vector<Shape>& shapes, const Fn& f, DType dt, uint64_t seed = 5) {
  Generator g(seed);
  std::vector<Tensor> in;
  for (const auto& s : shapes) in.push_back(randn(s, TensorOptions(dt), g).requires_grad_());
  Tensor probe;
  {
    NoGradGuard ng;
    probe = randn(f(in).shape(), TensorOptions(dt), g);
  }
  auto loss = [&](const std::vector<Tensor>& v) { return sum(mul(f(v), probe)); };
  const double eps = dt == DType::f64 ? 1e-6 : 1e-2;
  const double tol = dt == DType::f64 ? 1e-7 : 3e-2;
  auto r = gradcheck(loss, in, eps, tol, tol);
  EXPECT_TRUE(r.ok) << dtype_name(dt) << ": " << r.message;
}

class NormGrad : public ::testing::TestWithParam<DType> {};

TEST_P(NormGrad, BatchNormTraining) {
  check(
      {{3, 2, 2, 3}, {2}, {2}},
      [](const std::vector<Tensor>& v) {
        return batch_norm(v[0], v[1], v[2], Tensor(), Tensor(), true);
      },
      GetParam());
}

TEST_P(NormGrad, BatchNormTraining2dNoAffine) {
  check(
      {{5, 3}},
      [](const std::vector<Tensor>& v) {
        return batch_norm(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true);
      },
      GetParam());
}

TEST_P(NormGrad, BatchNormEval) {
  const DType dt = GetParam();
  Tensor rm = from_vector<double>({0.5, -1}, {2}, dt), rv = from_vector<double>({2, 0.25}, {2}, dt);
  check(
      {{3, 2, 2}, {2}, {2}},
      [&](const std::vector<Tensor>& v) { return batch_norm(v[0], v[1], v[2], rm, rv, false); },
      dt);
}

TEST_P(NormGrad, LayerNorm) {
  check(
      {{2, 3, 4}, {3, 4}, {3, 4}},
      [](const std::vector<Tensor>& v) {
        return layer_norm(v[0], {3, 4}, v[1], v[2]);
      },
      GetParam());
  check(
      {{4, 5}}, [](const std::vector<Tensor>& v) { return layer_norm(v[0], {5}); }, GetParam());
}

TEST_P(NormGrad, RmsNorm) {
  check(
      {{3, 6}, {6}}, [](const std::vector<Tensor>& v) { return rms_norm(v[0], {6}, v[1]); },
      GetParam());
  check(
      {{2, 2, 3}}, [](const std::vector<Tensor>& v) { return rms_norm(v[0], {3}); }, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NormGrad, ::testing::Values(DType::f64, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(BatchNormAutograd, MatchesTorchThroughBackward) {
  // The fixture's loss is sum(out * dy): run it through backward().
  auto fx = test::load_fixture("batch_norm_train.json");
  Tensor x = fx.tensor("x").to(DType::f64).requires_grad_();
  Tensor w = fx.tensor("weight").to(DType::f64).requires_grad_();
  Tensor b = fx.tensor("bias").to(DType::f64).requires_grad_();
  Tensor rm = fx.tensor("running_mean").to(DType::f64),
         rv = fx.tensor("running_var").to(DType::f64);
  Tensor out = batch_norm(x, w, b, rm, rv, true, fx.scalar("momentum"), fx.scalar("eps"));
  sum(mul(out, fx.tensor("dy").to(DType::f64))).backward();
  EXPECT_TRUE(test::all_close(x.grad(), fx.tensor("dx").to(DType::f64), 1e-10, 1e-11));
  EXPECT_TRUE(test::all_close(w.grad(), fx.tensor("dweight").to(DType::f64), 1e-10, 1e-11));
  EXPECT_TRUE(test::all_close(b.grad(), fx.tensor("dbias").to(DType::f64), 1e-10, 1e-11));
  EXPECT_TRUE(test::all_close(rm, fx.tensor("running_mean_after").to(DType::f64), 1e-12, 1e-12));
  EXPECT_TRUE(test::all_close(rv, fx.tensor("running_var_after").to(DType::f64), 1e-12, 1e-12));
  EXPECT_FALSE(rm.requires_grad());
}

TEST(LayerNormAutograd, NoGradRecordsNothing) {
  Tensor x = randn({2, 4}).requires_grad_();
  NoGradGuard ng;
  Tensor y = layer_norm(x, {4});
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

}  // namespace
}  // namespace qk
