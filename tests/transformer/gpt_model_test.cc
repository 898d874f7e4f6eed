// GPTModel behaviour: Megatron's initialisation, dropout, position ids,
// zero-centred gamma, input errors, and that a tiny model overfits a batch.
#include "qk/transformer/gpt_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/tiny_gpt.h"
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/optim/adam.h"
#include "qk/tensor/generator.h"

namespace qk::transformer {
namespace {

using qk::test::tiny_gpt2;
using qk::test::tiny_llama;

Tensor tokens_for(int64_t b, int64_t t, uint64_t seed) {
  Generator g(seed);
  return randint(0, 100, {b, t}, DType::i64, g);
}

double stddev(const Tensor& t) {
  const std::vector<double> v = t.to_vector<double>();
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(a.to(DType::f64) - b.to(DType::f64))).item<double>();
}

TEST(GPTModelInit, MegatronStatistics) {
  TransformerConfig c = tiny_gpt2();
  c.hidden_size = 256;
  c.num_layers = 4;
  c.init_method_std = 0.03;
  c.vocab_size = 2000;
  manual_seed(7);
  GPTModel model(c);
  const double scaled = 0.03 / std::sqrt(2.0 * 4);
  for (const auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    const Tensor& p = item.value();
    const bool is_norm = name.find("layernorm") != std::string::npos;
    const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (is_norm || is_bias) {
      const double expected = is_norm && !is_bias ? 1.0 : 0.0;
      EXPECT_EQ(amax(abs(p - expected)).item<double>(), 0.0) << name;
      continue;
    }
    const bool is_output = name.find("linear_proj") != std::string::npos || name.find("linear_fc2") != std::string::npos;
    const double expected = is_output ? scaled : 0.03;
    EXPECT_NEAR(stddev(p), expected, 0.03 * expected) << name;  // >= 65k draws: ~0.3% sampling error
    EXPECT_NEAR(mean(p).item<double>(), 0.0, 0.02 * expected) << name;
  }
}

TEST(GPTModelInit, SeedReproducesAndDiffers) {
  manual_seed(11);
  GPTModel a(tiny_llama());
  manual_seed(11);
  GPTModel b(tiny_llama());
  manual_seed(12);
  GPTModel other(tiny_llama());
  const auto pa = a->named_parameters(), pb = b->named_parameters(), po = other->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(max_abs_diff(pa[i].value(), pb[i].value()), 0.0) << pa[i].key();
    if (pa[i].key().find("linear_qkv") != std::string::npos) {
      EXPECT_GT(max_abs_diff(pa[i].value(), po[i].value()), 0.0) << pa[i].key();
    }
  }
}

TEST(GPTModelInit, ZeroCenteredGammaStartsAtZeroAndActsAsOnePlusWeight) {
  TransformerConfig c = tiny_llama();
  c.layernorm_zero_centered_gamma = true;
  manual_seed(3);
  GPTModel centred(c);
  c.layernorm_zero_centered_gamma = false;
  manual_seed(3);
  GPTModel plain(c);
  NoGradGuard no_grad;
  for (const auto& item : centred->named_parameters()) {
    if (item.key().find("layernorm.weight") == std::string::npos) continue;
    Tensor w = item.value();
    EXPECT_EQ(amax(abs(w)).item<double>(), 0.0) << item.key();
    // Same effective gamma: stored w around 0 applied as 1 + w == w + 1 stored plainly.
    w.copy_(rand({w.size(0)}) * 0.2 - 0.1);
    Tensor plain_w = plain->named_parameters()[item.key()];
    plain_w.copy_(w + 1.0);
  }
  const Tensor tokens = tokens_for(2, 16, 1);
  EXPECT_LT(max_abs_diff(centred(tokens), plain(tokens)), 1e-5);
}

