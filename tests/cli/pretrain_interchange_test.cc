// The loop between `qk pretrain-gpt` checkpoints and the rest, through the
// binary, for the GPT-2 and the Llama layout: pretrain a tiny model a few
// iterations on text tokenised with a tiny GPT-2 BPE; `qk generate --load`
// that checkpoint gives the library's greedy continuation of the same
// weights; `qk checkpoint export --format hf` writes a folder whose logits in
// the PyTorch reference (tests/fixtures/gen_hf.py) are our model's; and
// `qk pretrain-gpt --load HF` fine-tunes from that folder, its first loss the
// exported weights' loss on the batch as PyTorch computes it. Mismatched
// flags, a tokenizer whose files are gone and NullTokenizer checkpoints too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/run_qk.h"
#include "common/scratch_dir.h"
#include "cli/tiny_gpt2_tokenizer.h"
#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/base/env.h"
#include "qk/base/file_io.h"
#include "qk/nn/safetensors.h"
#include "qk/nn/serialize.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/transformer/generate.h"
#include "qk/transformer/gpt_model.h"
#include "recipes/megatron_args_test_util.h"
#include "transformer/fixture_params.h"

namespace {

namespace fs = std::filesystem;
using qk::Tensor;
using qk::test::Argv;
using qk::test::run_qk;
using qk::test::operator+;

const qk::test::ScratchRoot kScratch("pretrain_interchange");
const std::string kScript = std::string(QK_SOURCE_DIR) + "/tests/fixtures/gen_hf.py";

std::string fresh_dir(const std::string& name) { return kScratch.fresh(name); }

// The reference needs Debian's python3-torch: without it the comparison is
// skipped, except under CI=true, where a missing reference tool is a failure.
bool have_torch() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
  return ok;
}
#define QK_REQUIRE_TORCH()                                                                         \
  if (!have_torch()) {                                                                             \
    if (qk::env::get_raw("CI").value_or("") == "true")                                             \
      FAIL() << "CI=true and /usr/bin/python3 cannot import torch (scripts/setup.sh installs it)"; \
    GTEST_SKIP() << "/usr/bin/python3 with torch not available";                                   \
  }

// One compute thread per process: the models are tiny and ctest runs tests side by side.
qk::test::RunResult qk_one_thread(const std::string& args) { return run_qk(args, "QK_NUM_THREADS=1"); }

// The tiny GPT-2 BPE (300 ids, EOD 299) and docs/llm.md through it, one
// document per paragraph: "--tokenizer-type ... --data-path PREFIX".
struct Corpus {
  std::string tokenizer_dir;
  Argv tokenizer_flags, data_flags;
};
const Corpus& corpus() {
  static const Corpus c = [] {
    Corpus out;
    out.tokenizer_dir = fresh_dir("tok");
    qk::test::write_tiny_gpt2_tokenizer(out.tokenizer_dir);
    out.tokenizer_flags = {"--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", out.tokenizer_dir + "/vocab.json",
                           "--merge-file", out.tokenizer_dir + "/merges.txt"};
    const std::string data = fresh_dir("data");
    const std::string text = qk::read_file(std::string(QK_SOURCE_DIR) + "/docs/llm.md");
    std::string jsonl;
    for (size_t p = 0; p < text.size();) {
      size_t q = text.find("\n\n", p);
      if (q == std::string::npos) q = text.size();
      if (q > p) jsonl += nlohmann::json({{"text", text.substr(p, q - p)}}).dump() + "\n";
      p = q + 2;
    }
    qk::atomic_write_file(data + "/llm.jsonl", jsonl);
    const auto r = run_qk("preprocess --input '" + data + "/llm.jsonl' --output-prefix '" + data + "/llm'" +
                          qk::test::shell_words(out.tokenizer_flags) + " --append-eod --workers 1 -q");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    out.data_flags = {"--data-path", data + "/llm_text_document", "--split", "100,0,0"};
    return out;
  }();
  return c;
}

