#include "qk/data/bpe_trainer.h"

#include <gtest/gtest.h>

#include "data/test_util.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/data/text_gen.h"
#include "qk/data/tokenizer.h"

namespace {

TEST(BpeTrainer, TrainedTokenizerLoadsBackAndRoundTrips) {
  qk::test::TempDir dir("bpe_train");
  const std::string text = qk::data::make_varied_text(200 * 1024, 5);
  qk::data::BpeTrainer t({.vocab_size = 1000});
  t.add_text(text);
  qk::atomic_write_file(dir / "tokenizer.json", t.train_json());
  auto tok = qk::data::load_tokenizer({.type = "HuggingFaceTokenizer", .model = dir.path()});
  EXPECT_EQ(tok->vocab_size(), 1000);
  EXPECT_EQ(tok->eod(), 999);
  EXPECT_EQ(tok->token_to_id("<|endoftext|>"), 999);
  const auto ids = tok->encode(text);
  EXPECT_EQ(tok->decode(ids), text);
  // Merges compress: clearly fewer ids than bytes.
  EXPECT_LT(ids.size() * 2, text.size());
  // The special token in text is matched as one id (Hugging Face behaviour).
  EXPECT_EQ(tok->encode("a<|endoftext|>b"),
            (std::vector<int32_t>{tok->encode("a")[0], 999, tok->encode("b")[0]}));
}

TEST(BpeTrainer, IsDeterministicAndLearnsTheMostFrequentPairFirst) {
  qk::data::BpeTrainer a({.vocab_size = 300}), b({.vocab_size = 300});
  a.add_text("low lower lowest low low");
  b.add_text("low lower lowest low low");
  const std::string ja = a.train_json();
  EXPECT_EQ(ja, b.train_json());
  // " l"+"o" style pairs: 'l','o' occurs in every word, so "l o" is the first merge.
  EXPECT_NE(ja.find("\"l o\""), std::string::npos);
}

TEST(BpeTrainer, RejectsATooSmallVocabulary) {
  EXPECT_THROW(qk::data::BpeTrainer({.vocab_size = 100}), qk::ValueError);
}

}  // namespace
