// End to end: qk tokenizer train -> qk preprocess -> qk data inspect/samples,
// and qk tokenizer encode/decode, through the `qk` binary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/run_qk.h"
#include "data/test_util.h"
#include "qk/base/file_io.h"

namespace {
using json = nlohmann::json;
using qk::test::run_qk;
using qk::test::TempDir;

// Trains a small tokenizer on a text made by `qk data synth-text`.
std::string train_tokenizer(const TempDir& dir) {
  auto r = run_qk("data synth-text --bytes 40000 --seed 3 > '" + (dir / "corpus.txt") + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_qk("tokenizer train --vocab-size 500 --input '" + (dir / "corpus.txt") + "' --output '" +
             (dir / "tok.json") + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("trained a 500-id byte-level BPE"), std::string::npos) << r.output;
  return "--tokenizer-type HuggingFaceTokenizer --tokenizer-model '" + (dir / "tok.json") + "'";
}

TEST(DataCli, TokenizerEncodeDecodeRoundTrip) {
  TempDir dir("cli_tok");
  const std::string tok = train_tokenizer(dir);
  qk::atomic_write_file(dir / "in.txt", "Hello, wörld! 123\n\tnaïve café 你好");
  auto enc = run_qk("tokenizer encode " + tok + " --json --input '" + (dir / "in.txt") + "'");
  ASSERT_EQ(enc.exit_code, 0) << enc.output;
  auto ids = json::parse(enc.output).get<std::vector<int>>();
  EXPECT_GT(ids.size(), 5u);
  qk::atomic_write_file(dir / "ids.json", enc.output);
  auto dec = run_qk("tokenizer decode " + tok + " --input '" + (dir / "ids.json") + "'");
  ASSERT_EQ(dec.exit_code, 0) << dec.output;
  EXPECT_EQ(dec.output, qk::read_file(dir / "in.txt"));
  qk::atomic_write_file(dir / "bad.txt", "1 x");
  auto bad = run_qk("tokenizer decode " + tok + " < '" + (dir / "bad.txt") + "'");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("'x' is not a token id"), std::string::npos) << bad.output;
  qk::atomic_write_file(dir / "oob.json", "[99999]");
  auto oob = run_qk("tokenizer decode " + tok + " --input '" + (dir / "oob.json") + "'");
  EXPECT_NE(oob.exit_code, 0);
  EXPECT_NE(oob.output.find("outside the vocabulary"), std::string::npos) << oob.output;
}

// Without --tokenizer-type the files say which tokenizer it is: a tokenizer.json,
// or GPT-2's vocab.json + merges.txt (here: the same BPE written both ways).
TEST(DataCli, TokenizerTypeComesFromTheFiles) {
  TempDir dir("cli_tok_type");
  const std::string typed = train_tokenizer(dir);
  const json tok = json::parse(qk::read_file(dir / "tok.json"));
  qk::atomic_write_file(dir / "vocab.json", tok["model"]["vocab"].dump());
  std::string merges = "#version: 0.2\n";
  for (const auto& m : tok["model"]["merges"]) merges += m.get<std::string>() + "\n";
  qk::atomic_write_file(dir / "merges.txt", merges);
  qk::atomic_write_file(dir / "in.txt", "Hello, world! the quick brown fox 123\n");
  const std::string in = " --json --input '" + (dir / "in.txt") + "'";
  auto want = run_qk("tokenizer encode " + typed + in);
  ASSERT_EQ(want.exit_code, 0) << want.output;
  auto hf = run_qk("tokenizer encode --tokenizer-model '" + (dir / "tok.json") + "'" + in);
  EXPECT_EQ(hf.exit_code, 0) << hf.output;
  EXPECT_EQ(hf.output, want.output);
  auto gpt2 = run_qk("tokenizer encode --vocab-file '" + (dir / "vocab.json") + "' --merge-file '" +
                     (dir / "merges.txt") + "'" + in);
  EXPECT_EQ(gpt2.exit_code, 0) << gpt2.output;
  EXPECT_EQ(gpt2.output, want.output);
  auto both = run_qk("tokenizer encode --tokenizer-model '" + (dir / "tok.json") + "' --vocab-file '" +
                     (dir / "vocab.json") + "'" + in);
  EXPECT_EQ(both.exit_code, 1) << both.output;
  EXPECT_NE(both.output.find("name two tokenizers"), std::string::npos) << both.output;
  auto none = run_qk("tokenizer encode" + in);
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_NE(none.output.find("no tokenizer given"), std::string::npos) << none.output;
}

TEST(DataCli, PreprocessInspectAndSamples) {
  TempDir dir("cli_pre");
  const std::string tok = train_tokenizer(dir);
  std::string jsonl;
  std::vector<std::string> texts;
  for (int i = 0; i < 40; ++i) {
    texts.push_back("document " + std::to_string(i) + ": the quick brown fox, " + std::string(i % 7, '!'));
    jsonl += json({{"text", texts.back()}}).dump() + "\n";
  }
  qk::atomic_write_file(dir / "in.jsonl", jsonl);
  auto r = run_qk("preprocess --input '" + (dir / "in.jsonl") + "' --output-prefix '" + (dir / "out/c") +
                  "' " + tok + " --append-eod --workers 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Processed 40 documents"), std::string::npos) << r.output;
  // The last line is "token-count path" for DATA_PATH.
  const std::string prefix = dir / "out/c_text_document";
  const size_t nl = r.output.rfind('\n', r.output.size() - 2);
  const std::string last = r.output.substr(nl + 1);
  const size_t sp = last.find(' ');
  ASSERT_NE(sp, std::string::npos) << r.output;
  EXPECT_EQ(last.substr(sp + 1), prefix + "\n");
  const long tokens = std::stol(last.substr(0, sp));

