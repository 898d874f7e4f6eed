// Hugging Face interchange: our export read by a plain-PyTorch
// GPT2LMHeadModel / LlamaForCausalLM (tests/fixtures/gen_hf.py) gives our
// logits; the committed HF fixtures import to the script's logits; export ->
// import is bit-identical; what either side cannot represent is refused by name.
#include "qk/transformer/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/reference_tool.h"
#include "common/run_command.h"
#include "data/test_util.h"
#include "qk/autograd/functions.h"
#include "qk/base/file_io.h"
#include "transformer/fixture_params.h"

namespace qk::transformer {
namespace {

using json = nlohmann::json;
using test::TempDir;

const std::string kScript = std::string(QK_SOURCE_DIR) + "/tests/fixtures/gen_hf.py";
std::string fixture_dir(const std::string& name) { return std::string(QK_SOURCE_DIR) + "/tests/fixtures/hf/" + name; }

// The PyTorch reference needs Debian's python3-torch. Without it the test is
// skipped, except under CI=true, where a missing reference tool is a failure.
bool have_torch() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
  return ok;
}
#define QK_REQUIRE_TORCH() \
  if (!have_torch()) QK_MISSING_REFERENCE_TOOL("/usr/bin/python3 with torch (Debian: python3-torch)")

TransformerConfig gpt2_config() {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.ffn_hidden_size = 96;
  c.seq_length = 16;
  c.max_position_embeddings = 32;
  c.vocab_size = 100;  // padded to 128
  c.activation_func = Activation::openai_gelu;
  c.hidden_dropout = 0;
  c.attention_dropout = 0;
  return c;
}

TransformerConfig llama_config() {
  TransformerConfig c = gpt2_config();
  c.position_embedding_type = PositionEmbeddingType::rope;
  c.normalization = Normalization::RMSNorm;
  c.set_swiglu();
  c.num_query_groups = 2;
  c.kv_channels = 24;  // head_dim != hidden / heads
  c.rotary_base = 500;
  c.rotary_seq_len_interpolation_factor = 2.0;  // rope_scaling linear
  c.layernorm_epsilon = 1e-6;
  c.add_bias_linear = false;
  c.share_embeddings_and_output_weights = false;
  return c;
}

// A model whose every parameter is far from its init (norms, biases too).
GPTModel random_model(const TransformerConfig& c, uint64_t seed) {
  manual_seed(seed);
  GPTModel m(c);
  NoGradGuard no_grad;
  Generator g(seed + 1);
  for (Tensor& p : m->parameters()) p.copy_(p + randn(p.shape(), {}, g) * 0.1);
  m->eval();
  return m;
}

Tensor sample_tokens(int64_t vocab, uint64_t seed) {
  Generator g(seed);
  return randint(0, vocab, {2, 12}, DType::i64, g);
}

// gen_hf.py's logits for `tokens` from the folder `dir`.
Tensor reference_logits(const std::string& dir, const Tensor& tokens) {
  std::string rows;
  const std::vector<int64_t> ids = tokens.to_vector<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) rows += i % tokens.size(1) == 0 ? "," : " ";
    rows += std::to_string(ids[i]);
  }
  const std::string out = dir + "/reference_logits.safetensors";
  const auto r = test::run_command("/usr/bin/python3 '" + kScript + "' --run '" + dir + "' --tokens '" + rows +
                                   "' --out '" + out + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nn::load_safetensors(out).tensors.at("logits");
}

Tensor our_logits(GPTModel& m, const Tensor& tokens) {
  NoGradGuard no_grad;
  return m(tokens).narrow(2, 0, m->config().vocab_size).contiguous();
}

void check_export_matches_reference(const TransformerConfig& c, const std::string& name) {
  QK_REQUIRE_TORCH();
  TempDir dir("hf_export_" + name);
  GPTModel m = random_model(c, 41);
  export_hf(*m, dir.path());
  const Tensor tokens = sample_tokens(c.vocab_size, 42);
  EXPECT_TRUE(test::close_scaled(our_logits(m, tokens), reference_logits(dir.path(), tokens), 1e-5, name));
}

TEST(HfExport, Gpt2MatchesTransformersReference) { check_export_matches_reference(gpt2_config(), "gpt2"); }

TEST(HfExport, Gpt2UntiedErfGeluUnscaledAttentionMatchesReference) {
  TransformerConfig c = gpt2_config();
  c.share_embeddings_and_output_weights = false;  // lm_head.weight
  c.activation_func = Activation::gelu;           // "gelu"
  c.softmax_scale = 1.0;                          // scale_attn_weights: false
  c.init_method_std = 0.01;
  check_export_matches_reference(c, "gpt2_untied");
}