// Micro-batches of 2, a global batch of 4, no dropout (so the fine-tuning
// loss is a function of the weights and the batch alone).
Argv training(int iters) {
  return {"--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", std::to_string(iters), "--lr",
          "3e-3", "--attention-dropout", "0", "--hidden-dropout", "0", "--log-interval", "1"};
}

struct Layout {
  std::string name;   // config.json's model_type
  Argv model;         // the flags of a tiny model in this layout
  std::string layers_field;
};
void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }
Layout gpt2_layout() {
  return {"gpt2",
          {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
           "--max-position-embeddings", "32", "--openai-gelu"},
          "n_layer"};
}
Layout llama_layout() {
  return {"llama",
          {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--group-query-attention",
           "--num-query-groups", "2", "--ffn-hidden-size", "96", "--seq-length", "32", "--max-position-embeddings",
           "32", "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
           "--disable-bias-linear", "--untie-embeddings-and-output-weights", "--norm-epsilon", "1e-6"},
          "num_hidden_layers"};
}

// What `qk generate` printed: the prompt and its continuation, then the stats line.
struct Generated {
  int exit_code;
  std::string text, stats, output;
};
Generated generate(const std::string& args) {
  const auto r = qk_one_thread("generate " + args);
  Generated g{r.exit_code, "", "", r.output};
  const size_t at = r.output.rfind("\n[qk generate] ");
  if (at != std::string::npos) {
    g.text = r.output.substr(0, at);
    g.stats = r.output.substr(at + 1);
  }
  return g;
}

// The library's side: the model the flags build, with a checkpoint's weights.
struct Library {
  qk::recipes::MegatronArgs args;
  std::unique_ptr<qk::data::Tokenizer> tokenizer;
  qk::transformer::GPTModel model{nullptr};
};
Library library_model(const Argv& flags, const std::string& weights) {
  Library l;
  l.args = qk::recipes::parse_megatron_args(flags, qk::test::options()).args;
  l.tokenizer = qk::recipes::build_tokenizer(l.args);
  l.model = qk::transformer::GPTModel(qk::recipes::gpt_transformer_config(l.args, l.tokenizer->vocab_size()));
  qk::nn::load(*l.model, weights);
  l.model->eval();
  return l;
}

// The first global batch `qk pretrain-gpt` trains on, as one [4, 32] batch.
qk::recipes::GptBatch first_global_batch(const Library& l) {
  const qk::recipes::GptDatasets data = qk::recipes::build_gpt_datasets(l.args, *l.tokenizer);
  qk::recipes::GptBatchIterator it(data.train, 0, 2, 0, 1, qk::recipes::gpt_batch_options(l.args, *l.tokenizer));
  const qk::recipes::GptBatch a = it.next(), b = it.next();
  return {qk::cat({a.tokens, b.tokens}, 0), qk::cat({a.labels, b.labels}, 0), qk::cat({a.loss_mask, b.loss_mask}, 0),
          qk::cat({a.position_ids, b.position_ids}, 0)};
}

// gen_hf.py's logits [B, T, vocab] for the rows of `tokens` from the folder `dir`.
Tensor reference_logits(const std::string& dir, const Tensor& tokens) {
  std::string rows;
  const std::vector<int64_t> ids = tokens.to_vector<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) rows += i % tokens.size(1) == 0 ? "," : " ";
    rows += std::to_string(ids[i]);
  }
  const std::string out = dir + "/reference_logits.safetensors";
  const auto r = qk::test::run_command("/usr/bin/python3 '" + kScript + "' --run '" + dir + "' --tokens '" + rows +
                                       "' --out '" + out + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return qk::nn::load_safetensors(out).tensors.at("logits");
}