  auto ins = run_qk("data inspect '" + prefix + "' --json");
  ASSERT_EQ(ins.exit_code, 0) << ins.output;
  json j = json::parse(ins.output);
  EXPECT_EQ(j["num_documents"].get<int>(), 40);
  EXPECT_EQ(j["num_tokens"].get<long>(), tokens);
  EXPECT_EQ(j["dtype"], "uint16");
  auto seqs = j["sequences"].get<std::vector<std::vector<int>>>();
  // Decoding document 5 (minus its EOD) gives the text back.
  std::vector<int> d5(seqs[5].begin(), seqs[5].end() - 1);
  qk::atomic_write_file(dir / "d5.json", json(d5).dump());
  auto dec = run_qk("tokenizer decode " + tok + " --input '" + (dir / "d5.json") + "'");
  EXPECT_EQ(dec.output, texts[5]);

  auto text = run_qk("data inspect '" + prefix + ".idx' " + tok + " --docs 1");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("documents   40"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("document 0"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("the quick brown fox"), std::string::npos) << text.output;

  auto s = run_qk("data samples '" + prefix + "' --seq-length 16 --num-samples 30 --seed 7 --split 90,10 --json");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  json sj = json::parse(s.output);
  EXPECT_EQ(sj["samples"].size(), 30u);
  EXPECT_EQ(sj["samples"][0].size(), 17u);
  auto blend = run_qk("data samples '0.5 " + prefix + " 0.5 " + prefix + "' --seq-length 8 --num-samples 10");
  EXPECT_EQ(blend.exit_code, 0) << blend.output;
  EXPECT_NE(blend.output.find("dataset index"), std::string::npos) << blend.output;
}

TEST(DataCli, BadInputsGiveClearErrors) {
  TempDir dir("cli_bad");
  const std::string tok = train_tokenizer(dir);
  qk::atomic_write_file(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": oops}\n");
  auto r = run_qk("preprocess --input '" + (dir / "bad.jsonl") + "' --output-prefix '" + (dir / "o") + "' " + tok);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("bad.jsonl:2: malformed JSON"), std::string::npos) << r.output;
  r = run_qk("preprocess -q --skip-invalid --input '" + (dir / "bad.jsonl") + "' --output-prefix '" + (dir / "o") +
             "' " + tok);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipping"), std::string::npos) << r.output;

  qk::atomic_write_file(dir / "x.idx", "MMIDIDX");
  qk::atomic_write_file(dir / "x.bin", "");
  r = run_qk("data inspect '" + (dir / "x") + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("x.idx' is truncated"), std::string::npos) << r.output;
  r = run_qk("data samples '" + (dir / "nope") + "' --seq-length 8 --num-samples 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("nope.idx' not found"), std::string::npos) << r.output;
}

TEST(DataCli, Gpt2EncodeMatchesKnownIds) {
  QK_SKIP_WITHOUT_GPT2();
  TempDir dir("cli_gpt2");
  qk::atomic_write_file(dir / "in.txt", "Hello world\n");
  auto r = run_qk("tokenizer encode --tokenizer-type GPT2BPETokenizer --vocab-file '" +
                  qk::test::gpt2_vocab_json() + "' --merge-file '" + qk::test::gpt2_merges_txt() +
                  "' --json < '" + (dir / "in.txt") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "[15496, 995, 198]\n");
}

}  // namespace
