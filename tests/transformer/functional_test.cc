// The unfused references behind the fused-op seams: RoPE tables and rotation
// against Megatron's formulas in PyTorch, attention against a direct
// per-head computation (grouped heads, bottom-right causal alignment,
// strided inputs), the MLP activations and the masked loss.
#include "qk/transformer/functional.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/nn/safetensors.h"

namespace qk::transformer {
namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) { return amax(abs(a - b)).item<double>(); }

TEST(Rotary, MatchesMegatronPartialOffsetInterpolated) {
  const nn::SafetensorsFile f =
      nn::load_safetensors(std::string(QK_SOURCE_DIR) + "/tests/fixtures/torch/transformer_rope.safetensors");
  // gen_transformer.py's gen_rope: R = 4 of D = 8, base 500, positions 3..7, interpolation 2.
  const RotaryTables t = rotary_tables(4, 500.0, 3, 5, 2.0);
  EXPECT_TRUE(test::all_close(t.cos, f.tensors.at("cos"), 1e-6, 1e-6));
  EXPECT_TRUE(test::all_close(t.sin, f.tensors.at("sin"), 1e-6, 1e-6));
  const Tensor out = unfused_rotary_embedding(f.tensors.at("x"), f.tensors.at("cos"), f.tensors.at("sin"));
  EXPECT_TRUE(test::all_close(out, f.tensors.at("out"), 1e-6, 1e-6));
  // The pass-through dims are untouched.
  EXPECT_EQ(max_abs_diff(out.narrow(3, 4, 4), f.tensors.at("x").narrow(3, 4, 4)), 0.0);
  // The model's path (the fused kernel) gives the same.
  const Tensor fused = apply_rotary_embedding(f.tensors.at("x"), f.tensors.at("cos"), f.tensors.at("sin"));
  EXPECT_TRUE(test::all_close(fused, f.tensors.at("out"), 1e-6, 1e-6));
}

TEST(Rotary, TablesFromConfig) {
  TransformerConfig c;
  c.num_layers = 1;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 8;
  c.vocab_size = 10;
  c.position_embedding_type = PositionEmbeddingType::rope;
  c.rotary_percent = 0.5;
  c.rotary_seq_len_interpolation_factor = 4.0;
  c.validate();
  const RotaryTables t = rotary_tables(c, 2, 6);
  EXPECT_EQ(t.cos.shape(), (Shape{6, 8}));
  // Row p, column i: cos(((2 + p) / 4) / 10000^(2i / 8)); cat(freqs, freqs).
  for (int64_t p = 0; p < 6; ++p)
    for (int64_t i = 0; i < 4; ++i) {
      const double angle = (2.0 + p) / 4.0 / std::pow(10000.0, 2.0 * i / 8.0);
      EXPECT_NEAR(t.cos.select(0, p).select(0, i).item<double>(), std::cos(angle), 1e-6);
      EXPECT_NEAR(t.sin.select(0, p).select(0, i + 4).item<double>(), std::sin(angle), 1e-6);
    }
}

// softmax(scale q.k + mask) v for one (batch, query head), straight from the definition.
Tensor attention_by_definition(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const int64_t b = q.size(0), t = q.size(1), hq = q.size(2), s = k.size(1), hkv = k.size(2);
  std::vector<Tensor> per_batch;
  for (int64_t bi = 0; bi < b; ++bi) {
    std::vector<Tensor> heads;
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kv = h / (hq / hkv);
      const Tensor qh = q.select(0, bi).select(1, h), kh = k.select(0, bi).select(1, kv);
      const Tensor vh = v.select(0, bi).select(1, kv);
      Tensor scores = matmul(qh, kh.t()) * scale;  // [T, S]
      Tensor mask = empty({t, s}, DType::boolean);
      for (int64_t i = 0; i < t; ++i)
        for (int64_t j = 0; j < s; ++j) mask.data_ptr<bool>()[i * s + j] = j > i + (s - t);
      heads.push_back(matmul(softmax(masked_fill(scores, mask, -INFINITY), -1), vh));  // [T, D]
    }
    per_batch.push_back(stack(heads, 1));  // [T, Hq, D]
  }
  return stack(per_batch, 0);
}

TEST(UnfusedAttention, GroupedHeadsBottomRightCausal) {
  manual_seed(41);
  // T = 3 queries against S = 7 keys (a chunk after 4 cached positions), 6
  // query heads on 2 kv heads; q, k, v strided slices of one fused tensor.
  const Tensor fused = randn({2, 7, 10, 8}).requires_grad_();
  const Tensor q = fused.narrow(1, 4, 3).narrow(2, 0, 6), k = fused.narrow(2, 6, 2), v = fused.narrow(2, 8, 2);
  CoreAttentionOptions o;
  o.scale = 0.3;
  const Tensor out = unfused_attention(q, k, v, o);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 6, 8}));
  EXPECT_TRUE(out.is_contiguous());
  const Tensor expected = attention_by_definition(q, k, v, 0.3);
  EXPECT_LT(max_abs_diff(out, expected), 1e-5);

  const Tensor r = randn({2, 3, 6, 8});
  const Tensor g_ours = autograd::grad({sum(out * r)}, {fused}, {}, /*retain_graph=*/true)[0];
  const Tensor g_def = autograd::grad({sum(expected * r)}, {fused})[0];
  EXPECT_LT(max_abs_diff(g_ours, g_def), 1e-5);
}

