// Small models built from qk::nn layers against the same PyTorch models
// (tests/fixtures/gen_nn.py): PyTorch's state dict loads by name, then the
// train-mode output, loss, every parameter gradient, the updated BatchNorm
// buffers and the eval-mode output must match.
#include <gtest/gtest.h>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/nn/nn.h"

namespace {

using namespace qk;
namespace nn = qk::nn;
using qk::test::all_close;
using qk::test::Fixture;

void load_from_fixture(nn::Module& m, const Fixture& fx) {
  nn::NamedTensors sd;
  for (const auto& [k, v] : fx.j.at("tensors").items())
    if (k.rfind("sd.", 0) == 0) sd.insert(k.substr(3), fx.tensor(k));
  m.load_state_dict(sd);  // strict: the names must be PyTorch's
}

void check_model(nn::Module& m, const std::function<Tensor(const Tensor&)>& fwd, const Fixture& fx,
                 const std::function<Tensor(const Tensor&)>& loss_fn, double tol) {
  load_from_fixture(m, fx);
  m.train();
  Tensor x = fx.tensor("x");
  Tensor out = fwd(x);
  ASSERT_TRUE(all_close(out, fx.tensor("out"), tol, tol)) << fx.name << " out";
  Tensor loss = loss_fn(out);
  EXPECT_NEAR(loss.item_double(), fx.tensor("loss").item_double(), tol) << fx.name;
  loss.backward();
  for (const auto& item : m.named_parameters())
    EXPECT_TRUE(all_close(item.value().grad(), fx.tensor("grad." + item.key()), tol, tol))
        << fx.name << " grad of " << item.key();
  for (const auto& item : m.named_buffers())
    EXPECT_TRUE(all_close(item.value().to(DType::f64), fx.tensor("after." + item.key()).to(DType::f64), tol, tol))
        << fx.name << " buffer " << item.key();
  m.eval();
  NoGradGuard ng;
  EXPECT_TRUE(all_close(fwd(x), fx.tensor("out_eval"), tol, tol)) << fx.name << " eval out";
}

TEST(NnParity, ConvBatchNormReluPoolLinear) {
  auto fx = qk::test::load_fixture("nn_cnn.json");
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)), nn::BatchNorm2d(4), nn::ReLU(),
                     nn::MaxPool2d(2), nn::Flatten(), nn::Linear(16, 3));
  net->to(DType::f64);
  Tensor target = fx.tensor("target");
  check_model(*net, [&](const Tensor& x) { return net(x); }, fx,
              [&](const Tensor& out) { return cross_entropy(out, target); }, 1e-9);
}

TEST(NnParity, ConvSiluAvgPoolAdaptivePool) {
  auto fx = qk::test::load_fixture("nn_cnn2.json");
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(2, 3, 3).padding(1).bias(false)), nn::SiLU(),
                     nn::AvgPool2d(2), nn::Conv2d(nn::Conv2dOptions(3, 4, 1)), nn::Tanh(),
                     nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(4, 2));
  net->to(DType::f64);
  Tensor r = fx.tensor("r");
  check_model(*net, [&](const Tensor& x) { return net(x); }, fx,
              [&](const Tensor& out) { return qk::sum(out * r); }, 1e-9);
}

TEST(NnParity, EmbeddingLayerNormGeluMlp) {
  auto fx = qk::test::load_fixture("nn_mlp.json");
  nn::Sequential net(nn::Embedding(nn::EmbeddingOptions(10, 6).padding_idx(0)), nn::LayerNorm(nn::LayerNormOptions({6})),
                     nn::Linear(6, 8), nn::GELU(), nn::Dropout(0.0), nn::Linear(8, 4), nn::Sigmoid());
  net->to(DType::f64);
  Tensor r = fx.tensor("r");
  check_model(*net, [&](const Tensor& x) { return net(x); }, fx,
              [&](const Tensor& out) { return qk::sum(out * r); }, 1e-9);
}

}  // namespace
