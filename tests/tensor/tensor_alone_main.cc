// A program that links qianka::tensor and nothing above it (see
// tests/tensor/CMakeLists.txt): the library links alone, Tensor's
// differentiable methods are the plain ops, and grad() and backward() say
// which library is missing instead of losing gradients quietly.
#include <gtest/gtest.h>

#include <string>

#include "qk/tensor/autograd_hooks.h"
#include "qk/tensor/tensor.h"

namespace {

using qk::Tensor;

std::string error_of(void (*call)()) {
  try {
    call();
  } catch (const qk::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TensorAlone, HasNoAutogradHooks) { EXPECT_EQ(qk::detail::autograd_hooks(), nullptr); }

TEST(TensorAlone, DifferentiableMethodsAreThePlainOps) {
  Tensor x = qk::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(x.t().contiguous().to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(x.view({3, 2}).select(0, 2).to_vector<float>(), (std::vector<float>{5, 6}));
  EXPECT_EQ(x.reshape({6}).slice(0, 1, 6, 2).to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(x.unsqueeze(0).shape(), (qk::Shape{1, 2, 3}));
  EXPECT_EQ(x.narrow(1, 1, 2).clone().to_vector<float>(), (std::vector<float>{2, 3, 5, 6}));
  EXPECT_EQ(x.sum().item<float>(), 21.0f);
  EXPECT_EQ(x.mean({1}).to_vector<float>(), (std::vector<float>{2, 5}));
  EXPECT_EQ(x.to(qk::DType::f64).dtype(), qk::DType::f64);
  EXPECT_EQ(x.permute({1, 0}).expand({2, 3, 2}).sum({0}).to_vector<float>(),
            (std::vector<float>{2, 8, 4, 10, 6, 12}));
}

TEST(TensorAlone, NoTensorHasAutogradState) {
  Tensor x = qk::ones({2});
  EXPECT_FALSE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(x.grad_fn(), nullptr);
  EXPECT_TRUE(x.detach().is_same(x) == false && x.detach().storage() == x.storage());
}

TEST(TensorAlone, GradAndBackwardSayToLinkAutograd) {
  for (auto call : {+[] { (void)qk::ones({2}).grad(); }, +[] { qk::ones({1}).sum().backward(); }}) {
    std::string msg = error_of(call);
    EXPECT_NE(msg.find("link qianka::autograd"), std::string::npos) << msg;
  }
}

}  // namespace