TEST(UnfusedAttention, DefaultScaleAndDropout) {
  manual_seed(42);
  const Tensor q = randn({1, 5, 2, 16}), k = randn({1, 5, 2, 16}), v = randn({1, 5, 2, 16});
  EXPECT_LT(max_abs_diff(unfused_attention(q, k, v), attention_by_definition(q, k, v, 0.25)), 1e-5);
  CoreAttentionOptions o;
  o.dropout_p = 0.5;
  EXPECT_EQ(max_abs_diff(unfused_attention(q, k, v, o), unfused_attention(q, k, v)), 0.0);  // not training
  o.training = true;
  Generator g1(5), g2(5);
  o.generator = &g1;
  const Tensor a = unfused_attention(q, k, v, o);
  o.generator = &g2;
  EXPECT_EQ(max_abs_diff(a, unfused_attention(q, k, v, o)), 0.0);  // the generator decides the mask
  EXPECT_GT(max_abs_diff(a, unfused_attention(q, k, v)), 1e-3);
}

TEST(UnfusedAttention, RejectsBadShapes) {
  const Tensor q = zeros({1, 4, 6, 8});
  EXPECT_THROW(unfused_attention(q, zeros({1, 4, 4, 8}), zeros({1, 4, 4, 8})), ValueError);  // 6 % 4
  EXPECT_THROW(unfused_attention(q, zeros({1, 3, 2, 8}), zeros({1, 3, 2, 8})), ValueError);  // S < T
  EXPECT_THROW(unfused_attention(q, zeros({1, 4, 2, 8}), zeros({1, 5, 2, 8})), ValueError);  // k vs v: S
  EXPECT_THROW(unfused_attention(q, zeros({1, 4, 2, 8}), zeros({1, 4, 1, 8})), ValueError);  // k vs v: Hkv
  // Values may have their own head dim (multi-latent attention): the output has it.
  EXPECT_EQ(unfused_attention(q, zeros({1, 4, 2, 8}), zeros({1, 4, 2, 4})).shape(), (Shape{1, 4, 6, 4}));
  EXPECT_THROW(unfused_attention(q.reshape({4, 6, 8}), zeros({1, 4, 2, 8}), zeros({1, 4, 2, 8})), ValueError);
}

TEST(MlpActivation, GatedAndPlain) {
  manual_seed(43);
  const Tensor x = randn({3, 8});
  const Tensor gate = x.narrow(1, 0, 4), up = x.narrow(1, 4, 4);
  EXPECT_LT(max_abs_diff(mlp_activation(x, Activation::silu, true), silu(gate) * up), 1e-7);
  EXPECT_LT(max_abs_diff(mlp_activation(x, Activation::gelu, true), gelu(gate) * up), 1e-7);
  EXPECT_LT(max_abs_diff(mlp_activation(x, Activation::openai_gelu, false), gelu(x, "tanh")), 1e-7);
  EXPECT_LT(max_abs_diff(mlp_activation(x, Activation::squared_relu, false), relu(x) * relu(x)), 1e-7);
  EXPECT_THROW(mlp_activation(randn({2, 3}), Activation::silu, true), ValueError);
}

TEST(OutputLoss, MaskedMeanOfTokenLosses) {
  manual_seed(44);
  const Tensor hidden = randn({6, 4}), weight = randn({10, 4});
  const Tensor labels = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {6});
  const Tensor mask = from_vector<float>({1, 0, 1, 1, 0, 1}, {6});
  const Tensor losses = cross_entropy(matmul(hidden, weight.t()), labels, -100, 0.0, ops::Reduction::none);
  EXPECT_NEAR(output_loss(hidden, weight, labels, mask).item<double>(),
              (sum(losses * mask) / 4.0).item<double>(), 1e-6);
  EXPECT_NEAR(output_loss(hidden, weight, labels).item<double>(), mean(losses).item<double>(), 1e-6);
  EXPECT_THROW(output_loss(hidden, weight, labels.narrow(0, 0, 5)), ValueError);
}

// The model's chunked loss against the whole-logits reference, value and gradients.
TEST(OutputLoss, FusedEqualsUnfused) {
  manual_seed(45);
  const Tensor labels = from_vector<int64_t>({1, 2, -100, 4, 5, 9, 0}, {7});
  const Tensor mask = from_vector<float>({1, 0, 1, 1, 1, 1, 1}, {7});
  Tensor h1 = randn({7, 8}).requires_grad_(), w1 = randn({11, 8}).requires_grad_();
  Tensor h2 = h1.detach().clone().requires_grad_(), w2 = w1.detach().clone().requires_grad_();
  const Tensor fused = output_loss(h1, w1, labels, mask), ref = unfused_output_loss(h2, w2, labels, mask);
  EXPECT_NEAR(fused.item<double>(), ref.item<double>(), 1e-5);
  (fused * 3.0).backward();
  (ref * 3.0).backward();
  EXPECT_LT(max_abs_diff(h1.grad(), h2.grad()), 1e-5);
  EXPECT_LT(max_abs_diff(w1.grad(), w2.grad()), 1e-5);
}

TEST(MlpActivation, SwigluEqualsUnfused) {
  manual_seed(46);
  Tensor x1 = randn({3, 5, 14}).requires_grad_();
  Tensor x2 = x1.detach().clone().requires_grad_();
  const Tensor a = mlp_activation(x1, Activation::silu, true), b = unfused_mlp_activation(x2, Activation::silu, true);
  EXPECT_LT(max_abs_diff(a, b), 1e-6);
  sum(a * a).backward();
  sum(b * b).backward();
  EXPECT_LT(max_abs_diff(x1.grad(), x2.grad()), 1e-5);
}

}  // namespace
}  // namespace qk::transformer