// Megatron's lm loss from logits: the mean cross entropy over the tokens the mask keeps.
double masked_cross_entropy(const Tensor& logits, const qk::recipes::GptBatch& b) {
  const std::vector<float> z = logits.contiguous().to_vector<float>(), mask = b.loss_mask.to_vector<float>();
  const std::vector<int64_t> labels = b.labels.to_vector<int64_t>();
  const int64_t vocab = logits.size(2);
  double sum = 0, count = 0;
  for (size_t t = 0; t < labels.size(); ++t) {
    const float* row = z.data() + t * vocab;
    double m = row[0], s = 0;
    for (int64_t v = 0; v < vocab; ++v) m = std::max(m, static_cast<double>(row[v]));
    for (int64_t v = 0; v < vocab; ++v) s += std::exp(row[v] - m);
    sum += mask[t] * (m + std::log(s) - row[labels[t]]);
    count += mask[t];
  }
  return sum / count;
}

double first_train_loss(const std::string& metrics_file) {
  std::ifstream in(metrics_file);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["kind"] == "train") return j["lm loss"].get<double>();
  }
  return std::nan("");
}

class PretrainInterchange : public ::testing::TestWithParam<Layout> {};

TEST_P(PretrainInterchange, GenerateExportAndFineTuneFromAPretrainCheckpoint) {
  const Layout& layout = GetParam();
  const Corpus& c = corpus();
  const Argv run = layout.model + c.tokenizer_flags + c.data_flags;
  const std::string ckpt = fresh_dir(layout.name + "_ckpt"), hf = fresh_dir(layout.name + "_hf"),
                    ft = fresh_dir(layout.name + "_ft");
  auto r = qk_one_thread("pretrain-gpt" +
                         qk::test::shell_words(run + training(4) + Argv{"--save", ckpt, "--save-interval", "4"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Library lib = library_model(run + training(4), ckpt + "/iter_0000000004/model.safetensors");

  // qk generate: the tokenizer from the checkpoint's arguments, EOD stops it;
  // the library's generate on the same weights gives the same tokens, greedy
  // and sampled with the same seed (sampling follows every logit, where an
  // undertrained model's greedy text is mostly one token).
  const std::string prompt = "The model and the data";
  auto library_text = [&](double temperature) {
    std::vector<int32_t> ids = lib.tokenizer->encode(prompt);
    qk::transformer::GenerateOptions o;
    o.max_new_tokens = 24;
    o.sampling = {.temperature = temperature};
    o.seed = 5;
    o.vocab_size = lib.tokenizer->vocab_size();
    o.stop_tokens = {lib.tokenizer->eod()};
    const auto r = qk::transformer::generate(*lib.model, {std::vector<int64_t>(ids.begin(), ids.end())}, o);
    EXPECT_FALSE(r.tokens[0].empty());
    for (int64_t id : r.tokens[0]) ids.push_back(static_cast<int32_t>(id));
    return std::make_pair(lib.tokenizer->decode(ids), r);
  };
  const std::string base = " --prompt '" + prompt + "' --max-new-tokens 24";
  const Generated g = generate("--load '" + ckpt + "'" + base + " --greedy");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  const auto [greedy_text, greedy] = library_text(0);
  EXPECT_EQ(g.text, greedy_text) << g.output;
  EXPECT_NE(g.stats.find(std::to_string(greedy.new_tokens) + " new tokens"), std::string::npos) << g.stats;
  EXPECT_NE(g.stats.find(std::string("stopped by ") + qk::transformer::to_string(greedy.finish[0])),
            std::string::npos);
  EXPECT_EQ(generate("--load '" + ckpt + "/iter_0000000004'" + base + " --greedy").text, g.text);
  const Generated sampled = generate("--load '" + ckpt + "'" + base + " --temperature 1 --seed 5");
  ASSERT_EQ(sampled.exit_code, 0) << sampled.output;
  EXPECT_EQ(sampled.text, library_text(1).first) << sampled.output;

  // qk checkpoint export: Hugging Face names, the vocabulary unpadded (300 of
  // 384 rows), EOD as eos_token_id, the tokenizer files copied.
  r = qk_one_thread("checkpoint export --format hf --load '" + ckpt + "' --out '" + hf + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("exported " + layout.name + " (2 layers, hidden 64, vocabulary 300) from " + ckpt +
                          "/iter_0000000004 (qk pretrain-gpt, iteration 4) as f32"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("tokenizer: vocab.json, merges.txt"), std::string::npos) << r.output;
  const auto config = nlohmann::json::parse(qk::read_file(hf + "/config.json"));
  EXPECT_EQ(config["model_type"], layout.name);
  EXPECT_EQ(config["vocab_size"], 300);
  EXPECT_EQ(config["eos_token_id"], 299);
  EXPECT_EQ(config[layout.layers_field], 2);
  EXPECT_EQ(qk::read_file(hf + "/merges.txt"), qk::read_file(c.tokenizer_dir + "/merges.txt"));
  const auto weights = qk::nn::load_safetensors(hf + "/model.safetensors").tensors;
  const std::string embedding = layout.name == "gpt2" ? "transformer.wte.weight" : "model.embed_tokens.weight";
  ASSERT_TRUE(weights.count(embedding)) << embedding;
  EXPECT_EQ(weights.at(embedding).size(0), 300);

  // The folder in PyTorch: our model's logits (f32), on the first batch of training.
  QK_REQUIRE_TORCH();
  const qk::recipes::GptBatch batch = first_global_batch(lib);
  const Tensor reference = reference_logits(hf, batch.tokens);
  Tensor ours;
  {
    qk::NoGradGuard no_grad;
    ours = lib.model->forward(batch.tokens).narrow(2, 0, 300).contiguous();
  }
  EXPECT_TRUE(qk::test::close_scaled(ours, reference, 1e-5, layout.name + " logits"));

  // qk pretrain-gpt --load HF: the weights of the folder, iteration 0, and
  // the first loss is PyTorch's on that batch (no vocabulary padding here, so
  // the softmax runs over the same 300 ids).
  r = qk_one_thread("pretrain-gpt" + qk::test::shell_words(run + training(1) +
                                          Argv{"--load", hf, "--save", ft, "--save-interval", "1",
                                               "--make-vocab-size-divisible-by", "4"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("> loaded the weights of the Hugging Face folder " + hf + " (" + layout.name +
                          ", f32, vocabulary 300 padded to 300); fine-tuning from them: iteration 0"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(ft + "/iter_0000000001/model.safetensors"));
  const double expected = masked_cross_entropy(reference, batch);
  EXPECT_NEAR(first_train_loss(ft + "/metrics.jsonl"), expected, 2e-5 * expected) << r.output;
}

TEST_P(PretrainInterchange, FlagsThatDoNotBuildTheFolderModelAreRefusedByName) {
  const Layout& layout = GetParam();
  const Corpus& c = corpus();
  const std::string hf = fresh_dir(layout.name + "_refuse");
  // A folder of this layout from a qk export of random weights is all config.json needs.
  const std::string ckpt = fresh_dir(layout.name + "_refuse_ckpt");
  const Argv run = layout.model + c.tokenizer_flags + c.data_flags;
  auto r = qk_one_thread("pretrain-gpt" +
                         qk::test::shell_words(run + training(1) + Argv{"--save", ckpt, "--save-interval", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = qk_one_thread("checkpoint export --load '" + ckpt + "' --out '" + hf + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  r = qk_one_thread(
      "pretrain-gpt" +
      qk::test::shell_words(run + training(1) + Argv{"--num-layers", "3", "--hidden-size", "128", "--load", hf}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("'" + hf + "' is a Hugging Face folder (" + layout.name + ")"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--num-layers 3, but config.json has " + layout.layers_field + " = 2"), std::string::npos)
      << r.output;
  const std::string other = layout.name == "gpt2" ? llama_layout().name : gpt2_layout().name;
  const Argv other_model = layout.name == "gpt2" ? llama_layout().model : gpt2_layout().model;
  r = qk_one_thread("pretrain-gpt" + qk::test::shell_words(other_model + c.tokenizer_flags + c.data_flags +
                                                           training(1) + Argv{"--load", hf}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--position-embedding-type"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model_type = " + layout.name), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Layouts, PretrainInterchange, ::testing::Values(gpt2_layout(), llama_layout()),
                         [](const auto& info) { return info.param.name; });

// The stored tokenizer files moved away: a clear error asking for tokenizer
// flags, which then work; export still writes the model, without a tokenizer.
TEST(PretrainInterchangeTokenizer, VanishedTokenizerFilesAskForFlags) {
  const Corpus& c = corpus();
  const std::string moving = fresh_dir("moving_tok"), ckpt = fresh_dir("moving_ckpt"), hf = fresh_dir("moving_hf");
  qk::test::write_tiny_gpt2_tokenizer(moving);
  const Argv moving_tokenizer = {"--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", moving + "/vocab.json",
                                 "--merge-file", moving + "/merges.txt"};
  auto r =
      qk_one_thread("pretrain-gpt" + qk::test::shell_words(gpt2_layout().model + moving_tokenizer + c.data_flags +
                                                           training(1) + Argv{"--save", ckpt, "--save-interval", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string args = "--load '" + ckpt + "' --prompt 'in the' --greedy --max-new-tokens 8";
  const Generated before = generate(args);
  ASSERT_EQ(before.exit_code, 0) << before.output;

  fs::remove_all(moving);
  const Generated gone = generate(args);
  EXPECT_NE(gone.exit_code, 0);
  EXPECT_NE(gone.output.find("the checkpoint was trained with --tokenizer-type GPT2BPETokenizer --vocab-file '" +
                             moving + "/vocab.json', which no longer exists"),
            std::string::npos)
      << gone.output;
  EXPECT_NE(gone.output.find("give the tokenizer flags"), std::string::npos) << gone.output;
  const Generated flags = generate(args + qk::test::shell_words(c.tokenizer_flags));
  ASSERT_EQ(flags.exit_code, 0) << flags.output;
  EXPECT_EQ(flags.text, before.text);

  r = qk_one_thread("checkpoint export --load '" + ckpt + "' --out '" + hf + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no tokenizer copied: the checkpoint was trained with"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(hf + "/vocab.json"));
}

// Mock data and NullTokenizer: ids in, ids out; EOD (4096) is the stop and eos token.
TEST(PretrainInterchangeTokenizer, NullTokenizerCheckpointsGenerateAndExport) {
  const std::string ckpt = fresh_dir("null_ckpt"), hf = fresh_dir("null_hf");
  auto r = qk_one_thread("pretrain-gpt" + qk::test::shell_words(Argv{"--num-layers", "1", "--hidden-size", "32",
                                                    "--num-attention-heads", "4", "--seq-length", "16",
                                                    "--max-position-embeddings", "16", "--mock-data",
                                                    "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
                                                    "--eval-iters", "1", "--save", ckpt, "--save-interval", "1"} +
                                               training(1)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Generated g = generate("--load '" + ckpt + "' --prompt '1 2 3' --greedy --max-new-tokens 4 --ignore-eos");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_EQ(g.text.rfind("1 2 3 ", 0), 0u) << g.output;
  EXPECT_NE(g.stats.find("4 new tokens"), std::string::npos) << g.stats;
  r = qk_one_thread("checkpoint export --load '" + ckpt + "' --out '" + hf + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("NullTokenizer has no files to copy"), std::string::npos) << r.output;
  const auto config = nlohmann::json::parse(qk::read_file(hf + "/config.json"));
  EXPECT_EQ(config["vocab_size"], 4097);
  EXPECT_EQ(config["eos_token_id"], 4096);
}

}  // namespace
