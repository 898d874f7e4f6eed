// Generation with the KV cache equals the full forward, position by position.
#include "qk/transformer/kv_cache.h"

#include <gtest/gtest.h>

#include "common/tiny_gpt.h"
#include "qk/autograd/functions.h"
#include "qk/transformer/gpt_model.h"

namespace qk::transformer {
namespace {

// The shared tiny layouts (common/tiny_gpt.h) with dropout (off in eval(),
// as generation runs) and, for Llama, partial rotary: positions must be
// right in the rotated dims.
TransformerConfig tiny(bool llama, bool flash = false) {
  TransformerConfig c = llama ? test::tiny_llama() : test::tiny_gpt2();
  c.use_flash_attn = flash;
  c.hidden_dropout = 0.1;
  c.attention_dropout = 0.1;
  if (llama) c.rotary_percent = 0.5;
  return c;
}

double max_abs_diff(const Tensor& a, const Tensor& b) { return amax(abs(a - b)).item<double>(); }

// Prompt of 5, a chunk of 3 (a multi-token step against a cache: bottom-right
// causal alignment), then single tokens up to 16.
void check_generation_equals_full_forward(bool llama, bool flash = false) {
  manual_seed(31);
  GPTModel model(tiny(llama, flash));
  model->eval();
  Generator g(32);
  const Tensor tokens = randint(0, 100, {2, 16}, DType::i64, g);
  const Tensor full = model(tokens);  // [2, 16, V]

  KVCache cache = model->make_kv_cache(2, 16);
  std::vector<Tensor> steps;
  int64_t at = 0;
  for (int64_t len : {5, 3, 1, 1, 1, 1, 1, 1, 1, 1}) {
    const Tensor logits = model->forward_step(tokens.narrow(1, at, len), cache);
    EXPECT_EQ(logits.shape(), (Shape{2, len, 128}));
    EXPECT_FALSE(logits.requires_grad());
    steps.push_back(logits);
    at += len;
    EXPECT_EQ(cache.length(), at);
  }
  const Tensor incremental = cat(steps, 1);
  const double scale = amax(abs(full)).item<double>();
  EXPECT_LT(max_abs_diff(incremental, full), 1e-5 * scale) << (llama ? "llama" : "gpt2");

  // Full: one more position does not fit.
  EXPECT_THROW(model->forward_step(tokens.narrow(1, 0, 1), cache), ValueError);
  // reset() reuses the storage from position 0.
  cache.reset();
  const Tensor again = model->forward_step(tokens.narrow(1, 0, 4), cache);
  EXPECT_LT(max_abs_diff(again, full.narrow(1, 0, 4)), 1e-5 * scale);
}

TEST(KVCache, GenerationEqualsFullForwardGpt2) { check_generation_equals_full_forward(false); }
TEST(KVCache, GenerationEqualsFullForwardLlama) { check_generation_equals_full_forward(true); }
// The flash kernel's bottom-right causal alignment against the cache.
TEST(KVCache, GenerationEqualsFullForwardFlash) {
  check_generation_equals_full_forward(false, true);
  check_generation_equals_full_forward(true, true);
}

TEST(KVCache, GenerationEqualsFullForwardBf16) {
  TransformerConfig c = tiny(true);
  c.params_dtype = DType::bf16;
  manual_seed(33);
  GPTModel model(c);
  model->eval();
  Generator g(34);
  const Tensor tokens = randint(0, 100, {1, 12}, DType::i64, g);
  const Tensor full = model(tokens);
  KVCache cache = model->make_kv_cache(1, 12);
  std::vector<Tensor> steps{model->forward_step(tokens.narrow(1, 0, 6), cache)};
  for (int64_t i = 6; i < 12; ++i) steps.push_back(model->forward_step(tokens.narrow(1, i, 1), cache));
  // Same bf16 roundings except inside attention (fewer rows per GEMM): a few ulps.
  EXPECT_LT(max_abs_diff(cat(steps, 1), full), 3e-2 * amax(abs(full)).item<double>());
}

TEST(KVCache, LatentCacheAppendsAndChecksShapes) {
  KVCache cache = KVCache::latent(3, 2, 8, 20, DType::f32);
  EXPECT_TRUE(cache.is_latent());
  EXPECT_EQ(cache.values_per_position(), 20);
  const Tensor first = randn({2, 5, 20});
  EXPECT_EQ(cache.append_latent(1, first).shape(), (Shape{2, 5, 20}));
  cache.advance(5);
  const Tensor next = randn({2, 1, 20});
  const Tensor all = cache.append_latent(1, next);
  EXPECT_EQ(max_abs_diff(all, cat({first, next}, 1)), 0.0);
  EXPECT_THROW(cache.append_latent(1, randn({2, 1, 19})), ValueError);  // latent width
  EXPECT_THROW(cache.append_latent(3, next), ValueError);               // layer
  EXPECT_THROW(cache.append(0, zeros({2, 1, 1, 20}), zeros({2, 1, 1, 20})), ValueError);
  EXPECT_THROW(KVCache::latent(3, 2, 8, 0, DType::f32), ValueError);
  // A key/value cache stores 2 kv_heads head_dim per position and takes no latents.
  KVCache kv(2, 1, 8, 4, 16, DType::f32);
  EXPECT_FALSE(kv.is_latent());
  EXPECT_EQ(kv.values_per_position(), 2 * 4 * 16);
  EXPECT_THROW(kv.append_latent(0, randn({1, 1, 20})), ValueError);
}

TEST(KVCache, ChecksShapesAndTraining) {
  TransformerConfig c = tiny(false);
  GPTModel model(c);
  KVCache cache = model->make_kv_cache(2, 8);
  EXPECT_EQ(cache.num_layers(), 2);
  model->eval();
  EXPECT_THROW(model->forward_step(zeros({3, 2}, DType::i64), cache), ValueError);  // batch 3 vs 2
  KVCache wrong_layers(1, 2, 8, 4, 16, DType::f32);
  EXPECT_THROW(model->forward_step(zeros({2, 2}, DType::i64), wrong_layers), ValueError);
  EXPECT_THROW(cache.append(0, zeros({2, 1, 3, 16}), zeros({2, 1, 3, 16})), ValueError);  // 3 kv heads vs 4
  EXPECT_THROW(KVCache(2, 0, 8, 4, 16, DType::f32), ValueError);
  // Generation with dropout probabilities set must run in eval mode.
  model->train();
  EXPECT_THROW(model->forward_step(zeros({2, 1}, DType::i64), cache), ValueError);
}

}  // namespace
}  // namespace qk::transformer
