// `qk generate` and `qk checkpoint export` end to end, on the committed
// Hugging Face fixtures (tests/fixtures/hf/, written by gen_hf.py) with a tiny
// GPT-2 byte-level BPE tokenizer made here.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/run_qk.h"
#include "cli/tiny_gpt2_tokenizer.h"
#include "data/test_util.h"
#include "qk/base/file_io.h"

namespace {

namespace fs = std::filesystem;
using qk::test::run_qk;
using qk::test::TempDir;
using qk::test::write_tiny_gpt2_tokenizer;

const std::string kFixtures = std::string(QK_SOURCE_DIR) + "/tests/fixtures/hf/";

struct Generated {
  int exit_code;
  std::string text;   // the prompt and its continuation
  std::string stats;  // the last line
  std::string output;
};

Generated generate(const std::string& args) {
  const auto r = run_qk("generate " + args);
  Generated g{r.exit_code, "", "", r.output};
  const size_t at = r.output.rfind("\n[qk generate] ");
  if (at != std::string::npos) {
    g.text = r.output.substr(0, at);
    g.stats = r.output.substr(at + 1);
  }
  return g;
}

class GenerateCli : public ::testing::Test {
 protected:
  void SetUp() override { write_tiny_gpt2_tokenizer(tok_.path()); }
  std::string tokenizer_flags() const {
    return "--tokenizer-type GPT2BPETokenizer --vocab-file '" + (tok_ / "vocab.json") + "' --merge-file '" +
           (tok_ / "merges.txt") + "'";
  }
  // A copy of a fixture folder with the tokenizer files beside the weights.
  std::string folder_with_tokenizer(const TempDir& dir, const std::string& fixture) const {
    for (const auto& e : fs::directory_iterator(kFixtures + fixture))
      fs::copy(e.path(), dir / e.path().filename().string());
    write_tiny_gpt2_tokenizer(dir.path());
    return dir.path();
  }
  TempDir tok_{"cli_gen_tok"};
};

TEST_F(GenerateCli, GreedyFromTheHfFixtureIsDeterministic) {
  const std::string base =
      "--load '" + kFixtures + "gpt2_tiny' --prompt 'the cat sat on' --max-new-tokens 20 " + tokenizer_flags();
  const Generated a = generate(base + " --greedy");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.text.rfind("the cat sat on", 0), 0u) << a.output;
  EXPECT_GT(a.text.size(), std::string("the cat sat on").size()) << a.output;
  EXPECT_NE(a.stats.find("20 new tokens"), std::string::npos) << a.stats;
  EXPECT_NE(a.stats.find("tokens/s"), std::string::npos) << a.stats;
  EXPECT_NE(a.stats.find("stopped by length"), std::string::npos) << a.stats;
  EXPECT_EQ(generate(base + " --greedy").text, a.text);
  EXPECT_EQ(generate(base + " --temperature 0").text, a.text);
  EXPECT_EQ(generate(base + " --top-k 1 --temperature 0.7 --seed 9").text, a.text);
}

TEST_F(GenerateCli, SeedsReproduceSampling) {
  const std::string base = "--load '" + kFixtures +
                           "gpt2_tiny' --prompt 'a' --max-new-tokens 24 --top-k 50 --top-p 0.9 " + tokenizer_flags();
  const Generated a = generate(base + " --seed 3");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(generate(base + " --seed 3").text, a.text);
  EXPECT_NE(generate(base + " --seed 4").text, a.text);
}

TEST_F(GenerateCli, UsesTheTokenizerFilesInTheFolder) {
  TempDir dir("cli_gen_folder");
  const std::string folder = folder_with_tokenizer(dir, "gpt2_tiny");
  const Generated with_flags =
      generate("--load '" + kFixtures + "gpt2_tiny' --prompt 'in the' --greedy " + tokenizer_flags());
  const Generated from_folder = generate("--load '" + folder + "' --prompt 'in the' --greedy");
  ASSERT_EQ(from_folder.exit_code, 0) << from_folder.output;
  EXPECT_EQ(from_folder.text, with_flags.text);
  // The sharded bf16 Llama fixture, too; an empty prompt starts from BOS.
  const Generated llama =
      generate("--load '" + kFixtures + "llama_tiny' --prompt '' --max-new-tokens 5 --greedy " + tokenizer_flags());
  ASSERT_EQ(llama.exit_code, 0) << llama.output;
  EXPECT_NE(llama.stats.find("prompt 1 tokens"), std::string::npos) << llama.stats;
}

