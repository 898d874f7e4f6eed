// Fuzzes the tokenizer.json loader: any input must load (and then encode and
// decode a fixed text losslessly) or raise qk::Error.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <string>

#include "data/fuzz/fuzz_target.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"
#include "qk/data/bpe_trainer.h"
#include "qk/data/tokenizer.h"
#include "data/tokenizer/pretokenize.h"

#include <nlohmann/json.hpp>

namespace {
// Plain writes: atomic_write_file's fsyncs would make each input take ms.
void write_plain(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::string g_dir;
void remove_dir() { std::filesystem::remove_all(g_dir); }
std::string scratch_path() {
  static const std::string p = [] {
    std::string d = "/tmp/qk_tok_fuzz." + std::to_string(::getpid());
    qk::make_dirs(d);
    g_dir = d;
    std::atexit(remove_dir);
    qk::log::set_level(qk::log::Level::off);
    return d + "/tokenizer.json";
  }();
  return p;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write_plain(scratch_path(), std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    auto tok = qk::data::load_tokenizer({.type = "HuggingFaceTokenizer", .model = scratch_path()});
    const std::string text = "Hello, wörld! 12345 \n\n 你好 <|endoftext|>";
    const auto ids = tok->encode(text);
    std::string back = tok->decode(ids);
    (void)back;  // lossless only for well-formed vocabularies; the point is no crash
  } catch (const qk::Error&) {
  }
  return 0;
}

std::vector<std::string> fuzz_seeds() {
  qk::data::BpeTrainer t({.vocab_size = 300});
  t.add_text("the quick brown fox jumps over the lazy dog; the dog sleeps. 1234 1234");
  const std::string gpt2_style = t.train_json();
  // The same model with Llama-3's pre-tokenizer and a BOS post-processor.
  auto j = nlohmann::json::parse(gpt2_style);
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"Regex", qk::data::kLlama3Regex}}}},
                          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  j["model"]["ignore_merges"] = true;
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<|endoftext|>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                         {"special_tokens", {{"<|endoftext|>", {{"ids", {299}}}}}}};
  return {gpt2_style, j.dump(), "{}", "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}"};
}
