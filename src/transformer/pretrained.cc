// load_gpt_for_inference: which checkpoint formats exist, and the tokenizer
// files that travel with them.
#include "qk/transformer/pretrained.h"

#include <filesystem>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/transformer/hf_checkpoint.h"

namespace qk::transformer {

namespace {

namespace fs = std::filesystem;

std::string in(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

LoadedGpt load_hf_folder(const std::string& dir, const LoadGptOptions& o) {
  HfModel hf = load_hf(dir, {.dtype = o.dtype});
  LoadedGpt out;
  out.config = hf.config;
  out.model = hf.model;
  out.model->eval();
  out.tokenizer = find_tokenizer_files(dir);
  out.eos_token_ids = hf.info.eos_token_ids;
  out.bos_token_id = hf.info.bos_token_id;
  out.format = "hf";
  return out;
}

void copy_into(const std::string& from, const std::string& dir, const char* name, std::vector<std::string>& written) {
  const fs::path to = fs::path(dir) / name;
  std::error_code ec;
  if (!fs::exists(to, ec) || !fs::equivalent(from, to, ec)) atomic_write_file(to.string(), read_file(from));
  written.emplace_back(name);
}

}  // namespace

LoadedGpt load_gpt_for_inference(const std::string& path, const LoadGptOptions& o) {
  QK_CHECK_AS(IoError, fs::exists(path), "'", path, "' does not exist; expected a model folder");
  if (is_hf_folder(path)) return load_hf_folder(path, o);
  // INTEGRATION: qianka's pre-training checkpoints (`qk pretrain-gpt --save`)
  // are recognised here: the TransformerConfig from the checkpoint's
  // arguments, GPTModel(config) with its Megatron-core parameter names loaded
  // as stored, the tokenizer from its --tokenizer-type/--vocab-file/
  // --merge-file/--tokenizer-model, format "qk". `qk generate` and
  // `qk checkpoint export` then accept such a folder with no other change.
  QK_THROW(IoError, "'", path, "' is not a checkpoint qk can load: expected a Hugging Face model folder ",
           "(config.json and model.safetensors or its shards)");
}

std::optional<data::TokenizerOptions> find_tokenizer_files(const std::string& dir) {
  if (file_exists(in(dir, "vocab.json")) && file_exists(in(dir, "merges.txt")))
    return data::TokenizerOptions{
        .type = "GPT2BPETokenizer", .vocab_file = in(dir, "vocab.json"), .merge_file = in(dir, "merges.txt")};
  if (file_exists(in(dir, "tokenizer.model")))
    return data::TokenizerOptions{.type = "SentencePieceTokenizer", .model = in(dir, "tokenizer.model")};
  if (file_exists(in(dir, "tokenizer.json")))
    return data::TokenizerOptions{.type = "HuggingFaceTokenizer", .model = dir};
  return std::nullopt;
}

std::vector<std::string> copy_tokenizer_files(const data::TokenizerOptions& t, const std::string& dir) {
  std::vector<std::string> written;
  make_dirs(dir);
  if (t.type == "GPT2BPETokenizer") {
    copy_into(t.vocab_file, dir, "vocab.json", written);
    copy_into(t.merge_file, dir, "merges.txt", written);
  } else if (t.type == "SentencePieceTokenizer") {
    copy_into(t.model, dir, "tokenizer.model", written);
  } else if (t.type == "HuggingFaceTokenizer") {
    // --tokenizer-model is tokenizer.json or the folder holding it (with tokenizer_config.json).
    const fs::path model(t.model);
    const std::string json = fs::is_directory(model) ? (model / "tokenizer.json").string() : t.model;
    copy_into(json, dir, "tokenizer.json", written);
    const std::string config = (fs::path(json).parent_path() / "tokenizer_config.json").string();
    if (file_exists(config)) copy_into(config, dir, "tokenizer_config.json", written);
  } else {
    QK_THROW(ValueError, "copy_tokenizer_files: unknown tokenizer type '", t.type, "'");
  }
  return written;
}

}  // namespace qk::transformer
