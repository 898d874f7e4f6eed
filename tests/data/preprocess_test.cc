#include "qk/data/preprocess.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/test_util.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/data/bpe_trainer.h"
#include "qk/data/indexed_dataset.h"
#include "qk/data/text_gen.h"

namespace {
using json = nlohmann::json;
using qk::test::TempDir;

// A small trained tokenizer, so these tests need no downloaded vocabulary.
std::unique_ptr<qk::data::Tokenizer> small_tokenizer(const TempDir& dir) {
  qk::data::BpeTrainer t({.vocab_size = 600});
  t.add_text(qk::data::make_varied_text(64 * 1024, 9));
  qk::atomic_write_file(dir / "tokenizer.json", t.train_json());
  return qk::data::load_tokenizer({.type = "HuggingFaceTokenizer", .model = dir / "tokenizer.json"});
}

std::vector<std::string> write_jsonl(const std::string& path, size_t n) {
  std::vector<std::string> texts;
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    std::string t = i % 17 == 3 ? "" : qk::data::make_varied_text(50 + (i * 37) % 900, i);
    texts.push_back(t);
    out += json({{"id", i}, {"text", t}}).dump() + "\n";
  }
  qk::atomic_write_file(path, out);
  return texts;
}

TEST(Preprocess, JsonlRoundTripsAndDoesNotDependOnWorkers) {
  TempDir dir("pre_jsonl");
  auto tok = small_tokenizer(dir);
  const auto texts = write_jsonl(dir / "in.jsonl", 300);
  std::vector<std::string> bins;
  for (int workers : {1, 3}) {
    qk::data::PreprocessOptions o;
    o.input = dir / "in.jsonl";
    o.output_prefix = dir / ("w" + std::to_string(workers));
    o.append_eod = true;
    o.workers = workers;
    o.batch_bytes = 4096;  // many batches, so ordering is exercised
    int calls = 0;
    auto r = qk::data::preprocess(o, *tok, [&](const qk::data::PreprocessProgress&) { ++calls; });
    EXPECT_GE(calls, 1);
    ASSERT_EQ(r.outputs.size(), 1u);
    EXPECT_EQ(r.documents, 300);
    EXPECT_TRUE(r.outputs[0].prefix.ends_with("_text_document"));
    qk::data::IndexedDataset ds(r.outputs[0].prefix);
    EXPECT_EQ(ds.num_documents(), 300u);
    EXPECT_EQ(ds.num_tokens(), r.outputs[0].tokens);
    EXPECT_EQ(ds.dtype(), qk::data::DType::kUint16);
    for (size_t k = 0; k < texts.size(); ++k) {
      auto doc = ds.document(k);
      if (texts[k].empty()) {
        EXPECT_TRUE(doc.empty());  // Megatron: an empty document, no EOD
        continue;
      }
      ASSERT_FALSE(doc.empty());
      EXPECT_EQ(doc.back(), tok->eod());
      std::vector<int32_t> ids(doc.begin(), doc.end() - 1);
      EXPECT_EQ(tok->decode(ids), texts[k]) << "document " << k;
    }
    bins.push_back(qk::read_file(r.outputs[0].prefix + ".bin") + qk::read_file(r.outputs[0].prefix + ".idx"));
  }
  EXPECT_EQ(bins[0], bins[1]);
}

TEST(Preprocess, SentenceListsAndSeveralKeys) {
  TempDir dir("pre_keys");
  auto tok = small_tokenizer(dir);
  qk::atomic_write_file(dir / "in.jsonl",
                        "{\"text\": [\"one.\", \"\", \"two three.\"], \"title\": \"T\"}\n"
                        "\n"  // blank lines are skipped
                        "{\"text\": \"four\", \"title\": \"U\"}");  // no final newline
  qk::data::PreprocessOptions o;
  o.input = dir / "in.jsonl";
  o.output_prefix = dir / "out";
  o.json_keys = {"text", "title"};
  o.append_eod = true;
  auto r = qk::data::preprocess(o, *tok, nullptr);
  ASSERT_EQ(r.outputs.size(), 2u);
  qk::data::IndexedDataset text(r.outputs[0].prefix), title(r.outputs[1].prefix);
  EXPECT_EQ(text.num_documents(), 2u);
  EXPECT_EQ(text.num_sequences(), 3u);  // the empty sentence is dropped
  const int32_t l0 = static_cast<int32_t>(tok->encode("one.").size());
  const int32_t l1 = static_cast<int32_t>(tok->encode("two three.").size()) + 1;  // + EOD
  EXPECT_EQ(text.sequence_length(0), l0);
  EXPECT_EQ(text.sequence_length(1), l1);
  EXPECT_EQ(title.num_documents(), 2u);
}

