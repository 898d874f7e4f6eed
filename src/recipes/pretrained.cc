// load_gpt_for_inference: which checkpoint formats exist (qianka's
// pre-training checkpoints and Hugging Face folders), and the tokenizer files
// that travel with them.
#include "qk/recipes/pretrained.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"
#include "qk/nn/safetensors.h"
#include "qk/tensor/generator.h"
#include "qk/train/checkpoint.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/transformer/hf_checkpoint.h"

namespace qk::recipes {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string in(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

constexpr const char* kNoTokenizerFiles =
    "has no tokenizer files (vocab.json + merges.txt, tokenizer.json or tokenizer.model)";

LoadedGpt load_hf_folder(const std::string& dir, const LoadGptOptions& o) {
  transformer::HfModel hf = transformer::load_hf(dir, {.dtype = o.dtype});
  LoadedGpt out;
  out.config = hf.config;
  out.model = hf.model;
  out.model->eval();
  out.tokenizer = find_tokenizer_files(dir);
  if (!out.tokenizer) out.tokenizer_note = fmt::format("'{}' {}", dir, kNoTokenizerFiles);
  out.eos_token_ids = hf.info.eos_token_ids;
  out.bos_token_id = hf.info.bos_token_id;
  out.format = "hf";
  out.source = dir;
  return out;
}

// The model a pre-training run trained, on one process: the stored arguments
// at tensor-parallel size 1, the vocabulary padded as the run padded it
// (Megatron pads to a multiple of divisible-by x tensor-parallel size).
transformer::TransformerConfig inference_config(const MegatronArgs& a, int64_t tokenizer_vocab, int64_t padded,
                                                const std::string& where) {
  MegatronArgs one = a;
  one.make_vocab_size_divisible_by = a.make_vocab_size_divisible_by * a.tensor_model_parallel_size;
  one.tensor_model_parallel_size = 1;
  one.sequence_parallel = false;
  transformer::TransformerConfig c = gpt_transformer_config(one, tokenizer_vocab);
  QK_CHECK_AS(IoError, c.padded_vocab_size() == padded, "Checkpoint '", where, "' is inconsistent: its arguments pad ",
              tokenizer_vocab, " ids to ", c.padded_vocab_size(), " but it says it trained with ", padded);
  return c;
}

// The stored --tokenizer-type and files, when they still load and still have
// the vocabulary the model was trained with; otherwise why not.
void attach_tokenizer(LoadedGpt& out, const MegatronArgs& a, int64_t trained_vocab) {
  data::TokenizerOptions t;
  t.type = a.tokenizer_type.value_or("");
  t.model = a.tokenizer_model.value_or("");
  t.vocab_file = a.vocab_file.value_or("");
  t.merge_file = a.merge_file.value_or("");
  t.vocab_size = a.vocab_size.value_or(0);
  std::vector<std::pair<const char*, std::string>> files;
  if (t.type == "GPT2BPETokenizer") files = {{"--vocab-file", t.vocab_file}, {"--merge-file", t.merge_file}};
  if (t.type == "HuggingFaceTokenizer" || t.type == "SentencePieceTokenizer") files = {{"--tokenizer-model", t.model}};
  const std::string trained = fmt::format("the checkpoint was trained with --tokenizer-type {}", t.type);
  for (const auto& [flag, path] : files) {
    if (!path.empty() && !fs::exists(path)) {
      out.tokenizer_note = fmt::format("{} {} '{}', which no longer exists (a relative path is read from the "
                                       "current folder)",
                                       trained, flag, path);
      return;
    }
  }
  std::unique_ptr<data::Tokenizer> tok;
  try {
    tok = data::load_tokenizer(t);
  } catch (const Error& e) {
    out.tokenizer_note = fmt::format("{}, which does not load now: {}", trained, e.message());
    return;
  }
  if (tok->vocab_size() != trained_vocab) {
    out.tokenizer_note = fmt::format("{}, whose files now have {} ids where the model was trained with {}", trained,
                                     tok->vocab_size(), trained_vocab);
    return;
  }
  out.tokenizer = t;
  if (tok->eod() >= 0) out.eos_token_ids = {tok->eod()};
  out.bos_token_id = tok->bos();
}

LoadedGpt load_pretrain_checkpoint(const CheckpointInfo& info, const LoadGptOptions& o) {
  const std::string& where = info.path;
  LoadedGpt out;
  out.format = "qk";
  out.source = where;
  int64_t tokenizer_vocab = 0, padded = 0;
  std::string weights_file;
  try {
    const json meta = json::parse(info.meta);
    QK_CHECK_AS(IoError, meta.value("format", "") == train::kTrainCheckpointFormat, "'", where,
                "' is not a training checkpoint (format '", meta.value("format", ""), "', expected ",
                train::kTrainCheckpointFormat, ")");
    const json user = meta.value("user", json());
    QK_CHECK_AS(IoError, user.is_object() && user.value("format", "") == kPretrainGptFormat, "'", where,
                "' is a training checkpoint but not one of qk pretrain-gpt (its state says ", user.dump(),
                "); models load from pretrain-gpt checkpoints and Hugging Face folders");
    out.args = megatron_args_from_json(meta.at("args").dump());
    out.iteration = meta.value("iteration", int64_t{0});
    tokenizer_vocab = user.at("tokenizer_vocab_size").get<int64_t>();
    padded = user.at("padded_vocab_size").get<int64_t>();
    weights_file = meta.at("weights").get<std::string>();
  } catch (const json::exception& e) {
    QK_THROW(IoError, "Cannot read checkpoint '", where, "': ", e.what(),
             "; it should be a folder written by qk pretrain-gpt --save");
  }
  transformer::TransformerConfig c = inference_config(*out.args, tokenizer_vocab, padded, where);
  const DType stored = c.params_dtype;
  c.params_dtype = o.dtype.value_or(stored);

  // Building the model draws its initial weights from the default generator:
  // leave the caller's generator as it was.
  Generator& g = default_generator();
  const uint64_t seed = g.seed(), offset = g.offset();
  out.model = transformer::GPTModel(c);
  g.set_state(seed, offset);

  const std::string weights = in(where, weights_file.c_str());
  nn::SafetensorsFile file = nn::load_safetensors(weights);
  nn::NamedTensors state;
  for (auto& [name, t] : file.tensors) {
    const bool floating = t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16;
    state.insert(name, floating && t.dtype() != c.params_dtype ? t.to(c.params_dtype) : t);
  }
  try {
    out.model->load_state_dict(state, /*strict=*/true);
  } catch (const Error& e) {
    QK_THROW(ValueError, "loading '", weights, "': ", e.message(),
             "; the weights do not fit the model its arguments describe");
  }
  out.model->eval();
  out.config = out.model->config();
  attach_tokenizer(out, *out.args, tokenizer_vocab);
  QK_DEBUG("loaded iteration {} of {}: {}", out.iteration, where, c.summary());
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
  if (transformer::is_hf_folder(path)) return load_hf_folder(path, o);
  if (fs::is_directory(path)) {
    std::vector<std::string> skipped;
    if (const auto c = train::find_checkpoint(path, &skipped)) return load_pretrain_checkpoint(*c, o);
    QK_CHECK_AS(IoError, skipped.empty(), "'", path, "' holds no complete checkpoint: ",
                fmt::format("{}", fmt::join(skipped, ", ")),
                " failed verification (see the warnings above)");
  }
  QK_THROW(IoError, "'", path, "' is not a checkpoint qk can load: expected a qk pretrain-gpt --save folder ",
           "(iter_NNNNNNNNNN/ folders with manifest.json), one of its iter_ folders, or a Hugging Face model ",
           "folder (config.json and model.safetensors or its shards)");
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
    const std::string json_file = fs::is_directory(model) ? (model / "tokenizer.json").string() : t.model;
    copy_into(json_file, dir, "tokenizer.json", written);
    const std::string config = (fs::path(json_file).parent_path() / "tokenizer_config.json").string();
    if (file_exists(config)) copy_into(config, dir, "tokenizer_config.json", written);
  } else {
    QK_CHECK(t.type == "NullTokenizer", "copy_tokenizer_files: unknown tokenizer type '", t.type, "'");
  }
  return written;
}

}  // namespace qk::recipes
