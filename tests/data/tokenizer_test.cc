#include "qk/data/tokenizer.h"

#include <gtest/gtest.h>

#include <thread>

#include "data/test_util.h"
#include "tokenizer/pretokenize.h"
#include "qk/base/error.h"
#include "qk/data/text_gen.h"

namespace {
using qk::data::SplitPattern;

std::vector<std::string> split(SplitPattern p, std::string_view text) {
  std::vector<std::pair<size_t, size_t>> pieces;
  qk::data::split_pieces(p, text, pieces);
  std::vector<std::string> out;
  for (auto [o, n] : pieces) out.emplace_back(text.substr(o, n));
  return out;
}

using V = std::vector<std::string>;

TEST(PreTokenizer, Gpt2PatternSplitsLikeTheRegex) {
  EXPECT_EQ(split(SplitPattern::kGpt2, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split(SplitPattern::kGpt2, "I'm here's 'ok"), (V{"I", "'m", " here", "'s", " '", "ok"}));
  EXPECT_EQ(split(SplitPattern::kGpt2, "a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(split(SplitPattern::kGpt2, "a \n\n b  "), (V{"a", " \n\n", " b", "  "}));
  EXPECT_EQ(split(SplitPattern::kGpt2, "x123 4.5!!"), (V{"x", "123", " 4", ".", "5", "!!"}));
  EXPECT_EQ(split(SplitPattern::kGpt2, "你好，世界"), (V{"你好", "，", "世界"}));
  EXPECT_EQ(split(SplitPattern::kGpt2, "\n"), (V{"\n"}));
  EXPECT_TRUE(split(SplitPattern::kGpt2, "").empty());
}

TEST(PreTokenizer, Llama3PatternSplitsLikeTheRegex) {
  EXPECT_EQ(split(SplitPattern::kLlama3, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split(SplitPattern::kLlama3, "I'M 12345"), (V{"I", "'M", " ", "123", "45"}));
  EXPECT_EQ(split(SplitPattern::kLlama3, "a  \n\n  b"), (V{"a", "  \n\n", " ", " b"}));
  EXPECT_EQ(split(SplitPattern::kLlama3, "(x) ...\n\nok"), (V{"(x", ")", " ...\n\n", "ok"}));
}

TEST(PreTokenizer, PiecesCoverArbitraryBytes) {
  std::string text = qk::data::make_varied_text(64 * 1024, 3);
  text += "\xff\xfe\xc3";  // invalid UTF-8 is split, never rejected
  for (auto p : {SplitPattern::kGpt2, SplitPattern::kLlama3}) {
    std::string joined;
    for (const auto& s : split(p, text)) joined += s;
    EXPECT_EQ(joined, text);
  }
}

TEST(PreTokenizer, UnknownRegexIsRejectedWithThePattern) {
  try {
    qk::data::split_pattern_from_regex("\\w+");
    FAIL();
  } catch (const qk::ValueError& e) {
    EXPECT_NE(e.message().find("\\w+"), std::string::npos);
  }
}

std::unique_ptr<qk::data::Tokenizer> gpt2() {
  return qk::data::load_tokenizer({.type = "GPT2BPETokenizer",
                                   .vocab_file = qk::test::gpt2_vocab_json(),
                                   .merge_file = qk::test::gpt2_merges_txt()});
}

TEST(Gpt2Tokenizer, KnownIds) {
  QK_SKIP_WITHOUT_GPT2();
  auto tok = gpt2();
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->eod(), 50256);
  EXPECT_EQ(tok->encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok->encode(" \n\n"), (std::vector<int32_t>{220, 628}));
  // Megatron's GPT2BPETokenizer reads special-token text as text.
  EXPECT_EQ(tok->encode("<|endoftext|>"), (std::vector<int32_t>{27, 91, 437, 1659, 5239, 91, 29}));
  EXPECT_EQ(tok->token_to_id("<|endoftext|>"), 50256);
  EXPECT_EQ(tok->decode(std::vector<int32_t>{15496, 995, 50256}), "Hello world<|endoftext|>");
  EXPECT_THROW(tok->decode(std::vector<int32_t>{50257}), qk::IndexError);
}

TEST(Gpt2Tokenizer, RoundTripsVariedTextAndIsThreadSafe) {
  QK_SKIP_WITHOUT_GPT2();
  auto tok = gpt2();
  const std::string text = qk::data::make_varied_text(200 * 1024, 11);
  const auto ids = tok->encode(text);
  EXPECT_EQ(tok->decode(ids), text);
  std::vector<std::vector<int32_t>> got(3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) threads.emplace_back([&, t] { got[t] = tok->encode(text); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, ids);
}

TEST(Tokenizer, PaddedVocabSizeFollowsMegatron) {
  EXPECT_EQ(qk::data::padded_vocab_size(50257, 128, 1), 50304);
  EXPECT_EQ(qk::data::padded_vocab_size(50257, 128, 8), 51200);
  EXPECT_EQ(qk::data::padded_vocab_size(128256, 128, 1), 128256);
  EXPECT_THROW(qk::data::padded_vocab_size(10, 0, 1), qk::ValueError);
}

TEST(Tokenizer, BadFilesGiveClearErrors) {
  qk::test::TempDir dir("tok_bad");
  auto expect_error = [](const qk::data::TokenizerOptions& o, const std::string& needle) {
    try {
      qk::data::load_tokenizer(o);
      ADD_FAILURE() << "expected an error with '" << needle << "'";
    } catch (const qk::Error& e) {
      EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    }
  };
  expect_error({.type = "Foo"}, "unknown tokenizer type 'Foo'");
  expect_error({.type = "HuggingFaceTokenizer", .model = dir / "none.json"}, "not found");
  qk::atomic_write_file(dir / "bad.json", "{\"model\": ");
  expect_error({.type = "HuggingFaceTokenizer", .model = dir / "bad.json"}, "not valid JSON");
  qk::atomic_write_file(dir / "wp.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  expect_error({.type = "HuggingFaceTokenizer", .model = dir / "wp.json"}, "WordPiece");
  qk::atomic_write_file(dir / "nobytes.json",
                        R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                            "pre_tokenizer": {"type": "ByteLevel"}})");
  expect_error({.type = "HuggingFaceTokenizer", .model = dir / "nobytes.json"}, "byte 0x00");
  expect_error({.type = "GPT2BPETokenizer", .vocab_file = dir / "v.json"}, "--merge-file");
}

// Every field of a tokenizer.json read with the wrong JSON type is a ValueError
// naming the file and the field (it used to escape as nlohmann's type_error:
// fuzz/corpus/tokenizer_json_fuzz/seed4).
TEST(Tokenizer, WrongJsonTypesNameTheFileAndField) {
  qk::test::TempDir dir("tok_types");
  const std::string pre = R"("pre_tokenizer": {"type": "ByteLevel"})";
  struct Case {
    std::string json, field, expected;
  };
  const std::vector<Case> cases = {
      {R"({"model": {"type": false, "vocab": {}, "merges": []}})", "model.type", "expected a string, got boolean"},
      {R"({"model": {"type": "BPE", "byte_fallback": "no", "vocab": {}}})", "model.byte_fallback",
       "expected true or false, got string"},
      {R"({"model": {"vocab": []}})", "model.vocab", "expected an object"},
      {R"({"model": {"vocab": {"a": "1"}}})", "model.vocab[\"a\"]", "expected an integer, got string"},
      {R"({"model": {"vocab": {"a": -3}}})", "model.vocab[\"a\"]", "-3 is not a token id"},
      {R"({"model": {"vocab": {"a": 1e3}}})", "model.vocab[\"a\"]", "expected an integer, got number"},
      {R"({"model": {"vocab": {}, "merges": {"a": "b"}}})", "model.merges", "expected an array, got object"},
      {R"({"model": {"vocab": {}, "merges": [["a", 2]]}})", "model.merges[0][1]", "expected a string, got number"},
      {R"({"model": {"vocab": {}, "merges": [7]}})", "model.merges[0]", "expected \"a b\""},
      {R"({"model": {"vocab": {}, "ignore_merges": 1}, )" + pre + "}", "model.ignore_merges",
       "expected true or false, got number"},
      {R"({"model": {"vocab": {}}, "pre_tokenizer": []})", "pre_tokenizer", "expected an object, got array"},
      {R"({"model": {"vocab": {}}, "pre_tokenizer": {"type": 3}})", "pre_tokenizer.type", "expected a string"},
      {R"({"model": {"vocab": {}}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": "yes"}})",
       "pre_tokenizer.use_regex", "expected true or false"},
      {R"({"model": {"vocab": {}}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split",
          "pattern": {"Regex": 5}}, {"type": "ByteLevel"}]}})",
       "pre_tokenizer.pretokenizers[0].pattern.Regex", "expected a string, got number"},
      {R"({"model": {"vocab": {}}, )" + pre + R"(, "added_tokens": [{"id": "5", "content": "x"}]})",
       "added_tokens[0].id", "expected an integer, got string"},
      {R"({"model": {"vocab": {}}, )" + pre + R"(, "added_tokens": [{"id": 5}]})", "added_tokens[0]",
       "has no \"content\""},
      {R"({"model": {"vocab": {}}, )" + pre + R"(, "added_tokens": {}})", "added_tokens", "expected an array"},
      {R"({"model": {"vocab": {}}, )" + pre + R"(, "post_processor": {"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": "<s>"}}], "special_tokens": {"<s>": {"ids": ["1"]}}}})",
       "post_processor.special_tokens.<s>.ids[0]", "expected an integer, got string"},
      {R"({"model": {"vocab": {}}, )" + pre + R"(, "post_processor": {"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": "<s>"}}]}})",
       "post_processor", "has no \"special_tokens\""},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string file = dir / ("t" + std::to_string(i) + ".json");
    qk::atomic_write_file(file, cases[i].json);
    try {
      qk::data::load_tokenizer({.type = "HuggingFaceTokenizer", .model = file});
      ADD_FAILURE() << cases[i].json << ": loaded";
    } catch (const qk::ValueError& e) {
      EXPECT_NE(e.message().find(file + ": " + cases[i].field), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(cases[i].expected), std::string::npos) << e.message();
    }
  }
  // tokenizer_config.json next to it: its tokens are strings or {"content": ...}.
  qk::test::TempDir cfg_dir("tok_types_cfg");
  qk::atomic_write_file(cfg_dir / "tokenizer_config.json", R"({"eos_token": 7})");
  qk::atomic_write_file(cfg_dir / "tokenizer.json", R"({"model": {"vocab": {}}, )" + pre + "}");
  try {
    qk::data::load_tokenizer({.type = "HuggingFaceTokenizer", .model = cfg_dir.path()});
    ADD_FAILURE() << "loaded";
  } catch (const qk::ValueError& e) {
    EXPECT_NE(e.message().find(cfg_dir / "tokenizer_config.json: eos_token: expected a string"),
              std::string::npos)
        << e.message();
  }
  // GPT-2's vocab.json: ids are integers.
  qk::atomic_write_file(dir / "vocab.json", R"({"a": true})");
  qk::atomic_write_file(dir / "merges.txt", "");
  try {
    qk::data::load_tokenizer({.type = "GPT2BPETokenizer", .vocab_file = dir / "vocab.json",
                              .merge_file = dir / "merges.txt"});
    ADD_FAILURE() << "loaded";
  } catch (const qk::ValueError& e) {
    EXPECT_NE(e.message().find(dir / "vocab.json: [\"a\"]: expected an integer, got boolean"), std::string::npos)
        << e.message();
  }
}

}  // namespace

namespace {

// Megatron's NullTokenizer: ids separated by spaces, V + 1 ids, eod = V.
TEST(NullTokenizer, IdsInIdsOutWithEodLast) {
  auto tok = qk::data::load_tokenizer({.type = "NullTokenizer", .vocab_size = 100});
  EXPECT_EQ(tok->vocab_size(), 101);
  EXPECT_EQ(tok->eod(), 100);
  EXPECT_EQ(tok->encode("5 0 99 100"), (std::vector<int32_t>{5, 0, 99, 100}));
  const std::vector<int32_t> ids = {7, 8, 100};
  EXPECT_EQ(tok->decode(ids), "7 8 100");
  EXPECT_THROW(tok->encode("5 x"), qk::ValueError);
  EXPECT_THROW(tok->encode("101"), qk::ValueError);
  EXPECT_THROW(qk::data::load_tokenizer({.type = "NullTokenizer"}), qk::ValueError);  // no --vocab-size
}

}  // namespace