TEST(HfExport, LlamaGroupedQueryHeadDimRopeScalingMatchesReference) {
  check_export_matches_reference(llama_config(), "llama");
}

TEST(HfExport, LlamaTiedZeroCenteredGammaMatchesReference) {
  TransformerConfig c = llama_config();
  c.share_embeddings_and_output_weights = true;
  c.layernorm_zero_centered_gamma = true;  // exported as 1 + weight
  c.num_query_groups = 4;
  c.kv_channels = 0;
  c.rotary_seq_len_interpolation_factor.reset();
  check_export_matches_reference(c, "llama_tied");
}

// The committed folders (written by gen_hf.py from random weights) load to the
// script's logits: no Python needed.
void check_fixture(const std::string& name, const std::string& expect_arch) {
  const nn::SafetensorsFile ref =
      nn::load_safetensors(std::string(QK_SOURCE_DIR) + "/tests/fixtures/torch/hf_" + name + ".safetensors");
  HfModel m = load_hf(fixture_dir(name), {.dtype = DType::f32});
  EXPECT_EQ(to_string(m.info.architecture), expect_arch);
  m.model->eval();
  EXPECT_TRUE(test::close_scaled(our_logits(m.model, ref.tensors.at("tokens")), ref.tensors.at("logits"), 1e-5, name));
}

TEST(HfImport, Gpt2HubStyleFixtureMatchesReference) {
  check_fixture("gpt2_tiny", "gpt2");
  // Hub-style names (no "transformer." prefix, attn.bias buffers) and config values.
  HfModel m = load_hf(fixture_dir("gpt2_tiny"));
  EXPECT_EQ(m.config.vocab_size, 300);
  EXPECT_EQ(m.config.padded_vocab_size(), 384);
  EXPECT_EQ(m.config.ffn_hidden_size, 256);  // n_inner null: 4 x n_embd
  EXPECT_EQ(m.config.max_position_embeddings, 64);
  EXPECT_EQ(m.config.activation_func, Activation::openai_gelu);
  EXPECT_TRUE(m.config.share_embeddings_and_output_weights);
  EXPECT_EQ(m.config.params_dtype, DType::f32);
  EXPECT_EQ(m.info.eos_token_ids, std::vector<int64_t>{299});
  EXPECT_EQ(m.info.bos_token_id, 299);
}

TEST(HfImport, ShardedBf16LlamaFixtureMatchesReference) {
  check_fixture("llama_tiny", "llama");
  HfModel m = load_hf(fixture_dir("llama_tiny"));
  EXPECT_EQ(m.config.params_dtype, DType::bf16);  // torch_dtype
  EXPECT_EQ(m.info.torch_dtype, DType::bf16);
  EXPECT_EQ(m.config.num_query_groups, 2);
  EXPECT_FALSE(m.config.share_embeddings_and_output_weights);
  EXPECT_EQ(m.info.eos_token_ids, std::vector<int64_t>{2});
}

// The padding rows Megatron's converter adds: copies of the last real row.
TEST(HfImport, PadsTheVocabularyByRepeatingTheLastRow) {
  HfModel m = load_hf(fixture_dir("gpt2_tiny"), {.make_vocab_size_divisible_by = 64});
  const Tensor w = m.model->embedding->word_embeddings->weight;
  ASSERT_EQ(w.size(0), 320);
  const nn::TensorMap hf = read_hf_weights(fixture_dir("gpt2_tiny"));
  EXPECT_TRUE(test::close_scaled(w.narrow(0, 0, 300), hf.at("wte.weight"), 0, "rows"));
  for (int64_t r = 300; r < 320; ++r)
    EXPECT_TRUE(test::close_scaled(w.select(0, r), hf.at("wte.weight").select(0, 299), 0, "padding row"));
}

TEST(HfImport, KeepsTheDefaultGeneratorState) {
  manual_seed(5);
  const Tensor a = rand({4});
  manual_seed(5);
  load_hf(fixture_dir("gpt2_tiny"));
  EXPECT_TRUE(test::close_scaled(rand({4}), a, 0, "draws after load_hf"));
}

std::map<std::string, std::string> folder_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out[e.path().filename().string()] = read_file(e.path().string());
  return out;
}

