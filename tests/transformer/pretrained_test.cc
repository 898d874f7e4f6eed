// load_gpt_for_inference and the tokenizer files that travel with a model.
#include "qk/transformer/pretrained.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "data/test_util.h"
#include "qk/base/file_io.h"

namespace qk::transformer {
namespace {

const std::string kFixtures = std::string(QK_SOURCE_DIR) + "/tests/fixtures/hf/";

TEST(LoadGptForInference, LoadsAHuggingFaceFolderInEvalMode) {
  LoadedGpt m = load_gpt_for_inference(kFixtures + "llama_tiny", {.dtype = DType::f32});
  EXPECT_EQ(m.format, "hf");
  EXPECT_FALSE(m.model->is_training());
  EXPECT_EQ(m.config.params_dtype, DType::f32);
  EXPECT_EQ(m.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(m.bos_token_id, 1);
  EXPECT_FALSE(m.tokenizer.has_value());  // the fixture has no tokenizer files
  EXPECT_THROW(load_gpt_for_inference(kFixtures + "no_such_model"), IoError);
  test::TempDir empty("pretrained_empty");
  EXPECT_THROW(load_gpt_for_inference(empty.path()), IoError);
}

TEST(LoadGptForInference, FindsAndCopiesTokenizerFiles) {
  test::TempDir dir("pretrained_tok"), out("pretrained_tok_out");
  EXPECT_FALSE(find_tokenizer_files(dir.path()).has_value());
  atomic_write_file(dir / "tokenizer.json", "{}");
  EXPECT_EQ(find_tokenizer_files(dir.path())->type, "HuggingFaceTokenizer");
  atomic_write_file(dir / "tokenizer.model", "spm");
  EXPECT_EQ(find_tokenizer_files(dir.path())->type, "SentencePieceTokenizer");
  atomic_write_file(dir / "vocab.json", "{}");
  EXPECT_EQ(find_tokenizer_files(dir.path())->type, "SentencePieceTokenizer");  // vocab.json alone is not GPT-2's
  atomic_write_file(dir / "merges.txt", "#version: 0.2\n");
  const auto gpt2 = find_tokenizer_files(dir.path());
  EXPECT_EQ(gpt2->type, "GPT2BPETokenizer");
  EXPECT_EQ(gpt2->vocab_file, dir / "vocab.json");

  EXPECT_EQ(copy_tokenizer_files(*gpt2, out.path()), (std::vector<std::string>{"vocab.json", "merges.txt"}));
  EXPECT_EQ(read_file(out / "merges.txt"), "#version: 0.2\n");
  atomic_write_file(dir / "tokenizer_config.json", "{\"eos_token\": \"x\"}");
  const data::TokenizerOptions hf{.type = "HuggingFaceTokenizer", .model = dir.path()};
  EXPECT_EQ(copy_tokenizer_files(hf, out.path()),
            (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}));
  EXPECT_EQ(read_file(out / "tokenizer_config.json"), "{\"eos_token\": \"x\"}");
  // Onto itself: nothing to copy, nothing lost.
  EXPECT_EQ(copy_tokenizer_files(*gpt2, dir.path()).size(), 2u);
  EXPECT_EQ(read_file(dir / "vocab.json"), "{}");
}

}  // namespace
}  // namespace qk::transformer
