// The layers: default initialisation, forward values, options, train/eval
// behaviour (Dropout, BatchNorm) and input checks.
#include <gtest/gtest.h>

#include <cmath>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/nn/nn.h"

namespace {

using namespace qk;
namespace nn = qk::nn;
using qk::test::all_close;

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}

TEST(Linear, DefaultInitIsPyTorchs) {
  nn::Linear fc(400, 30);
  const double bound = 1.0 / std::sqrt(400.0);
  EXPECT_LE(max_abs(fc->weight), bound);
  EXPECT_GT(max_abs(fc->weight), 0.95 * bound);  // fills the range
  EXPECT_LE(max_abs(fc->bias), bound);
  EXPECT_EQ(fc->weight.shape(), (Shape{30, 400}));
  nn::Linear nb(nn::LinearOptions(5, 2).bias(false));
  EXPECT_FALSE(nb->bias.defined());
  EXPECT_EQ(nb->parameters().size(), 1u);
}

TEST(Linear, ForwardIsXWtPlusB) {
  nn::Linear fc(3, 2);
  Tensor w = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector<float>({0.5f, -1}, {2});
  fc->load_state_dict({{"weight", w}, {"bias", b}});
  Tensor x = from_vector<float>({1, 0, -1, 2, 1, 0}, {2, 3});
  EXPECT_TRUE(all_close(fc(x), from_vector<float>({-1.5f, -3, 4.5f, 12}, {2, 2})));
  EXPECT_THROW(fc(zeros({2, 4})), ValueError);
}

TEST(Conv2d, InitOptionsAndShapes) {
  nn::Conv2d conv(nn::Conv2dOptions(4, 8, {3, 5}).stride(2).padding({1, 2}).groups(2));
  EXPECT_EQ(conv->weight.shape(), (Shape{8, 2, 3, 5}));
  const double bound = 1.0 / std::sqrt(2.0 * 3 * 5);
  EXPECT_LE(max_abs(conv->weight), bound);
  EXPECT_LE(max_abs(conv->bias), bound);
  EXPECT_EQ(conv(randn({2, 4, 9, 10})).shape(), (Shape{2, 8, 5, 5}));
  EXPECT_THROW(conv(randn({2, 3, 9, 10})), ValueError);
  EXPECT_THROW(nn::Conv2d(nn::Conv2dOptions(3, 8, 3).groups(2)), ValueError);
}

TEST(Dropout, TrainZeroesAndScalesEvalIsIdentity) {
  nn::Dropout drop(0.25);
  Tensor x = ones({4000});
  auto v = drop(x).to_vector<float>();
  int zeros_n = 0;
  for (float f : v) {
    if (f == 0) ++zeros_n;
    else EXPECT_FLOAT_EQ(f, 1.0f / 0.75f);
  }
  EXPECT_NEAR(zeros_n / 4000.0, 0.25, 0.04);
  drop->eval();
  EXPECT_TRUE(drop(x).is_same(x) || all_close(drop(x), x));
  nn::Dropout all(1.0);
  EXPECT_EQ(max_abs(all(x)), 0.0);
  EXPECT_THROW(nn::Dropout(1.5), ValueError);
}