// Export -> import gives the same parameters bit for bit (padding rows aside,
// which are Megatron's copies of the last row); a second export writes the
// same bytes. Sharded and single-file.
void check_round_trip(const TransformerConfig& c, int64_t max_shard_bytes) {
  TempDir a("hf_rt_a"), b("hf_rt_b");
  GPTModel m = random_model(c, 43);
  export_hf(*m, a.path(), {.max_shard_bytes = max_shard_bytes, .eos_token_ids = {7, 9}, .bos_token_id = 3});
  EXPECT_EQ(file_exists(a / "model.safetensors.index.json"), max_shard_bytes > 0);
  HfModel back = load_hf(a.path());
  EXPECT_EQ(back.info.eos_token_ids, (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(back.info.bos_token_id, 3);
  const auto ours = m->state_dict(), theirs = back.model->state_dict();
  ASSERT_EQ(ours.keys(), theirs.keys());
  const int64_t v = c.vocab_size;
  for (const auto& item : ours) {
    Tensor x = item.value(), y = theirs[item.key()];
    if (item.key() == "embedding.word_embeddings.weight" || item.key() == "output_layer.weight") {
      x = x.narrow(0, 0, v);
      y = y.narrow(0, 0, v);
    }
    EXPECT_EQ(x.dtype(), y.dtype()) << item.key();
    EXPECT_TRUE(test::close_scaled(y, x, 0, item.key()));
  }
  export_hf(*back.model, b.path(), {.max_shard_bytes = max_shard_bytes, .eos_token_ids = {7, 9}, .bos_token_id = 3});
  const auto fa = folder_bytes(a.path()), fb = folder_bytes(b.path());
  if (max_shard_bytes > 0)
    EXPECT_GT(fa.size(), 3u);  // config, index, two shards or more
  else
    EXPECT_EQ(fa.size(), 2u);  // config, weights
  EXPECT_TRUE(fa == fb) << "the second export differs";
}

TEST(HfRoundTrip, Gpt2IsBitIdentical) { check_round_trip(gpt2_config(), 0); }
TEST(HfRoundTrip, LlamaIsBitIdentical) { check_round_trip(llama_config(), 0); }
TEST(HfRoundTrip, ShardedLlamaIsBitIdentical) { check_round_trip(llama_config(), 200'000); }

TEST(HfRoundTrip, Bf16ExportHoldsTheRoundedWeights) {
  TempDir dir("hf_bf16");
  GPTModel m = random_model(llama_config(), 44);
  export_hf(*m, dir.path(), {.dtype = DType::bf16});
  EXPECT_NE(read_file(dir / "config.json").find("\"torch_dtype\": \"bfloat16\""), std::string::npos);
  HfModel back = load_hf(dir.path());
  EXPECT_EQ(back.config.params_dtype, DType::bf16);
  const Tensor w = back.model->decoder->named_parameters()["layers.1.mlp.linear_fc2.weight"];
  const Tensor want = m->decoder->named_parameters()["layers.1.mlp.linear_fc2.weight"].to(DType::bf16);
  EXPECT_TRUE(test::close_scaled(w, want, 0, "bf16 weight"));
}

// Exporting again over a folder of the other kind leaves no stale weights.
TEST(HfExport, ReplacesStaleWeightFiles) {
  TempDir dir("hf_stale");
  GPTModel m = random_model(llama_config(), 45);
  export_hf(*m, dir.path(), {.max_shard_bytes = 200'000});
  export_hf(*m, dir.path());
  EXPECT_EQ(folder_bytes(dir.path()).size(), 2u);
  export_hf(*m, dir.path(), {.max_shard_bytes = 200'000});
  EXPECT_FALSE(file_exists(dir / "model.safetensors"));
  HfModel back = load_hf(dir.path());
  EXPECT_EQ(back.config.num_layers, 2);
}

TEST(HfImport, LoadsWeightsIntoAnExistingModel) {
  TempDir dir("hf_into");
  GPTModel src = random_model(llama_config(), 46);
  export_hf(*src, dir.path());
  GPTModel dst = random_model(llama_config(), 47);
  load_hf_weights(*dst, dir.path());
  const Tensor tokens = sample_tokens(100, 48);
  EXPECT_TRUE(test::close_scaled(our_logits(dst, tokens), our_logits(src, tokens), 0, "logits"));
  GPTModel other = random_model(gpt2_config(), 49);
  EXPECT_THROW(load_hf_weights(*other, dir.path()), ValueError);  // a llama folder into a GPT-2 model
}

// ---- what the layouts cannot hold ----

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

std::string llama_json(const std::function<void(json&)>& edit) {
  json j = json::parse(read_file(fixture_dir("llama_tiny") + "/config.json"));
  edit(j);
  return j.dump();
}

void expect_config_error(const std::function<void(json&)>& edit, const std::string& needle) {
  const std::string msg = error_of([&] { parse_hf_config(llama_json(edit), "x/config.json"); });
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  EXPECT_NE(msg.find("x/config.json"), std::string::npos) << msg;
}

TEST(HfConfig, RefusesWhatTheModelCannotRepresent) {
  expect_config_error(
      [](json& j) {
        j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
      },
      "rope_scaling type 'llama3'");
  expect_config_error([](json& j) { j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}}; }, "'dynamic'");
  expect_config_error([](json& j) { j["attention_bias"] = true; }, "'attention_bias'");
  expect_config_error([](json& j) { j["mlp_bias"] = true; }, "'mlp_bias'");
  expect_config_error([](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act 'gelu'");
  expect_config_error([](json& j) { j["model_type"] = "mistral"; }, "model_type 'mistral'");
  expect_config_error([](json& j) { j["quantization_config"] = {{"bits", 4}}; }, "quantization_config");
  expect_config_error([](json& j) { j["torch_dtype"] = "float64"; }, "torch_dtype 'float64'");
  expect_config_error([](json& j) { j["num_key_value_heads"] = 3; }, "num_query_groups");
  expect_config_error([](json& j) { j["hidden_size"] = "64"; }, "'hidden_size' must be an integer");
  const std::string gpt2 = read_file(fixture_dir("gpt2_tiny") + "/config.json");
  for (const auto& [key, value, needle] : std::vector<std::tuple<std::string, json, std::string>>{
           {"activation_function", "quick_gelu", "activation_function 'quick_gelu'"},
           {"scale_attn_by_inverse_layer_idx", true, "'scale_attn_by_inverse_layer_idx'"},
           {"add_cross_attention", true, "'add_cross_attention'"}}) {
    json j = json::parse(gpt2);
    j[key] = value;
    const std::string msg = error_of([&] { parse_hf_config(j.dump(), "g/config.json"); });
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
  EXPECT_NE(error_of([] { parse_hf_config("{not json", "c.json"); }).find("c.json: not valid JSON"), std::string::npos);
}

TEST(HfConfig, ReadsTransformersDefaultsAndIdLists) {
  // Only model_type: GPT2Config's defaults (GPT-2 small).
  HfConfig g = parse_hf_config(R"({"model_type": "gpt2"})", "c.json");
  EXPECT_EQ(g.config.vocab_size, 50257);
  EXPECT_EQ(g.config.padded_vocab_size(), 50304);
  EXPECT_EQ(g.config.hidden_size, 768);
  EXPECT_EQ(g.config.num_layers, 12);
  EXPECT_EQ(g.config.ffn_hidden_size, 3072);
  EXPECT_EQ(g.config.max_position_embeddings, 1024);
  EXPECT_EQ(g.config.seq_length, 1024);
  EXPECT_TRUE(g.info.eos_token_ids.empty());
  // architectures alone decide too; eos lists (Llama 3) and rope_scaling linear.
  HfConfig l = parse_hf_config(
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96,
          "num_hidden_layers": 1, "vocab_size": 10, "eos_token_id": [5, 8], "bos_token_id": null,
          "rope_scaling": {"type": "linear", "factor": 4.0}, "torch_dtype": "float16"})",
      "c.json", {.dtype = DType::f32, .make_vocab_size_divisible_by = 8, .seq_length = 64});
  EXPECT_EQ(l.info.architecture, HfArchitecture::llama);
  EXPECT_EQ(l.info.eos_token_ids, (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(l.info.bos_token_id, -1);
  EXPECT_EQ(l.info.torch_dtype, DType::f16);
  EXPECT_EQ(l.config.params_dtype, DType::f32);
  EXPECT_EQ(l.config.num_query_groups, 4);
  EXPECT_EQ(l.config.max_position_embeddings, 2048);
  EXPECT_EQ(l.config.seq_length, 64);
  EXPECT_EQ(l.config.padded_vocab_size(), 16);
  EXPECT_EQ(l.config.rotary_seq_len_interpolation_factor.value_or(0), 4.0);
}

TEST(HfExport, RefusesWhatTheLayoutsCannotHold) {
  auto msg = [](const std::function<void(TransformerConfig&)>& edit, bool llama) {
    TransformerConfig c = llama ? llama_config() : gpt2_config();
    edit(c);
    return error_of([&] { hf_config_json(c); });
  };
  EXPECT_NE(msg([](TransformerConfig& c) { c.qk_layernorm = true; }, true).find("qk_layernorm"), std::string::npos);
  EXPECT_NE(msg([](TransformerConfig& c) { c.rotary_percent = 0.5; }, true).find("rotary_percent"), std::string::npos);
  EXPECT_NE(msg([](TransformerConfig& c) { c.normalization = Normalization::LayerNorm; }, true).find("RMSNorm"),
            std::string::npos);
  EXPECT_NE(msg([](TransformerConfig& c) { c.add_qkv_bias = true; }, true).find("add_qkv_bias"), std::string::npos);
  EXPECT_NE(msg([](TransformerConfig& c) { c.num_query_groups = 2; }, false).find("num_query_groups"),
            std::string::npos);
  EXPECT_NE(msg([](TransformerConfig& c) { c.activation_func = Activation::squared_relu; }, false).find("squared_relu"),
            std::string::npos);
  EXPECT_NE(msg([](TransformerConfig& c) { c.position_embedding_type = PositionEmbeddingType::none; }, false)
                .find("position_embedding_type none"),
            std::string::npos);
  EXPECT_NE(msg([](TransformerConfig& c) { c.softmax_scale = 0.5; }, false).find("softmax_scale"), std::string::npos);
}

// ---- broken folders ----

TEST(HfImport, BrokenFoldersAreClearErrors) {
  TempDir dir("hf_bad");
  EXPECT_NE(error_of([&] { load_hf(dir / "nope"); }).find("is not a folder"), std::string::npos);
  EXPECT_NE(error_of([&] { load_hf(dir.path()); }).find("has no config.json"), std::string::npos);
  const std::string cfg = read_file(fixture_dir("llama_tiny") + "/config.json");
  atomic_write_file(dir / "config.json", cfg);
  EXPECT_NE(error_of([&] { load_hf(dir.path()); }).find("neither model.safetensors nor"), std::string::npos);
  atomic_write_file(dir / "pytorch_model.bin", "x");
  EXPECT_NE(error_of([&] { load_hf(dir.path()); }).find("pytorch_model.bin"), std::string::npos);

  // The sharded fixture, then one fault at a time.
  nn::TensorMap hf = read_hf_weights(fixture_dir("llama_tiny"));
  auto write_index = [&](const json& weight_map) {
    atomic_write_file(dir / "model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
  };
  nn::save_safetensors(dir / "model-00001-of-00001.safetensors", hf);
  json map;
  for (const auto& [name, t] : hf) map[name] = "model-00001-of-00001.safetensors";
  write_index(map);
  EXPECT_EQ(load_hf(dir.path()).config.num_layers, 2);
  json missing_file = map;
  missing_file["lm_head.weight"] = "model-00002-of-00002.safetensors";
  write_index(missing_file);
  EXPECT_NE(error_of([&] { load_hf(dir.path()); }).find("lists 'model-00002-of-00002.safetensors', which is missing"),
            std::string::npos);
  json outside = map;
  outside["lm_head.weight"] = "../model-00001-of-00001.safetensors";
  write_index(outside);
  EXPECT_NE(error_of([&] { load_hf(dir.path()); }).find("is not a file name in the folder"), std::string::npos);
  json phantom = map;
  phantom["model.layers.9.mlp.up_proj.weight"] = "model-00001-of-00001.safetensors";
  write_index(phantom);
  EXPECT_NE(error_of([&] { load_hf(dir.path()); }).find("'model.layers.9.mlp.up_proj.weight'"), std::string::npos);

  // Single files: a missing, a mis-shaped and an unexpected tensor.
  std::filesystem::remove(dir / "model.safetensors.index.json");
  auto with = [&](const std::function<void(nn::TensorMap&)>& edit) {
    nn::TensorMap t = hf;
    edit(t);
    nn::save_safetensors(dir / "model.safetensors", t);
    return error_of([&] { load_hf(dir.path()); });
  };
  EXPECT_NE(with([](nn::TensorMap& t) {
              t.erase("model.layers.1.self_attn.k_proj.weight");
            }).find("'model.layers.1.self_attn.k_proj.weight' is missing"),
            std::string::npos);
  EXPECT_NE(with([](nn::TensorMap& t) { t["model.norm.weight"] = zeros({63}); }).find("has shape [63]"),
            std::string::npos);
  EXPECT_NE(with([](nn::TensorMap& t) {
              t["model.layers.0.self_attn.q_proj.bias"] = zeros({64});
            }).find("'model.layers.0.self_attn.q_proj.bias'"),
            std::string::npos);
  EXPECT_NE(with([](nn::TensorMap& t) { t.erase("lm_head.weight"); }).find("tie_word_embeddings is false"),
            std::string::npos);
}

}  // namespace
}  // namespace qk::transformer
