// Loading a trained GPT model from a path, for generation and conversion:
// the one function that knows which checkpoint formats exist (`qk generate
// --load` and `qk checkpoint export --load` both call it). It lives in the
// training layer because a pre-training checkpoint describes its model and
// tokenizer by Megatron's arguments, which gpt_transformer_config and
// build_tokenizer's flags turn into a model and a tokenizer.
//
//   auto m = qk::recipes::load_gpt_for_inference("ckpt");          // `qk pretrain-gpt --save ckpt`
//   auto h = qk::recipes::load_gpt_for_inference("gpt2/");         // a Hugging Face folder
//   QK_CHECK(m.tokenizer.has_value(), m.tokenizer_note);         // why there is none
//   auto tok = qk::data::load_tokenizer(*m.tokenizer);
//   generate(*m.model, {ids}, {.stop_tokens = m.eos_token_ids});
//
// Formats:
//   "qk": a `qk pretrain-gpt` checkpoint (qk/train/checkpoint.h): the --save
//         folder (its newest complete iter_ folder, as --load resumes from) or
//         one iter_ folder. The config is gpt_transformer_config of the stored
//         arguments at tensor-parallel size 1 (the vocabulary padded as it was
//         trained), the weights are model.safetensors by Megatron-core name,
//         the tokenizer is the stored --tokenizer-type with its files, and
//         the stop token is its EOD.
//   "hf": a Hugging Face folder (qk/transformer/hf_checkpoint.h), with the
//         tokenizer files found in it and config.json's eos/bos ids.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qk/data/tokenizer.h"
#include "qk/recipes/megatron_args.h"
#include "qk/transformer/gpt_model.h"

namespace qk::recipes {

struct LoadedGpt {
  transformer::TransformerConfig config;
  transformer::GPTModel model{nullptr};  // in eval() mode
  // The tokenizer that came with the checkpoint; nullopt when there is none
  // or its files are gone, and tokenizer_note says which (for the error that
  // asks for tokenizer flags).
  std::optional<data::TokenizerOptions> tokenizer;
  std::string tokenizer_note;
  // End-of-sequence ids (qk: the tokenizer's EOD; Hugging Face: eos_token_id);
  // generation stops at any of them.
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1;
  std::string format;  // "qk" or "hf"
  std::string source;  // the folder read (qk: the iter_ folder)
  int64_t iteration = -1;  // qk: the checkpoint's iteration
  std::optional<MegatronArgs> args;  // qk: the arguments it was trained with
};

struct LoadGptOptions {
  // Parameter dtype (unset: as the checkpoint stores them).
  std::optional<DType> dtype = {};
};

// Throws IoError naming `path` when it is missing, holds no known format or
// no complete checkpoint, and ValueError for a model GPTModel cannot
// represent. The default generator's state is left as it was.
LoadedGpt load_gpt_for_inference(const std::string& path, const LoadGptOptions& o = {});

// The tokenizer files in a folder, as Megatron's --tokenizer-type and files:
// vocab.json + merges.txt (GPT2BPETokenizer), tokenizer.model
// (SentencePieceTokenizer), tokenizer.json (HuggingFaceTokenizer), in that
// order of preference; nullopt when there are none.
std::optional<data::TokenizerOptions> find_tokenizer_files(const std::string& dir);

// Copies a tokenizer's files into `dir` under the names Hugging Face folders
// use (vocab.json, merges.txt, tokenizer.json + tokenizer_config.json,
// tokenizer.model), so the folder carries its tokenizer. Returns the names
// written (none for NullTokenizer, which has no files).
std::vector<std::string> copy_tokenizer_files(const data::TokenizerOptions& tokenizer, const std::string& dir);

}  // namespace qk::recipes
