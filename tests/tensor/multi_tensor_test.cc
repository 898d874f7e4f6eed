// The multi-tensor passes (qk/tensor/ops/optimizer.h) on the CPU: the loss
// scaling pass's sums of squares and inf/NaN count against an element-wise
// reference, in every floating dtype, the same whatever the thread count;
// scale 1 leaves the tensors alone; the clip scale; what is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "qk/base/error.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/optimizer.h"
#include "qk/tensor/ops/view.h"

namespace qk {
namespace {

// Sum of squares of t * scale as stored in t's dtype, and its inf/NaN count.
std::pair<double, double> reference(const Tensor& t, double scale) {
  const std::vector<double> before = ops::cast(t, DType::f64).to_vector<double>();
  const Tensor scaled = ops::cast(ops::binary_scalar(BinaryOp::mul, ops::cast(t, t.dtype() == DType::f64 ? DType::f64
                                                                                                    : DType::f32),
                                                     scale),
                                  t.dtype());
  const std::vector<double> after = ops::cast(scaled, DType::f64).to_vector<double>();
  double sq = 0, bad = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    sq += after[i] * after[i];
    bad += !std::isfinite(before[i]);
  }
  return {sq, bad};
}

std::vector<Tensor> gradients() {
  manual_seed(7);
  std::vector<Tensor> g;
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64})
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3 * 32768 + 5}}) g.push_back(ops::cast(randn({n}), dt));
  g.push_back(empty({0}));
  return g;
}

TEST(MultiTensor, UnscaleNormSumsTheScaledSquaresInEveryDtype) {
  for (double scale : {1.0, 1.0 / 1024, 0.37}) {
    SCOPED_TRACE(scale);
    std::vector<Tensor> g = gradients(), copies;
    double want = 0;
    for (const Tensor& t : g) {
      copies.push_back(ops::contiguous(ops::clone(t)));
      want += reference(t, scale).first;
    }
    const std::vector<double> r = ops::multi_tensor_unscale_norm_(g, scale).to_vector<double>();
    ASSERT_EQ(r.size(), 2u);
    EXPECT_NEAR(r[0], want, 1e-12 * want);
    EXPECT_EQ(r[1], 0.0);
    for (size_t i = 0; i < g.size(); ++i) {
      const Tensor expect = ops::cast(ops::binary_scalar(BinaryOp::mul, ops::cast(copies[i], copies[i].dtype() == DType::f64 ? DType::f64 : DType::f32), scale), g[i].dtype());
      EXPECT_EQ(ops::cast(g[i], DType::f64).to_vector<double>(), ops::cast(expect, DType::f64).to_vector<double>())
          << "tensor " << i;
    }
  }
}

TEST(MultiTensor, UnscaleNormCountsInfAndNanBeforeScaling) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Tensor> g{from_vector<float>({1, inf, 2}, {3}), ops::cast(from_vector<float>({nan, -inf, 3e38f}, {3}),
                                                                        DType::bf16)};
  const std::vector<double> r = ops::multi_tensor_unscale_norm_(g, 0.5).to_vector<double>();
  EXPECT_EQ(r[1], 3.0);  // 3e38 is finite before scaling, whatever bf16 makes of it
  EXPECT_FALSE(std::isfinite(r[0]));
}

TEST(MultiTensor, ResultsDoNotDependOnTheThreadCount) {
  const int threads = num_threads();
  std::vector<double> sums;
  for (int t : {1, 2, 3}) {
    set_num_threads(t);
    sums.push_back(ops::multi_tensor_unscale_norm_(gradients(), 0.25).to_vector<double>()[0]);
  }
  set_num_threads(threads);
  EXPECT_EQ(sums[0], sums[1]);
  EXPECT_EQ(sums[0], sums[2]);
}

TEST(MultiTensor, ScaleOneLeavesTheTensorsAlone) {
  Tensor t = randn({100});
  const uint64_t version = t.impl()->version;
  const std::vector<float> before = t.to_vector<float>();
  ops::multi_tensor_unscale_norm_({t}, 1.0);
  EXPECT_EQ(t.to_vector<float>(), before);
  EXPECT_EQ(t.impl()->version, version);
}

