// SimpleResNet: inference (eval mode, no autograd: the fused conv + batch
// norm path of nn::conv_bn) gives what the module-by-module path gives, and
// training still produces gradients for every parameter.
#include <gtest/gtest.h>

#include <string>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/models/resnet.h"
#include "qk/nn/fused.h"
#include "qk/tensor/ops/memory_format.h"
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

// Channels last (PyTorch's model(x.to(memory_format=torch.channels_last))):
// the input's format carries through every convolution, batch norm, ReLU,
// residual sum and pooling; loss and gradients are the contiguous run's.
TEST(SimpleResNet, ChannelsLastTrainsAsTheContiguousLayout) {
  manual_seed(43);
  models::SimpleResNet net(10);
  net->train();
  const Tensor x = randn({2, 3, 16, 16});
  const Tensor labels = from_vector<int64_t>({3, 7}, {2});
  auto loss_and_grads = [&](const Tensor& input) {
    net->zero_grad();
    Tensor loss = cross_entropy(net->forward(input), labels);
    loss.backward();
    std::vector<Tensor> grads;
    for (auto& p : net->parameters()) grads.push_back(p.grad().detach().contiguous());
    return std::make_pair(loss.detach(), grads);
  };
  // Running statistics are updated by both passes alike; compare one pass each from the same start.
  std::vector<Tensor> buffers;
  for (auto& b : net->buffers()) buffers.push_back(b.detach().clone());
  auto [loss, grads] = loss_and_grads(x);
  {
    NoGradGuard ng;
    size_t i = 0;
    for (auto& b : net->buffers()) b.copy_(buffers[i++]);
  }
  const Tensor xc = ops::contiguous(x, ops::MemoryFormat::channels_last);
  auto [loss_cl, grads_cl] = loss_and_grads(xc);
  EXPECT_TRUE(all_close(loss_cl, loss, 1e-5, 1e-5));
  ASSERT_EQ(grads_cl.size(), grads.size());
  for (size_t i = 0; i < grads.size(); ++i) EXPECT_TRUE(all_close(grads_cl[i], grads[i], 1e-3, 1e-4)) << i;
  // The activations are channels last: the stem's output is.
  Tensor h;
  {
    NoGradGuard ng;
    net->eval();
    h = nn::conv_bn(*net->conv1, *net->bn1, xc, true);
  }
  EXPECT_TRUE(ops::is_channels_last(h));
}
