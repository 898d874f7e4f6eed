// Loading a trained GPT model from a path, for generation and conversion:
// the one function that knows which checkpoint formats exist (`qk generate
// --load` and `qk checkpoint export --load` both call it).
//
//   auto m = qk::transformer::load_gpt_for_inference("gpt2/");   // a Hugging Face folder
//   if (m.tokenizer) tok = qk::data::load_tokenizer(*m.tokenizer);
//   generate(*m.model, {tok->encode("Hello")}, {.stop_tokens = m.eos_token_ids});
//
// Formats: a Hugging Face folder (qk/transformer/hf_checkpoint.h). qianka's
// own pre-training checkpoints join at integration (see pretrained.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qk/data/tokenizer.h"
#include "qk/transformer/gpt_model.h"

namespace qk::transformer {

struct LoadedGpt {
  TransformerConfig config;
  GPTModel model{nullptr};  // in eval() mode
  // The tokenizer that came with the checkpoint, if any.
  std::optional<data::TokenizerOptions> tokenizer;
  // End-of-sequence ids the checkpoint names (Hugging Face: eos_token_id),
  // besides the tokenizer's EOD; generation stops at either.
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1;
  std::string format;  // "hf"
};

struct LoadGptOptions {
  // Parameter dtype (unset: as the checkpoint stores them).
  std::optional<DType> dtype = {};
};

// Throws IoError naming `path` when it is missing or no known format, and
// ValueError for a format whose model GPTModel cannot represent.
LoadedGpt load_gpt_for_inference(const std::string& path, const LoadGptOptions& o = {});

// The tokenizer files in a folder, as Megatron's --tokenizer-type and files:
// vocab.json + merges.txt (GPT2BPETokenizer), tokenizer.model
// (SentencePieceTokenizer), tokenizer.json (HuggingFaceTokenizer), in that
// order of preference; nullopt when there are none.
std::optional<data::TokenizerOptions> find_tokenizer_files(const std::string& dir);

// Copies a tokenizer's files into `dir` under the names Hugging Face folders
// use (vocab.json, merges.txt, tokenizer.json + tokenizer_config.json,
// tokenizer.model), so the folder carries its tokenizer. Returns the names written.
std::vector<std::string> copy_tokenizer_files(const data::TokenizerOptions& tokenizer, const std::string& dir);

}  // namespace qk::transformer