TEST(MultiTensor, ScaleMultipliesThroughF32) {
  Tensor a = from_vector<float>({1, -2, 3}, {3});
  Tensor b = ops::cast(from_vector<float>({1, 3, 5}, {3}), DType::bf16);
  ops::multi_tensor_scale_({a, b}, 0.1);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0.1f, -0.2f, 0.3f}));
  const std::vector<float> want = ops::cast(ops::cast(from_vector<float>({0.1f, 0.3f, 0.5f}, {3}), DType::bf16),
                                            DType::f32).to_vector<float>();
  EXPECT_EQ(ops::cast(b, DType::f32).to_vector<float>(), want);
}

TEST(MultiTensor, RefusesWhatItCannotRun) {
  EXPECT_THROW(ops::multi_tensor_unscale_norm_({}, 1.0), ValueError);
  EXPECT_THROW(ops::multi_tensor_scale_({from_vector<int64_t>({1}, {1})}, 2.0), TypeError);
  EXPECT_THROW(ops::multi_tensor_scale_({randn({4, 4}).t()}, 2.0), ValueError);  // not contiguous
  EXPECT_THROW(ops::multi_tensor_unscale_norm_({randn({2}), Tensor()}, 1.0), ValueError);
}

// The optimizer list steps take one entry per parameter in every list, each
// like its parameter, and say which one is wrong.
TEST(MultiTensor, OptimizerListStepsRefuseMismatchedLists) {
  const Tensor p = randn({3}), q = randn({2});
  ops::SgdStepArgs sgd{0.1, 0.9, 0.0, 0.0, false, true};
  EXPECT_THROW(ops::multi_tensor_sgd_step_({{}, {}, {}}, sgd), ValueError);
  EXPECT_THROW(ops::multi_tensor_sgd_step_({{p, q}, {randn({3})}, {randn({3}), randn({2})}}, sgd), ValueError);
  EXPECT_THROW(ops::multi_tensor_sgd_step_({{p}, {randn({3})}, {}}, sgd), ValueError);  // momentum without buffers
  EXPECT_THROW(ops::multi_tensor_sgd_step_({{p}, {ops::cast(randn({3}), DType::f64)}, {randn({3})}}, sgd),
               TypeError);
  ops::AdamStepArgs adam;
  adam.lr = 0.1, adam.beta1 = 0.9, adam.beta2 = 0.99, adam.amsgrad = true;
  EXPECT_THROW(ops::multi_tensor_adam_step_({{p}, {randn({3})}, {randn({3})}, {randn({3})}, {}}, adam), ValueError);
  try {
    ops::multi_tensor_adam_step_({{p, q}, {randn({3}), randn({2})}, {randn({3}), randn({3})}, {randn({3}), randn({2})},
                                  {randn({3}), randn({2})}},
                                 adam);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("exp_avg tensors 1 has shape [3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::multi_tensor_adam_step_({{ops::cast(p, DType::bf16)}, {randn({3})}, {randn({3})}, {randn({3})},
                                             {randn({3})}},
                                            adam),
               TypeError);
}

// On a device without list kernels (the CPU) each parameter takes the
// one-parameter kernel: the same values as calling it per parameter.
TEST(MultiTensor, OptimizerListStepsEqualOneParameterSteps) {
  std::vector<Tensor> ps = {randn({5}), randn({70000}), randn({1})};
  std::vector<Tensor> gs = {randn({5}), randn({70000}), randn({1})};
  ops::AdamStepArgs a;
  a.lr = 1e-2, a.beta1 = 0.9, a.beta2 = 0.99, a.eps = 1e-8, a.weight_decay = 0.1, a.step = 2, a.decoupled = true;
  ops::AdamStepLists l;
  std::vector<Tensor> one;
  for (size_t i = 0; i < ps.size(); ++i) {
    l.params.push_back(ops::clone(ps[i]));
    l.grads.push_back(gs[i]);
    l.exp_avgs.push_back(zeros_like(ps[i]));
    l.exp_avg_sqs.push_back(zeros_like(ps[i]));
    one.push_back(ops::clone(ps[i]));
  }
  ops::multi_tensor_adam_step_(l, a);
  for (size_t i = 0; i < ps.size(); ++i) {
    ops::adam_step_kernel.get(kCPU)(one[i], gs[i], zeros_like(ps[i]), zeros_like(ps[i]), Tensor(), a);
    EXPECT_EQ(l.params[i].to_vector<float>(), one[i].to_vector<float>()) << i;
    EXPECT_NE(l.params[i].to_vector<float>(), ps[i].to_vector<float>()) << i;
  }
}

}  // namespace
}  // namespace qk
