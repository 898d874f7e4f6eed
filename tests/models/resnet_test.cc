// SimpleResNet: inference (eval mode, no autograd: the fused conv + batch
// norm path of nn::conv_bn) gives what the module-by-module path gives, and
// training still produces gradients for every parameter.
#include <gtest/gtest.h>

#include <string>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/models/resnet.h"
#include "qk/tensor/generator.h"

using namespace qk;
using qk::test::all_close;

namespace {

// Non-trivial running statistics and affine parameters in every batch norm,
// as after training, so that the folded scale and shift are not 1 and 0.
void randomise_batch_norms(nn::Module& m) {
  NoGradGuard ng;
  for (auto& item : m.named_buffers()) {
    const std::string& name = item.key();
    Tensor t = item.value();
    if (name.find("running_mean") != std::string::npos) t.copy_(randn(t.shape()) * 0.1);
    if (name.find("running_var") != std::string::npos) t.copy_(rand(t.shape()) + 0.5);
  }
  for (auto& item : m.named_parameters()) {
    const std::string& name = item.key();
    Tensor t = item.value();
    if (name.find("bn") != std::string::npos || name.find("shortcut.1") != std::string::npos)
      t.copy_(randn(t.shape()) * 0.2 + (name.find("weight") != std::string::npos ? 1.0 : 0.0));
  }
}

}  // namespace

TEST(SimpleResNet, FusedInferenceMatchesModulePath) {
  manual_seed(41);
  models::SimpleResNet net(10);
  randomise_batch_norms(*net);
  net->eval();
  Tensor x = randn({2, 3, 32, 32});
  Tensor fused;
  {
    NoGradGuard ng;
    fused = net->forward(x);
  }
  // Grad mode on and parameters requiring grad: conv_bn takes the modules'
  // own path (conv, batch norm, add, relu as separate ops).
  Tensor reference = net->forward(x).detach();
  ASSERT_EQ(fused.shape(), (Shape{2, 10}));
  EXPECT_TRUE(all_close(fused, reference, 1e-4, 1e-4));
}

TEST(SimpleResNet, TrainingGivesEveryParameterAGradient) {
  manual_seed(42);
  models::SimpleResNet net(10);
  net->train();
  Tensor x = randn({2, 3, 32, 32});
  Tensor loss = qk::pow(net->forward(x), 2.0).mean();
  loss.backward();
  for (auto& item : net->named_parameters()) {
    SCOPED_TRACE(item.key());
    Tensor g = item.value().grad();
    ASSERT_TRUE(g.defined());
    EXPECT_GT(qk::abs(g).sum().item<double>(), 0.0);
  }
}