void expect_fails(const TempDir& dir, const qk::data::Tokenizer& tok, const std::string& content,
                  const std::string& needle, int64_t skipped_when_skipping) {
  qk::atomic_write_file(dir / "bad.jsonl", content);
  std::remove((dir / "bad_text_document.idx").c_str());
  std::remove((dir / "bad_text_document.bin").c_str());
  qk::data::PreprocessOptions o;
  o.input = dir / "bad.jsonl";
  o.output_prefix = dir / "bad";
  o.workers = 2;
  try {
    qk::data::preprocess(o, tok, nullptr);
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const qk::ValueError& e) {
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("--skip-invalid"), std::string::npos) << e.message();
  }
  EXPECT_FALSE(qk::file_exists(dir / "bad_text_document.idx"));
  o.skip_invalid = true;
  auto r = qk::data::preprocess(o, tok, nullptr);
  EXPECT_EQ(r.skipped, skipped_when_skipping);
  EXPECT_EQ(r.documents, 1);
}

TEST(Preprocess, BadLinesNameTheLineAndCanBeSkipped) {
  TempDir dir("pre_bad");
  auto tok = small_tokenizer(dir);
  const std::string ok = "{\"text\": \"fine\"}\n";
  expect_fails(dir, *tok, ok + "{\"text\": \"unterminated\n", "bad.jsonl:2: malformed JSON", 1);
  expect_fails(dir, *tok, "[1, 2]\n" + ok, "bad.jsonl:1: expected a JSON object", 1);
  expect_fails(dir, *tok, ok + "\n{\"body\": \"x\"}\n", "bad.jsonl:3: missing key 'text'", 1);
  expect_fails(dir, *tok, ok + "{\"text\": 5}\n", "bad.jsonl:2: key 'text' is not a string", 1);
  expect_fails(dir, *tok, ok + "{\"text\": \"bad \xff\xfe utf8\"}\n", "bad.jsonl:2: malformed JSON", 1);
}

TEST(Preprocess, FolderOfTextFilesGivesOneDatasetPerFile) {
  TempDir dir("pre_folder");
  auto tok = small_tokenizer(dir);
  qk::make_dirs(dir / "raw");
  const std::string a = "first line\nsecond line\n\nlast line without newline";
  const std::string b = qk::data::make_varied_text(20000, 4);
  qk::atomic_write_file(dir / "raw/data_a.txt", a);
  qk::atomic_write_file(dir / "raw/data_b.txt", b);
  qk::atomic_write_file(dir / "raw/notes.md", "ignored");
  qk::data::PreprocessOptions o;
  o.input = dir / "raw";
  o.output_prefix = dir / "out/data";
  o.append_eod = true;
  o.workers = 2;
  o.batch_bytes = 1000;
  auto r = qk::data::preprocess(o, *tok, nullptr);
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_TRUE(r.outputs[0].prefix.ends_with("out/data_data_a.txt_document")) << r.outputs[0].prefix;
  const std::string* texts[] = {&a, &b};
  for (size_t f = 0; f < 2; ++f) {
    qk::data::IndexedDataset ds(r.outputs[f].prefix);
    EXPECT_EQ(ds.num_documents(), 1u);
    EXPECT_EQ(ds.num_tokens(), r.outputs[f].tokens);
    auto doc = ds.document(0);
    EXPECT_EQ(doc.back(), tok->eod());
    std::vector<int32_t> ids(doc.begin(), doc.end() - 1);
    EXPECT_EQ(tok->decode(ids), *texts[f]);
  }
  // One sequence per line (the seed's readlines()), newline included.
  qk::data::IndexedDataset da(r.outputs[0].prefix);
  EXPECT_EQ(da.num_sequences(), 4u);
}

TEST(Preprocess, InvalidUtf8InTextFilesIsReported) {
  TempDir dir("pre_utf8");
  auto tok = small_tokenizer(dir);
  qk::make_dirs(dir / "raw");
  qk::atomic_write_file(dir / "raw/x.txt", "good\nbad \xc3\x28 byte\n");
  qk::data::PreprocessOptions o;
  o.input = dir / "raw";
  o.output_prefix = dir / "out";
  try {
    qk::data::preprocess(o, *tok, nullptr);
    ADD_FAILURE();
  } catch (const qk::ValueError& e) {
    EXPECT_NE(e.message().find("x.txt:2: invalid UTF-8 at byte 4"), std::string::npos) << e.message();
  }
  o.skip_invalid = true;
  auto r = qk::data::preprocess(o, *tok, nullptr);
  EXPECT_EQ(r.skipped, 1);
}

TEST(Preprocess, MissingInputIsAnIoError) {
  TempDir dir("pre_missing");
  auto tok = small_tokenizer(dir);
  qk::data::PreprocessOptions o;
  o.input = dir / "nope.jsonl";
  o.output_prefix = dir / "out";
  EXPECT_THROW(qk::data::preprocess(o, *tok, nullptr), qk::IoError);
}

}  // namespace
