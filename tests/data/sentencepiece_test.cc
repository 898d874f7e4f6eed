// SentencePieceTokenizer: models trained here with spm_train, ids compared
// with spm_encode, Megatron's special ids, preprocess end to end.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/reference_tool.h"
#include "data/test_util.h"
#include "tokenizer/sentencepiece.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/data/indexed_dataset.h"
#include "qk/data/preprocess.h"
#include "qk/data/text_gen.h"
#include "qk/data/tokenizer.h"

namespace {
using qk::test::TempDir;

// Runs a shell command; returns its exit status and stdout.
int run(const std::string& cmd, std::string* out = nullptr) {
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return -1;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
    if (out) out->append(buf, n);
  return ::pclose(f);
}

bool have_spm_tools() { return run("command -v spm_train >/dev/null && command -v spm_encode >/dev/null") == 0; }

#define QK_SKIP_WITHOUT_SPM()                                                                  \
  if (!qk::data::sentencepiece_available())                                                    \
    QK_MISSING_REFERENCE_TOOL("qk was built without libsentencepiece; install libsentencepiece-dev " \
                              "(scripts/setup.sh) and reconfigure");                           \
  if (!have_spm_tools())                                                                       \
  QK_MISSING_REFERENCE_TOOL("spm_train/spm_encode not found; install the 'sentencepiece' package " \
                            "(scripts/setup.sh)")

// The training text: varied text with one sentence per line, as spm_train reads it.
std::string training_text() { return qk::data::make_varied_text(160 * 1024, 21); }

// Pieces per trained model. The varied text has thousands of distinct
// characters, so character_coverage is lowered for spm_train to accept it.
constexpr int32_t kPieces = 2000;

// Trains a model into dir/name.model; `extra` are more spm_train flags.
std::string train(const TempDir& dir, const std::string& name, const std::string& extra) {
  const std::string input = dir / "train.txt";
  if (!qk::file_exists(input)) qk::atomic_write_file(input, training_text());
  const std::string prefix = dir / name;
  const std::string cmd = "spm_train --input=" + input + " --model_prefix=" + prefix +
                          " --vocab_size=" + std::to_string(kPieces) +
                          " --character_coverage=0.98 --num_threads=2 --minloglevel=2 " + extra + " > " + prefix +
                          ".log 2>&1";
  EXPECT_EQ(run(cmd), 0) << cmd << "\n" << qk::read_file(prefix + ".log");
  return prefix + ".model";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// Every line's ids from our tokenizer equal spm_encode --output_format=id's.
void expect_ids_equal_spm_encode(const TempDir& dir, const std::string& model, const std::string& text) {
  auto tok = qk::data::load_tokenizer({.type = "SentencePieceTokenizer", .model = model});
  const std::string input = dir / "encode_me.txt";
  qk::atomic_write_file(input, text);
  std::string ref;
  ASSERT_EQ(run("spm_encode --model=" + model + " --output_format=id < " + input, &ref), 0);
  const auto lines = lines_of(text), ref_lines = lines_of(ref);
  ASSERT_EQ(lines.size(), ref_lines.size());
  size_t ids = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<int32_t> want;
    std::istringstream r(ref_lines[i]);
    for (int32_t id; r >> id;) want.push_back(id);
    ASSERT_EQ(tok->encode(lines[i]), want) << "line " << i << ": '" << lines[i] << "'";
    ids += want.size();
  }
  EXPECT_GT(ids, text.size() / 8) << "suspiciously few ids";
}

class SentencePiece : public ::testing::Test {
 protected:
  void SetUp() override { QK_SKIP_WITHOUT_SPM(); }
};

TEST_F(SentencePiece, UnigramIdsEqualSpmEncodeOnVariedText) {
  TempDir dir("spm_unigram");
  const std::string model = train(dir, "uni", "");
  expect_ids_equal_spm_encode(dir, model, qk::data::make_varied_text(96 * 1024, 5));
}

TEST_F(SentencePiece, BpeByteFallbackIdsEqualSpmEncodeOnVariedText) {
  TempDir dir("spm_bpe");
  const std::string model = train(dir, "bpe", "--model_type=bpe --byte_fallback=true --split_digits=true");
  expect_ids_equal_spm_encode(dir, model, qk::data::make_varied_text(96 * 1024, 6));
}

// Without normalization and with byte fallback a model is lossless, so
// decode(encode(t)) == t, newlines and unseen characters included.
TEST_F(SentencePiece, LosslessModelRoundTrips) {
  TempDir dir("spm_roundtrip");
  const std::string model = train(dir, "raw",
                                  "--model_type=bpe --byte_fallback=true --normalization_rule_name=identity "
                                  "--remove_extra_whitespaces=false --allow_whitespace_only_pieces=true");
  auto tok = qk::data::load_tokenizer({.type = "SentencePieceTokenizer", .model = model});
  for (uint64_t seed : {1, 2, 3}) {
    // U+2581 is SentencePiece's own space marker; it decodes to a space.
    const std::string raw = qk::data::make_varied_text(40 * 1024, seed), marker = "\xe2\x96\x81";
    std::string text;
    for (size_t pos = 0;;) {
      const size_t m = raw.find(marker, pos);
      text.append(raw, pos, m == std::string::npos ? std::string::npos : m - pos);
      if (m == std::string::npos) break;
      text += '_';
      pos = m + marker.size();
    }
    const auto ids = tok->encode(text);
    EXPECT_EQ(tok->decode(ids), text) << "seed " << seed;
  }
}

// Note [Megatron SentencePiece ids]: the special ids of a default spm_train
// model (unk 0, bos 1, eos 2, no pad) as Megatron's _SentencePieceTokenizer
// assigns them, and its splitting of special tokens out of the text.
TEST_F(SentencePiece, SpecialIdsFollowMegatron) {
  TempDir dir("spm_special");
  const std::string model = train(dir, "uni", "");
  auto tok = qk::data::load_tokenizer({.type = "SentencePieceTokenizer", .model = model});
  const int32_t n = kPieces;
  EXPECT_EQ(tok->token_to_id("<CLS>"), n);
  EXPECT_EQ(tok->token_to_id("<SEP>"), n + 1);
  EXPECT_EQ(tok->eod(), n + 2);
  EXPECT_EQ(tok->token_to_id("<EOD>"), n + 2);
  EXPECT_EQ(tok->token_to_id("<MASK>"), n + 3);
  EXPECT_EQ(tok->pad(), n + 4);  // pad_id -1: Megatron adds <PAD>
  EXPECT_EQ(tok->token_to_id("<PAD>"), n + 4);
  EXPECT_EQ(tok->bos(), 1);  // the model's <s>
  EXPECT_EQ(tok->token_to_id("</s>"), 2);
  EXPECT_EQ(tok->vocab_size(), n + 5);
  EXPECT_EQ(qk::data::padded_vocab_size(tok->vocab_size(), 128), 2048);

  // Special tokens in the text become their ids; the rest is encoded piecewise.
  const auto plain = [&](const std::string& s) { return tok->encode(s); };
  std::vector<int32_t> want = plain("Hello");
  want.push_back(n + 2);
  for (int32_t id : plain(" world")) want.push_back(id);
  want.push_back(2);
  want.push_back(1);
  EXPECT_EQ(tok->encode("Hello<EOD> world</s><s>"), want);
  // Megatron's detokenize: decode_ids(run) + " " + token + " " per special
  // token, so two in a row are two spaces apart (the empty run between them).
  EXPECT_EQ(tok->decode(want), "Hello <EOD> world </s>  <s> ");
  EXPECT_THROW(tok->decode(std::vector<int32_t>{n + 5}), qk::IndexError);
  EXPECT_THROW(tok->decode(std::vector<int32_t>{-1}), qk::IndexError);
}

TEST_F(SentencePiece, PiecesThatAreSpecialKeepTheirIds) {
  TempDir dir("spm_special2");
  const std::string model = train(dir, "pad", "--pad_id=3 --user_defined_symbols='<EOD>,<SEP>'");
  auto tok = qk::data::load_tokenizer({.type = "SentencePieceTokenizer", .model = model});
  EXPECT_EQ(tok->pad(), 3);                 // <pad>
  EXPECT_EQ(tok->eod(), 4);                 // the user-defined <EOD> piece
  EXPECT_EQ(tok->token_to_id("<SEP>"), 5);  // also a piece
  EXPECT_EQ(tok->token_to_id("<CLS>"), kPieces);
  EXPECT_EQ(tok->token_to_id("<MASK>"), kPieces + 1);
  EXPECT_EQ(tok->vocab_size(), kPieces + 2);
}

TEST_F(SentencePiece, PreprocessEndToEnd) {
  TempDir dir("spm_pre");
  const std::string model = train(dir, "uni", "");
  auto tok = qk::data::load_tokenizer({.type = "SentencePieceTokenizer", .model = model});
  std::string jsonl;
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) {
    texts.push_back(qk::data::make_varied_text(100 + (i * 53) % 700, 100 + i));
    jsonl += nlohmann::json({{"text", texts.back()}}).dump() + "\n";
  }
  qk::atomic_write_file(dir / "in.jsonl", jsonl);
  qk::data::PreprocessOptions o;
  o.input = dir / "in.jsonl";
  o.output_prefix = dir / "out";
  o.append_eod = true;
  o.workers = 2;
  o.batch_bytes = 8192;
  const auto r = qk::data::preprocess(o, *tok, {});
  ASSERT_EQ(r.outputs.size(), 1u);
  qk::data::IndexedDataset ds(r.outputs[0].prefix);
  EXPECT_EQ(ds.dtype(), qk::data::DType::kUint16);
  ASSERT_EQ(ds.num_documents(), texts.size());
  for (size_t k = 0; k < texts.size(); ++k) {
    auto doc = ds.document(k);
    std::vector<int32_t> want = tok->encode(texts[k]);
    want.push_back(kPieces + 2);  // <EOD>
    ASSERT_EQ(std::vector<int32_t>(doc.begin(), doc.end()), want) << "document " << k;
  }
}

TEST(SentencePieceErrors, MissingOrBadModelIsNamed) {
  if (!qk::data::sentencepiece_available()) {
    // Without the library the type itself says how to get it.
    try {
      qk::data::load_tokenizer({.type = "SentencePieceTokenizer", .model = "m.model"});
      FAIL() << "expected an error";
    } catch (const qk::Error& e) {
      EXPECT_NE(std::string(e.what()).find("libsentencepiece"), std::string::npos) << e.what();
    }
    return;
  }
  TempDir dir("spm_bad");
  EXPECT_THROW(qk::data::load_tokenizer({.type = "SentencePieceTokenizer", .model = dir / "none.model"}),
               qk::IoError);
  qk::atomic_write_file(dir / "bad.model", "this is not a model");
  try {
    qk::data::load_tokenizer({.type = "SentencePieceTokenizer", .model = dir / "bad.model"});
    FAIL() << "expected an error";
  } catch (const qk::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.model"), std::string::npos) << e.what();
  }
}

}  // namespace