TEST_F(GenerateCli, BadPathsAndFlagsAreNamed) {
  auto expect_error = [](const Generated& g, const std::string& needle) {
    EXPECT_NE(g.exit_code, 0) << g.output;
    EXPECT_NE(g.output.find(needle), std::string::npos) << g.output;
  };
  const std::string fixture = "--load '" + kFixtures + "gpt2_tiny' --prompt x ";
  expect_error(generate("--load /no/such/model --prompt x"), "--load '/no/such/model' does not exist");
  TempDir empty("cli_gen_empty");
  expect_error(generate("--load '" + empty.path() + "' --prompt x " + tokenizer_flags()),
               "is not a checkpoint qk can load");
  expect_error(generate(fixture), "has no tokenizer files");
  expect_error(generate(fixture + "--vocab-file /no/vocab.json --merge-file /no/merges.txt"), "/no/vocab.json");
  expect_error(generate(fixture + "--top-p 0 " + tokenizer_flags()), "--top-p must be in (0, 1]");
  expect_error(generate(fixture + "--temperature -1 " + tokenizer_flags()), "--temperature");
  expect_error(generate(fixture + "--top_k 5 " + tokenizer_flags()), "--top_k");
  expect_error(generate(fixture + "--dtype f64 " + tokenizer_flags()), "--dtype");
  expect_error(generate("--prompt x"), "--load");

  // A tokenizer with more ids than the model: a prompt using them is refused.
  TempDir big("cli_gen_big_tok");
  write_tiny_gpt2_tokenizer(big.path(), {"z z", "zz z"});  // "zzz" is id 300
  expect_error(generate("--load '" + kFixtures + "gpt2_tiny' --prompt zzz --vocab-file '" + (big / "vocab.json") +
                        "' --merge-file '" + (big / "merges.txt") + "'"),
               "the prompt encodes to token 300, outside the model's vocabulary of 300");

  TempDir broken("cli_gen_broken");
  const std::string folder = folder_with_tokenizer(broken, "gpt2_tiny");
  qk::atomic_write_file(broken / "config.json", "{\"model_type\": \"gpt2\", \"n_embd\": 65, \"n_head\": 4}");
  expect_error(generate("--load '" + folder + "' --prompt x"), "config.json");
  qk::atomic_write_file(broken / "config.json", qk::read_file(kFixtures + "gpt2_tiny/config.json"));
  qk::atomic_write_file(broken / "model.safetensors", "not a safetensors file");
  expect_error(generate("--load '" + folder + "' --prompt x"), "model.safetensors");
}

TEST_F(GenerateCli, CheckpointExportConvertsAndCarriesTheTokenizer) {
  TempDir src("cli_export_src"), f32("cli_export_f32"), bf16("cli_export_bf16");
  const std::string folder = folder_with_tokenizer(src, "llama_tiny");  // bf16, two shards
  auto r = run_qk("checkpoint export --format hf --load '" + folder + "' --out '" + f32.path() + "' --dtype f32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("exported llama (2 layers, hidden 64, vocabulary 300)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tokenizer: vocab.json, merges.txt"), std::string::npos) << r.output;
  const std::string config = qk::read_file(f32 / "config.json");
  EXPECT_NE(config.find("\"torch_dtype\": \"float32\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"eos_token_id\": 2"), std::string::npos) << config;
  EXPECT_TRUE(qk::file_exists(f32 / "model.safetensors"));
  // f32 weights widened from bf16 compute what the bf16 folder computes in f32.
  const Generated from_export = generate("--load '" + f32.path() + "' --prompt 'the end' --greedy");
  ASSERT_EQ(from_export.exit_code, 0) << from_export.output;
  EXPECT_EQ(from_export.text, generate("--load '" + folder + "' --prompt 'the end' --greedy --dtype f32").text);

  r = run_qk("checkpoint export --load '" + f32.path() + "' --out '" + bf16.path() +
             "' --dtype bf16 --max-shard-size 100KB");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(qk::file_exists(bf16 / "model.safetensors.index.json"));
  EXPECT_NE(qk::read_file(bf16 / "model.safetensors.index.json").find("model-00001-of-"), std::string::npos);
  EXPECT_FALSE(qk::file_exists(bf16 / "model.safetensors"));
  // Computing in bf16 (as stored) on both sides.
  const Generated bf16_text = generate("--load '" + bf16.path() + "' --prompt 'the end' --greedy --dtype auto");
  ASSERT_EQ(bf16_text.exit_code, 0) << bf16_text.output;
  EXPECT_EQ(bf16_text.text, generate("--load '" + folder + "' --prompt 'the end' --greedy --dtype auto").text);

  r = run_qk("checkpoint export --format onnx --load '" + folder + "' --out '" + bf16.path() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--format 'onnx' is not supported"), std::string::npos) << r.output;
  r = run_qk("checkpoint export --load '" + folder + "' --out '" + bf16.path() + "' --max-shard-size 5XB");
  EXPECT_NE(r.output.find("--max-shard-size '5XB'"), std::string::npos) << r.output;
  r = run_qk("checkpoint export --load /no/such --out '" + bf16.path() + "'");
  EXPECT_NE(r.output.find("--load '/no/such' does not exist"), std::string::npos) << r.output;
  r = run_qk("checkpoint export --load '" + folder + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--out"), std::string::npos) << r.output;
}

}  // namespace
