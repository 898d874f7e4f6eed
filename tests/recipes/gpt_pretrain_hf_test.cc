// `qk pretrain-gpt --load HF_FOLDER` in the library: the flags must build the
// folder's model (each difference named by flag and config.json field), and
// the weights load with the vocabulary padded as Megatron's converter pads it.
#include <gtest/gtest.h>

#include <algorithm>

#include "megatron_args_test_util.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/transformer/hf_checkpoint.h"

namespace qk::test {
namespace {

const std::string kFixtures = std::string(QK_SOURCE_DIR) + "/tests/fixtures/hf/";

// tests/fixtures/hf/llama_tiny and gpt2_tiny (gen_hf.py) as Megatron flags.
Argv llama_tiny_flags() {
  return {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--group-query-attention",
          "--num-query-groups", "2", "--ffn-hidden-size", "96", "--seq-length", "16", "--max-position-embeddings",
          "128", "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
          "--disable-bias-linear", "--untie-embeddings-and-output-weights", "--norm-epsilon", "1e-6",
          "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters", "1", "--lr", "1e-3", "--mock-data"};
}
Argv gpt2_tiny_flags() {
  return {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "16",
          "--max-position-embeddings", "64", "--openai-gelu", "--micro-batch-size", "2", "--global-batch-size", "2",
          "--train-iters", "1", "--lr", "1e-3", "--mock-data"};
}

// The error check_flags_match_hf_config gives for these flags ("" if none);
// the fixtures' tokenizer has 300 ids.
std::string mismatch(const Argv& flags, const std::string& fixture, int64_t vocab = 300) {
  const auto a = recipes::parse_megatron_args(flags, options()).args;
  return error_of(
      [&] { recipes::check_flags_match_hf_config(a, recipes::gpt_transformer_config(a, vocab), kFixtures + fixture); });
}

TEST(GptPretrainHf, MatchingFlagsAreAccepted) {
  EXPECT_EQ(mismatch(llama_tiny_flags(), "llama_tiny"), "");
  EXPECT_EQ(mismatch(gpt2_tiny_flags(), "gpt2_tiny"), "");
  // Training choices config.json does not fix: dropout, sequence length, dtype, 1p norms.
  EXPECT_EQ(mismatch(llama_tiny_flags() + Argv{"--hidden-dropout", "0.2", "--seq-length", "32", "--bf16",
                                               "--apply-layernorm-1p"},
                     "llama_tiny"),
            "");
}

TEST(GptPretrainHf, EachMismatchNamesTheFlagAndTheField) {
  auto expect_in = [](const std::string& msg, const std::string& needle) {
    EXPECT_NE(msg.find(needle), std::string::npos) << "missing '" << needle << "' in:\n" << msg;
  };
  const std::string sizes = mismatch(llama_tiny_flags() + Argv{"--num-layers", "3", "--hidden-size", "128",
                                                               "--rotary-base", "500"},
                                     "llama_tiny");
  expect_in(sizes, "is a Hugging Face folder (llama)");
  expect_in(sizes, "--num-layers 3, but config.json has num_hidden_layers = 2");
  expect_in(sizes, "--hidden-size 128, but config.json has hidden_size = 64");
  expect_in(sizes, "--rotary-base 500, but config.json has rope_theta = 10000");
  // What follows from a wrong hidden size is not listed again.
  EXPECT_EQ(sizes.find("--kv-channels"), std::string::npos) << sizes;
  const std::string heads = mismatch(llama_tiny_flags() + Argv{"--num-query-groups", "4", "--kv-channels", "32"},
                                     "llama_tiny");
  expect_in(heads, "--num-query-groups 4, but config.json has num_key_value_heads = 2");
  expect_in(heads, "--kv-channels 32, but config.json has head_dim = 16");
  expect_in(mismatch(llama_tiny_flags(), "llama_tiny", 301), "has 301 ids, but config.json has vocab_size = 300");
  expect_in(mismatch(llama_tiny_flags() + Argv{"--qk-layernorm"}, "llama_tiny"), "--qk-layernorm, but config.json");
  expect_in(mismatch(llama_tiny_flags() + Argv{"--norm-epsilon", "1e-5"}, "llama_tiny"),
            "--norm-epsilon 1e-05, but config.json has rms_norm_eps = 1e-06");

  // The GPT-2 layout: the MLP's activation, tied output, position table.
  Argv erf_gelu = gpt2_tiny_flags();
  erf_gelu.erase(std::find(erf_gelu.begin(), erf_gelu.end(), "--openai-gelu"));
  expect_in(mismatch(erf_gelu, "gpt2_tiny"),
            "neither --swiglu nor --openai-gelu (Megatron's erf GeLU MLP), but config.json has activation_function "
            "= gelu_new (--openai-gelu)");
  expect_in(mismatch(gpt2_tiny_flags() + Argv{"--untie-embeddings-and-output-weights"}, "gpt2_tiny"),
            "--untie-embeddings-and-output-weights, but config.json has tie_word_embeddings = true");
  expect_in(mismatch(gpt2_tiny_flags() + Argv{"--max-position-embeddings", "32"}, "gpt2_tiny"),
            "--max-position-embeddings 32, but config.json has n_positions = 64");

  // The wrong layout altogether: the position embedding, the norm and the MLP are named.
  const std::string layout = mismatch(gpt2_tiny_flags(), "llama_tiny");
  expect_in(layout, "--position-embedding-type learned_absolute, but config.json has model_type = llama");
  expect_in(layout, "--normalization LayerNorm, but config.json has model_type = llama (RMSNorm)");
  expect_in(layout, "--openai-gelu, but config.json has hidden_act = silu (Llama's gated MLP: --swiglu)");
  expect_in(mismatch(llama_tiny_flags(), "no_such_folder"), "has no config.json");
}

TEST(GptPretrainHf, WeightsLoadWithMegatronsVocabularyPadding) {
  const auto a = recipes::parse_megatron_args(gpt2_tiny_flags(), options()).args;
  const transformer::TransformerConfig c = recipes::gpt_transformer_config(a, 300);
  ASSERT_EQ(c.padded_vocab_size(), 384);
  transformer::GPTModel model(c);
  const std::string line = recipes::load_hf_weights_for_finetune(a, *model, kFixtures + "gpt2_tiny");
  EXPECT_NE(line.find("vocabulary 300 padded to 384 by repeating its last row"), std::string::npos) << line;
  EXPECT_NE(line.find("iteration 0, a fresh optimizer"), std::string::npos) << line;

  // The same tensors load_hf reads, and rows 300..383 repeat row 299.
  const transformer::HfModel hf = transformer::load_hf(kFixtures + "gpt2_tiny", {.seq_length = 16});
  auto mine = model->state_dict(), theirs = hf.model->state_dict();
  for (const auto& item : theirs)
    EXPECT_EQ(mine[item.key()].contiguous().to_vector<float>(), item.value().contiguous().to_vector<float>())
        << item.key();
  const Tensor emb = mine["embedding.word_embeddings.weight"];
  EXPECT_EQ(emb.narrow(0, 383, 1).contiguous().to_vector<float>(),
            emb.narrow(0, 299, 1).contiguous().to_vector<float>());

  // A mismatch leaves the model as it was.
  const auto wrong =
      recipes::parse_megatron_args(gpt2_tiny_flags() + Argv{"--max-position-embeddings", "32"}, options()).args;
  transformer::GPTModel other(recipes::gpt_transformer_config(wrong, 300));
  auto embedding_of = [](transformer::GPTModel& m) {
    return m->state_dict()["embedding.word_embeddings.weight"].contiguous().to_vector<float>();
  };
  const std::vector<float> before = embedding_of(other);
  EXPECT_THROW(recipes::load_hf_weights_for_finetune(wrong, *other, kFixtures + "gpt2_tiny"), ValueError);
  EXPECT_EQ(embedding_of(other), before);
}

}  // namespace
}  // namespace qk::test
