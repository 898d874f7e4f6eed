// load_gpt_for_inference on both formats (a qk pretrain-gpt checkpoint and a
// Hugging Face folder) and the tokenizer files that travel with a model.
#include "qk/recipes/pretrained.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "data/test_util.h"
#include "megatron_args_test_util.h"
#include "qk/base/file_io.h"
#include "qk/nn/linear.h"
#include "qk/nn/safetensors.h"
#include "qk/tensor/generator.h"
#include "qk/train/checkpoint.h"
#include "qk/recipes/gpt_pretrain.h"

namespace qk::recipes {
namespace {

using test::Argv;
using test::operator+;

const std::string kFixtures = std::string(QK_SOURCE_DIR) + "/tests/fixtures/hf/";

// Two iterations of a tiny GPT on mock data, a checkpoint after each.
void pretrain_tiny(const std::string& save, const Argv& extra = {}) {
  const Argv argv = Argv{"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length",
                         "16", "--max-position-embeddings", "16", "--micro-batch-size", "2", "--global-batch-size",
                         "2", "--train-iters", "2", "--lr", "1e-2", "--mock-data", "--tokenizer-type",
                         "NullTokenizer", "--vocab-size", "4096", "--eval-iters", "0", "--save", save,
                         "--save-interval", "1"} +
                    extra;
  PretrainGptOptions o;
  o.print = [](const std::string&) {};
  o.measure_gemm_peak = false;
  pretrain_gpt(parse_megatron_args(argv, test::options()).args, o);
}

void expect_weights_of(const LoadedGpt& m, const std::string& file) {
  const nn::TensorMap saved = nn::load_safetensors(file).tensors;
  auto state = m.model->state_dict();
  ASSERT_FALSE(saved.empty());
  for (const auto& [name, t] : saved) {
    ASSERT_TRUE(state.contains(name)) << name;
    const Tensor mine = state[name].to(DType::f32).contiguous(), theirs = t.to(DType::f32).contiguous();
    EXPECT_EQ(mine.to_vector<float>(), theirs.to_vector<float>()) << name;
  }
}

TEST(LoadGptForInference, LoadsAPretrainCheckpointFromItsSaveFolderOrOneIteration) {
  test::TempDir dir("pretrained_qk");
  pretrain_tiny(dir.path());
  Generator& g = default_generator();
  const uint64_t seed = g.seed(), offset = g.offset();

  const LoadedGpt m = load_gpt_for_inference(dir.path());
  EXPECT_EQ(g.seed(), seed);
  EXPECT_EQ(g.offset(), offset);  // building the model left the caller's generator alone
  EXPECT_EQ(m.format, "qk");
  EXPECT_EQ(m.iteration, 2);
  EXPECT_EQ(m.source, dir / "iter_0000000002");
  EXPECT_FALSE(m.model->is_training());
  EXPECT_EQ(m.config.num_layers, 2);
  EXPECT_EQ(m.config.hidden_size, 32);
  EXPECT_EQ(m.config.vocab_size, 4097);  // NullTokenizer: 4096 ids plus EOD
  EXPECT_EQ(m.config.padded_vocab_size(), 4224);
  ASSERT_TRUE(m.tokenizer.has_value()) << m.tokenizer_note;
  EXPECT_EQ(m.tokenizer->type, "NullTokenizer");
  EXPECT_EQ(m.tokenizer->vocab_size, 4096);
  EXPECT_EQ(m.eos_token_ids, std::vector<int64_t>{4096});
  ASSERT_TRUE(m.args.has_value());
  EXPECT_EQ(m.args->train_iters, 2);
  expect_weights_of(m, dir / "iter_0000000002/model.safetensors");

  const LoadedGpt first = load_gpt_for_inference(dir / "iter_0000000001");
  EXPECT_EQ(first.iteration, 1);
  expect_weights_of(first, dir / "iter_0000000001/model.safetensors");
  const Tensor w1 = first.model->state_dict()["embedding.word_embeddings.weight"];
  const Tensor w2 = m.model->state_dict()["embedding.word_embeddings.weight"];
  EXPECT_NE(w1.to_vector<float>(), w2.to_vector<float>());  // a step apart

  const LoadedGpt bf16 = load_gpt_for_inference(dir.path(), {.dtype = DType::bf16});
  EXPECT_EQ(bf16.config.params_dtype, DType::bf16);
  EXPECT_EQ(bf16.model->parameters().front().dtype(), DType::bf16);
}

TEST(LoadGptForInference, SkipsACorruptNewestCheckpointAndRefusesOthers) {
  test::TempDir dir("pretrained_corrupt"), other("pretrained_other");
  pretrain_tiny(dir.path());
  std::string bytes = read_file(dir / "iter_0000000002/model.safetensors");
  bytes[bytes.size() - 1] ^= 1;
  atomic_write_file(dir / "iter_0000000002/model.safetensors", bytes);
  EXPECT_EQ(load_gpt_for_inference(dir.path()).iteration, 1);  // as --load resumes
  EXPECT_THROW(load_gpt_for_inference(dir / "iter_0000000002"), IoError);

  // A training checkpoint of another model is not mistaken for a GPT.
  nn::Linear linear(2, 2);
  train::save_checkpoint(CheckpointDir(other.path()), train::iteration_folder(1), {linear.get()}, {});
  const std::string msg = test::error_of([&] { load_gpt_for_inference(other.path()); });
  EXPECT_NE(msg.find("not one of qk pretrain-gpt"), std::string::npos) << msg;
}

TEST(LoadGptForInference, LoadsAHuggingFaceFolderInEvalMode) {
  LoadedGpt m = load_gpt_for_inference(kFixtures + "llama_tiny", {.dtype = DType::f32});
  EXPECT_EQ(m.format, "hf");
  EXPECT_FALSE(m.model->is_training());
  EXPECT_EQ(m.config.params_dtype, DType::f32);
  EXPECT_EQ(m.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(m.bos_token_id, 1);
  EXPECT_FALSE(m.tokenizer.has_value());  // the fixture has no tokenizer files
  EXPECT_NE(m.tokenizer_note.find("has no tokenizer files"), std::string::npos) << m.tokenizer_note;
  EXPECT_THROW(load_gpt_for_inference(kFixtures + "no_such_model"), IoError);
  test::TempDir empty("pretrained_empty");
  const std::string msg = test::error_of([&] { load_gpt_for_inference(empty.path()); });
  EXPECT_NE(msg.find("is not a checkpoint qk can load"), std::string::npos) << msg;
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
  // NullTokenizer has no files.
  EXPECT_TRUE(copy_tokenizer_files({.type = "NullTokenizer", .vocab_size = 8}, out.path()).empty());
}

}  // namespace
}  // namespace qk::recipes