TEST(BatchNorm2d, TrainUpdatesRunningStatsEvalUsesThem) {
  nn::BatchNorm2d bn(nn::BatchNormOptions(2).momentum(0.5));
  EXPECT_EQ(bn->named_buffers().keys(),
            (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  // Channel 0 holds 1..4, channel 1 holds 10 everywhere.
  Tensor x = from_vector<float>({1, 2, 3, 4, 10, 10, 10, 10}, {1, 2, 2, 2});
  Tensor y = bn(x);
  // Batch stats: mean 2.5, biased var 1.25 -> normalised, mean 0.
  EXPECT_NEAR(qk::mean(y.select(1, 0)).item_double(), 0.0, 1e-6);
  EXPECT_NEAR(y.to_vector<float>()[0], (1 - 2.5) / std::sqrt(1.25 + 1e-5), 1e-5);
  // running = 0.5 * old + 0.5 * batch (unbiased var 5/3).
  EXPECT_TRUE(all_close(bn->running_mean, from_vector<float>({1.25f, 5.0f}, {2})));
  EXPECT_TRUE(all_close(bn->running_var, from_vector<float>({0.5f + 0.5f * 5.0f / 3.0f, 0.5f}, {2})));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
  bn->eval();
  Tensor ye = bn(x);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);  // eval does not count
  double rv0 = 0.5 + 0.5 * 5.0 / 3.0;
  EXPECT_NEAR(ye.to_vector<float>()[0], (1 - 1.25) / std::sqrt(rv0 + 1e-5), 1e-5);
  EXPECT_THROW(bn(zeros({2, 3, 2, 2})), ValueError);
}

TEST(BatchNorm2d, CumulativeAverageWithoutMomentum) {
  nn::BatchNorm2d bn(nn::BatchNormOptions(1).momentum(std::nullopt));
  bn(full({1, 1, 2, 2}, 2.0));
  bn(full({1, 1, 2, 2}, 4.0));
  EXPECT_NEAR(bn->running_mean.item<float>(), 3.0, 1e-6);  // (2 + 4) / 2
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
  nn::BatchNorm2d no_stats(nn::BatchNormOptions(1).track_running_stats(false).affine(false));
  EXPECT_TRUE(no_stats->parameters().empty());
  EXPECT_TRUE(no_stats->buffers().empty());
  no_stats->eval();  // still normalises with batch stats
  EXPECT_NEAR(qk::mean(no_stats(randn({2, 1, 3, 3}))).item_double(), 0.0, 1e-5);
}

TEST(Pooling, ShapesAndValues) {
  Tensor x = arange(0, 16, 1).view({1, 1, 4, 4});
  nn::MaxPool2d mp(2);
  EXPECT_TRUE(all_close(mp(x), from_vector<float>({5, 7, 13, 15}, {1, 1, 2, 2})));
  nn::AvgPool2d ap(nn::AvgPool2dOptions(2));
  EXPECT_TRUE(all_close(ap(x), from_vector<float>({2.5f, 4.5f, 10.5f, 12.5f}, {1, 1, 2, 2})));
  nn::AdaptiveAvgPool2d gap(1);
  EXPECT_TRUE(all_close(gap(x), full({1, 1, 1, 1}, 7.5)));
  nn::MaxPool2d mp3(nn::MaxPool2dOptions(3).stride(1).padding(1));
  EXPECT_EQ(mp3(x).shape(), (Shape{1, 1, 4, 4}));
  EXPECT_THROW(mp(zeros({4, 4})), ValueError);
}

TEST(Embedding, LooksUpRowsAndZeroesPadding) {
  nn::Embedding emb(nn::EmbeddingOptions(6, 3).padding_idx(-1));
  EXPECT_EQ(*emb->options.padding_idx(), 5);
  EXPECT_EQ(max_abs(emb->weight.select(0, 5)), 0.0);
  Tensor idx = from_vector<int64_t>({2, 5, 2}, {3});
  Tensor y = emb(idx);
  EXPECT_EQ(y.shape(), (Shape{3, 3}));
  EXPECT_TRUE(all_close(y.select(0, 0), emb->weight.select(0, 2).detach()));
  EXPECT_THROW(nn::Embedding(nn::EmbeddingOptions(6, 3).padding_idx(6)), IndexError);
}

TEST(Norms, LayerNormAndRMSNorm) {
  nn::LayerNorm ln(nn::LayerNormOptions({4}));
  Tensor x = from_vector<float>({1, 2, 3, 4, -2, 0, 2, 4}, {2, 4});
  Tensor y = ln(x);
  EXPECT_NEAR(qk::mean(y.select(0, 0)).item_double(), 0.0, 1e-6);
  EXPECT_NEAR(y.to_vector<float>()[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-5);
  nn::RMSNorm rms(nn::RMSNormOptions({4}).eps(1e-12));
  Tensor r = rms(x);
  double rms0 = std::sqrt((1 + 4 + 9 + 16) / 4.0);
  EXPECT_NEAR(r.to_vector<float>()[3], 4 / rms0, 1e-5);
  EXPECT_EQ(rms->named_parameters().keys(), std::vector<std::string>{"weight"});
  EXPECT_THROW(ln(zeros({2, 5})), ValueError);
}

TEST(Activations, MatchTheFunctions) {
  Tensor x = from_vector<float>({-2, -0.5f, 0, 0.5f, 2}, {5});
  EXPECT_TRUE(all_close(nn::ReLU()(x), relu(x)));
  EXPECT_TRUE(all_close(nn::GELU()(x), gelu(x)));
  EXPECT_TRUE(all_close(nn::GELU(nn::GELUOptions().approximate("tanh"))(x), gelu(x, "tanh")));
  EXPECT_TRUE(all_close(nn::SiLU()(x), silu(x)));
  EXPECT_TRUE(all_close(nn::Tanh()(x), tanh(x)));
  EXPECT_TRUE(all_close(nn::Sigmoid()(x), sigmoid(x)));
  EXPECT_THROW(nn::GELU(nn::GELUOptions().approximate("fast")), ValueError);
  nn::Flatten f;
  EXPECT_EQ(f(zeros({2, 3, 4})).shape(), (Shape{2, 12}));
}

TEST(Sequential, ChainsAndTrains) {
  manual_seed(3);
  nn::Sequential s(nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 1));
  s->push_back("scale", nn::Functional([](const Tensor& t) { return t * 2.0; }));
  Tensor x = randn({5, 3});
  Tensor want = s->at<nn::LinearImpl>(2).forward(relu(s->at<nn::LinearImpl>(0).forward(x))) * 2.0;
  EXPECT_TRUE(all_close(s(x), want));
  EXPECT_EQ(s->named_children().keys(), (std::vector<std::string>{"0", "1", "2", "scale"}));
  qk::sum(s(x)).backward();
  for (const Tensor& p : s->parameters()) EXPECT_TRUE(p.grad().defined());
  EXPECT_THROW(nn::Sequential()->forward(x), ValueError);
}

TEST(ModuleList, HoldsModulesInOrder) {
  nn::ModuleList blocks(nn::Linear(4, 4), nn::Linear(4, 4));
  blocks->push_back(nn::LayerNorm(nn::LayerNormOptions({4})));
  EXPECT_EQ(blocks->size(), 3u);
  EXPECT_EQ(blocks->named_parameters().keys(),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"}));
  Tensor h = randn({2, 4});
  for (size_t i = 0; i < 2; ++i) h = blocks->ptr<nn::LinearImpl>(i)->forward(h);
  EXPECT_EQ(h.shape(), (Shape{2, 4}));
  EXPECT_THROW(blocks->ptr<nn::LinearImpl>(2), ValueError);
  EXPECT_THROW(blocks->ptr(3), IndexError);
  int n = 0;
  for (const auto& m : *blocks) n += m->is_training();
  EXPECT_EQ(n, 3);
}

}  // namespace