TEST(GPTModel, TiedOutputReusesTheWordEmbedding) {
  GPTModel tied(tiny_gpt2());
  EXPECT_TRUE(tied->output_weight().is_same(tied->embedding->word_embeddings->weight));
  EXPECT_FALSE(tied->named_parameters().contains("output_layer.weight"));
  GPTModel untied(tiny_llama());
  EXPECT_TRUE(untied->named_parameters().contains("output_layer.weight"));
  EXPECT_FALSE(untied->named_parameters().contains("embedding.position_embeddings.weight"));
  EXPECT_EQ(untied->output_weight().shape(), (Shape{128, 64}));  // vocab 100 padded to 128
}

TEST(GPTModel, LogitsShapeAndLossIsMaskedMean) {
  manual_seed(5);
  GPTModel model(tiny_gpt2());
  const Tensor tokens = tokens_for(3, 10, 2), labels = tokens_for(3, 10, 3);
  const Tensor logits = model(tokens);
  EXPECT_EQ(logits.shape(), (Shape{3, 10, 128}));
  Tensor mask = ones({3, 10});
  {
    NoGradGuard no_grad;
    mask.narrow(1, 5, 5).fill_(0.0);
  }
  const Tensor per_token = cross_entropy(logits.reshape({30, 128}), labels.reshape({30}), -100, 0.0,
                                         ops::Reduction::none);
  const double expected = (sum(per_token * mask.reshape({30})) / 15.0).item<double>();
  EXPECT_NEAR(model(tokens, Tensor(), labels, mask).item<double>(), expected, 1e-5);
  EXPECT_NEAR(model(tokens, Tensor(), labels).item<double>(), mean(per_token).item<double>(), 1e-5);
}

TEST(GPTModel, PositionIdsFeedTheLearnedEmbedding) {
  manual_seed(6);
  GPTModel model(tiny_gpt2());
  const Tensor tokens = tokens_for(2, 8, 4);
  const Tensor default_positions = model(tokens);
  const Tensor explicit_positions = model(tokens, arange(8).unsqueeze(0).expand({2, 8}).contiguous());
  EXPECT_EQ(max_abs_diff(default_positions, explicit_positions), 0.0);
  const Tensor shifted = model(tokens, arange(8) + 4);
  EXPECT_GT(max_abs_diff(default_positions, shifted), 1e-3);
}

TEST(GPTModel, DropoutOnlyInTraining) {
  TransformerConfig c = tiny_gpt2();
  c.hidden_dropout = 0.2;
  c.attention_dropout = 0.2;
  manual_seed(8);
  GPTModel model(c);
  const Tensor tokens = tokens_for(2, 16, 5);
  model->eval();
  const Tensor eval1 = model(tokens), eval2 = model(tokens);
  EXPECT_EQ(max_abs_diff(eval1, eval2), 0.0);
  model->train();
  manual_seed(100);
  const Tensor train1 = model(tokens);
  const Tensor train2 = model(tokens);
  manual_seed(100);
  const Tensor train1_again = model(tokens);
  EXPECT_GT(max_abs_diff(train1, eval1), 1e-3);
  EXPECT_GT(max_abs_diff(train1, train2), 1e-3);
  EXPECT_EQ(max_abs_diff(train1, train1_again), 0.0);  // the seed reproduces the masks
  // Without dropout probabilities, training mode is the eval computation.
  c.hidden_dropout = c.attention_dropout = 0.0;
  manual_seed(8);
  GPTModel no_dropout(c);
  EXPECT_EQ(max_abs_diff(no_dropout(tokens), eval1), 0.0);
}

TEST(GPTModel, InputErrors) {
  GPTModel model(tiny_gpt2());
  EXPECT_THROW(model(tokens_for(1, 17, 1)), ValueError);  // past max_position_embeddings
  EXPECT_THROW(model(tokens_for(1, 4, 1).to(DType::i32)), TypeError);
  EXPECT_THROW(model(tokens_for(4, 1, 1).reshape({4})), ValueError);
  EXPECT_THROW(model(tokens_for(1, 4, 1), Tensor(), tokens_for(1, 5, 1)), ValueError);
  EXPECT_THROW(model(full({1, 4}, 128, DType::i64)), Error);  // token beyond the padded vocabulary
}

