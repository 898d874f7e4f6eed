// Multi-latent attention: the module against the PyTorch reference of
// tests/fixtures/gen_mla.py (output, input gradient, every parameter's
// gradient; with and without q_lora_rank, RMSNorm and LayerNorm latent norms,
// YaRN), through the unfused core, the flash kernel (value heads narrower
// than query/key heads) and selective recompute; YaRN's tables; a tiny GPT
// with MLA that trains and carries Megatron-core's names; generation with the
// latent KV cache against the full forward.
#include <gtest/gtest.h>

#include <set>

#include "qk/autograd/functions.h"
#include "qk/optim/adam.h"
#include "qk/transformer/generate.h"
#include "qk/transformer/gpt_model.h"
#include "qk/transformer/mla.h"
#include "transformer/fixture_params.h"
#include "transformer/mla_testing.h"

namespace qk::transformer {
namespace {

TransformerConfig config_from_fixture(const nn::Metadata& m) {
  auto i = [&](const char* k) { return static_cast<int64_t>(std::stoll(m.at(k))); };
  auto d = [&](const char* k) { return std::stod(m.at(k)); };
  TransformerConfig c;
  c.num_layers = 1;
  c.hidden_size = i("hidden_size");
  c.num_attention_heads = i("num_attention_heads");
  c.seq_length = 16;
  c.vocab_size = 64;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  c.multi_latent_attention = true;
  c.qk_head_dim = i("qk_head_dim");
  c.qk_pos_emb_head_dim = i("qk_pos_emb_head_dim");
  c.v_head_dim = i("v_head_dim");
  c.kv_lora_rank = i("kv_lora_rank");
  c.q_lora_rank = i("q_lora_rank");
  c.qk_layernorm = m.at("qk_layernorm") == "True";
  c.normalization = parse_normalization(m.at("normalization"));
  c.layernorm_epsilon = d("layernorm_epsilon");
  c.add_bias_linear = m.at("add_bias_linear") == "True";
  c.rotary_base = d("rotary_base");
  c.rotary_scaling_factor = d("rotary_scaling_factor");
  c.mscale = d("mscale");
  c.mscale_all_dim = d("mscale_all_dim");
  c.original_max_position_embeddings = i("original_max_position_embeddings");
  c.beta_fast = d("beta_fast");
  c.beta_slow = d("beta_slow");
  c.validate();
  return c;
}

enum class Core { unfused, flash, selective_recompute };

void check_against_torch(const std::string& name, Core core) {
  SCOPED_TRACE(name + (core == Core::flash ? " flash" : core == Core::unfused ? " unfused" : " recompute"));
  const nn::SafetensorsFile f =
      nn::load_safetensors(std::string(QK_SOURCE_DIR) + "/tests/fixtures/torch/mla_" + name + ".safetensors");
  TransformerConfig c = config_from_fixture(f.metadata);
  c.use_flash_attn = core == Core::flash;
  if (core == Core::selective_recompute) c.recompute_granularity = RecomputeGranularity::selective;
  MultiLatentAttention mla(c, 1);

  std::set<std::string> expected, ours;
  for (const auto& [key, t] : f.tensors)
    if (key.rfind("grad.", 0) == 0) expected.insert(key.substr(5));
  {
    NoGradGuard no_grad;
    for (const auto& item : mla->named_parameters()) {
      ours.insert(item.key());
      ASSERT_TRUE(expected.count(item.key())) << item.key() << " is not in the reference";
      ASSERT_EQ(item.value().shape(), f.tensors.at("grad." + item.key()).shape()) << item.key();
      Tensor param = item.value();
      param.copy_(test::fixture_param(item.key(), param.shape()));
    }
  }
  ASSERT_EQ(ours, expected);

  Tensor x = f.tensors.at("x").detach().requires_grad_();
  const Tensor out = mla->forward(x, AttentionContext{});
  EXPECT_TRUE(test::close_scaled(out, f.tensors.at("out"), 1e-5, "out"));
  sum(out * f.tensors.at("probe")).backward();
  EXPECT_TRUE(test::close_scaled(x.grad(), f.tensors.at("grad_x"), 1e-5, "grad_x"));
  for (const auto& item : mla->named_parameters())
    EXPECT_TRUE(test::close_scaled(item.value().grad(), f.tensors.at("grad." + item.key()), 1e-5,
                                   "grad." + item.key()));
}

TEST(MultiLatentAttention, MatchesTorchWithoutQueryLowRank) {
  for (Core core : {Core::unfused, Core::flash, Core::selective_recompute}) check_against_torch("q_proj", core);
}

TEST(MultiLatentAttention, MatchesTorchWithQueryLowRankAndRmsNormLatents) {
  for (Core core : {Core::unfused, Core::flash}) check_against_torch("q_lora_rms", core);
}

TEST(MultiLatentAttention, MatchesTorchWithYarnAndLayerNormLatents) {
  for (Core core : {Core::unfused, Core::flash}) check_against_torch("yarn", core);
}

TEST(MultiLatentAttention, YarnScales) {
  EXPECT_EQ(yarn_get_mscale(1.0, 0.7), 1.0);
  EXPECT_NEAR(yarn_get_mscale(40.0, 0.707), 0.1 * 0.707 * std::log(40.0) + 1.0, 1e-15);
  TransformerConfig c;
  c.qk_head_dim = 128;
  c.qk_pos_emb_head_dim = 64;
  EXPECT_NEAR(mla_softmax_scale(c), 1.0 / std::sqrt(192.0), 1e-15);
  c.rotary_scaling_factor = 40;
  c.mscale = 0.707;  // the cos/sin factor's, not the softmax's
  c.mscale_all_dim = 0.707;
  const double m = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_NEAR(mla_softmax_scale(c), m * m / std::sqrt(192.0), 1e-15);
}

TEST(MultiLatentAttention, YarnTablesAtScaleOneArePlainRope) {
  TransformerConfig c;
  c.qk_pos_emb_head_dim = 16;
  c.rotary_base = 500;
  const RotaryTables yarn = mla_rotary_tables(c, 3, 9);
  const RotaryTables plain = rotary_tables(16, 500, 3, 9);
  EXPECT_TRUE(test::close_scaled(yarn.cos, plain.cos, 1e-6, "cos"));
  EXPECT_TRUE(test::close_scaled(yarn.sin, plain.sin, 1e-6, "sin"));
  // Scaled, trained on 64 positions: the ramp runs over frequencies 0..3, so
  // the fastest is kept, the slowest interpolated (divided by the factor),
  // and cos/sin carry the concentration factor.
  c.original_max_position_embeddings = 64;
  c.rotary_scaling_factor = 8;
  c.mscale = 1.0;
  c.mscale_all_dim = 0.0;
  const RotaryTables scaled = mla_rotary_tables(c, 0, 101);
  const double m = yarn_get_mscale(8, 1.0);
  const auto cs = scaled.cos.to_vector<double>();
  EXPECT_NEAR(cs[1 * 16 + 0], m * std::cos(1.0), 1e-6);                                    // fastest
  EXPECT_NEAR(cs[100 * 16 + 7], m * std::cos(100 / std::pow(500.0, 14.0 / 16) / 8), 1e-5);  // slowest
}

TransformerConfig tiny_mla_gpt() { return tiny_mla_config(/*seq_length=*/16, /*q_lora_rank=*/16); }

TEST(MultiLatentAttention, GptStateDictHasMegatronNames) {
  manual_seed(3);
  GPTModel model(tiny_mla_gpt());
  const std::string p = "decoder.layers.1.self_attention.";
  // Megatron-core's order: linear_proj, the q and kv projections, then the norms.
  const std::vector<std::pair<std::string, Shape>> want = {
      {p + "linear_proj.weight", {32, 4 * 6}},          {p + "linear_q_down_proj.weight", {16, 32}},
      {p + "linear_q_up_proj.weight", {4 * (8 + 4), 16}}, {p + "linear_kv_down_proj.weight", {12 + 4, 32}},
      {p + "linear_kv_up_proj.weight", {4 * (8 + 6), 12}}, {p + "q_layernorm.weight", {16}},
      {p + "kv_layernorm.weight", {12}}};
  std::vector<std::pair<std::string, Shape>> got;
  for (const auto& item : model->state_dict())
    if (item.key().rfind(p, 0) == 0) got.emplace_back(item.key(), item.value().shape());
  EXPECT_EQ(got, want);
  // Without the query low rank: linear_q_proj; without --qk-layernorm: no norms.
  TransformerConfig c = tiny_mla_gpt();
  c.q_lora_rank = 0;
  c.qk_layernorm = false;
  GPTModel plain(c);
  std::vector<std::string> names;
  for (const auto& item : plain->state_dict())
    if (item.key().rfind(p, 0) == 0) names.push_back(item.key());
  EXPECT_EQ(names, (std::vector<std::string>{p + "linear_proj.weight", p + "linear_q_proj.weight",
                                              p + "linear_kv_down_proj.weight", p + "linear_kv_up_proj.weight"}));
}

TEST(MultiLatentAttention, TinyGptTrains) {
  for (bool flash : {false, true}) {
    TransformerConfig c = tiny_mla_gpt();
    c.use_flash_attn = flash;
    manual_seed(5);
    GPTModel model(c);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    Generator g(6);
    const Tensor tokens = randint(0, 128, {2, 16}, DType::i64, g);
    const Tensor labels = randint(0, 128, {2, 16}, DType::i64, g);
    double first = 0, last = 0;
    for (int step = 0; step < 8; ++step) {
      opt.zero_grad();
      Tensor loss = model(tokens, Tensor(), labels);
      if (step == 0) first = loss.item<double>();
      last = loss.item<double>();
      loss.backward();
      for (const auto& item : model->named_parameters())
        ASSERT_TRUE(item.value().grad().defined()) << item.key() << " got no gradient";
      opt.step();
    }
    EXPECT_LT(last, first - 0.5) << (flash ? "flash" : "unfused") << ": " << first << " -> " << last;
  }
}

double max_abs_diff(const Tensor& a, const Tensor& b) { return amax(abs(a - b)).item<double>(); }

TEST(MultiLatentAttention, LatentCacheGenerationEqualsFullForward) {
  for (bool flash : {false, true}) {
    TransformerConfig c = tiny_mla_gpt();
    c.use_flash_attn = flash;
    manual_seed(8);
    GPTModel model(c);
    model->eval();
    Generator g(9);
    const Tensor tokens = randint(0, 128, {2, 12}, DType::i64, g);
    const Tensor full = model(tokens);

    KVCache cache = model->make_kv_cache(2, 12);
    ASSERT_TRUE(cache.is_latent());
    EXPECT_EQ(cache.values_per_position(), c.kv_lora_rank + c.qk_pos_emb_head_dim);  // not 2 H (dn + dr)
    std::vector<Tensor> steps;
    int64_t at = 0;
    for (int64_t len : {5, 3, 1, 1, 1, 1}) {
      steps.push_back(model->forward_step(tokens.narrow(1, at, len), cache));
      at += len;
    }
    EXPECT_EQ(cache.length(), 12);
    EXPECT_LT(max_abs_diff(cat(steps, 1), full), 2e-6 * amax(abs(full)).item<double>()) << (flash ? "flash" : "");
    EXPECT_THROW(cache.append(0, zeros({2, 1, 1, 4}), zeros({2, 1, 1, 4})), ValueError);  // a latent cache
  }
}

TEST(MultiLatentAttention, Bf16ModelTrainsAndGenerates) {
  TransformerConfig c = tiny_mla_gpt();
  c.params_dtype = DType::bf16;
  manual_seed(12);
  GPTModel model(c);
  Generator g(13);
  const Tensor tokens = randint(0, 128, {1, 12}, DType::i64, g);
  Tensor loss = model(tokens, Tensor(), tokens);
  loss.backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_EQ(item.value().grad().dtype(), DType::bf16) << item.key();
    ASSERT_TRUE(std::isfinite(sum(abs(item.value().grad().to(DType::f32))).item<double>())) << item.key();
  }
  model->eval();
  const Tensor full = model(tokens);
  KVCache cache = model->make_kv_cache(1, 12);
  std::vector<Tensor> steps{model->forward_step(tokens.narrow(1, 0, 6), cache)};
  for (int64_t i = 6; i < 12; ++i) steps.push_back(model->forward_step(tokens.narrow(1, i, 1), cache));
  // The absorbed path rounds other products to bf16 than the full forward.
  EXPECT_LT(max_abs_diff(cat(steps, 1), full), 2e-2 * amax(abs(full)).item<double>());
}

TEST(MultiLatentAttention, GreedyGenerationEqualsNoCacheGreedy) {
  TransformerConfig c = tiny_mla_gpt();
  manual_seed(10);
  GPTModel model(c);
  model->eval();
  const std::vector<int64_t> prompt = {5, 17, 99, 3};
  GenerateOptions o;
  o.max_new_tokens = 10;
  o.sampling.temperature = 0;
  const GenerateResult r = generate(*model, {prompt}, o);
  // Greedy without a cache: the whole sequence through the model each step.
  std::vector<int64_t> seq = prompt, want;
  for (int i = 0; i < 10; ++i) {
    const Tensor logits = model(from_vector<int64_t>(seq, {1, static_cast<int64_t>(seq.size())}));
    const auto last = logits.select(1, logits.size(1) - 1).reshape({-1}).to_vector<float>();
    int64_t best = 0;
    for (int64_t v = 1; v < c.vocab_size; ++v)
      if (last[static_cast<size_t>(v)] > last[static_cast<size_t>(best)]) best = v;
    want.push_back(best);
    seq.push_back(best);
  }
  EXPECT_EQ(r.tokens[0], want);
}

TEST(MultiLatentAttention, BadConfigsAreErrors) {
  TransformerConfig c = tiny_mla_gpt();
  c.multi_latent_attention = false;
  c.validate();
  EXPECT_THROW(MultiLatentAttention(c, 1), ValueError);
  c = tiny_mla_gpt();
  c.original_max_position_embeddings = 0;
  EXPECT_THROW(c.validate(), ValueError);
  c = tiny_mla_gpt();
  c.validate();
  MultiLatentAttention m(c, 1);
  EXPECT_THROW(m->forward(zeros({1, 3, 31}), AttentionContext{}), ValueError);
}

}  // namespace
}  // namespace qk::transformer