// Megatron's --bf16 / --fp16 paths end to end: half-precision parameters track f32.
TEST(GPTModel, HalfPrecisionParamsTrackF32) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    TransformerConfig c = tiny_llama();
    manual_seed(9);
    GPTModel f32(c);
    c.params_dtype = dtype;
    manual_seed(9);
    GPTModel half(c);
    for (const auto& item : half->named_parameters()) EXPECT_EQ(item.value().dtype(), dtype) << item.key();
    const Tensor tokens = tokens_for(2, 16, 6), labels = tokens_for(2, 16, 7);
    const Tensor a = f32(tokens), b = half(tokens);
    EXPECT_EQ(b.dtype(), DType::f32);
    EXPECT_LT(max_abs_diff(a, b), 0.05 * amax(abs(a)).item<double>()) << dtype_name(dtype);
    Tensor loss = half(tokens, Tensor(), labels);
    loss.backward();
    for (const auto& item : half->named_parameters()) {
      ASSERT_TRUE(item.value().grad().defined()) << item.key();
      EXPECT_EQ(item.value().grad().dtype(), dtype) << item.key();
    }
  }
}

TEST(GPTModel, NoPositionEmbedding) {
  TransformerConfig c = tiny_gpt2();
  c.position_embedding_type = PositionEmbeddingType::none;
  GPTModel model(c);
  EXPECT_FALSE(model->named_parameters().contains("embedding.position_embeddings.weight"));
  // Causal attention alone still tells positions apart (a prefix sees fewer tokens),
  // and nothing limits the length to max_position_embeddings.
  EXPECT_EQ(model(tokens_for(1, 24, 1)).shape(), (Shape{1, 24, 128}));
}

// Original BERT order: the residuals are the layer norms' outputs.
TEST(TransformerLayer, ResidualPostLayernorm) {
  TransformerConfig c = tiny_gpt2();
  c.apply_residual_connection_post_layernorm = true;
  c.validate();
  manual_seed(12);
  TransformerLayer layer(c, 1, gpt_layer_local_spec());
  const Tensor x = randn({2, 5, 64});
  const Tensor ln1 = layer->input_layernorm(x);
  const Tensor h = ln1 + layer->self_attention->forward(ln1, {});
  const Tensor ln2 = layer->pre_mlp_layernorm(h);
  const Tensor expected = ln2 + layer->mlp->forward(ln2);
  EXPECT_LT(max_abs_diff(layer->forward(x, {}), expected), 1e-6);
}

// f32 parameters under autocast: GEMMs in bf16, norms/softmax/loss in f32, and
// the residual stream stays in the parameters' dtype.
TEST(GPTModel, RunsUnderAutocast) {
  manual_seed(10);
  GPTModel model(tiny_llama());
  const Tensor tokens = tokens_for(2, 16, 7), labels = tokens_for(2, 16, 8);
  const Tensor reference = model(tokens, Tensor(), labels);
  Tensor loss;
  {
    autocast::Guard amp(DType::bf16);
    loss = model(tokens, Tensor(), labels);
  }
  EXPECT_EQ(loss.dtype(), DType::f32);
  EXPECT_NEAR(loss.item<double>(), reference.item<double>(), 0.02 * reference.item<double>());
  loss.backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_EQ(item.value().grad().dtype(), DType::f32) << item.key();
  }
}

// The smallest end-to-end training check: one batch, Adam, ~50 steps.
TEST(GPTModel, OverfitsOneBatch) {
  for (const TransformerConfig& c : {tiny_gpt2(), tiny_llama()}) {
    manual_seed(21);
    GPTModel model(c);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const Tensor tokens = tokens_for(2, 16, 9), labels = tokens_for(2, 16, 10);
    double first = 0, last = 0;
    for (int step = 0; step < 50; ++step) {
      opt.zero_grad();
      Tensor loss = model(tokens, Tensor(), labels);
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item<double>();
    }
    EXPECT_NEAR(first, std::log(128.0), 0.5) << c.summary();  // near-uniform at init
    EXPECT_LT(last, 0.1 * first) << c.summary();
  }
}

}  // namespace
}  // namespace qk::transformer
