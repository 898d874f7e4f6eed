// Fuzzes the Hugging Face tokenizer.json loader: any input must load (and
// then encode and decode a fixed text) or raise qk::Error.
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/pretokenize.h"
#include "fuzz_target.h"
#include "qk/base/error.h"
#include "qk/data/bpe_trainer.h"
#include "qk/data/tokenizer.h"

namespace {
std::string path() {
  static const std::string p = fuzz_scratch_dir("tokenizer_json") + "/tokenizer.json";
  return p;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::ofstream(path(), std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    auto tok = qk::data::load_tokenizer({.type = "HuggingFaceTokenizer", .model = path()});
    const auto ids = tok->encode("Hello, wörld! 12345 \n\n 你好 <|endoftext|>");
    (void)tok->decode(ids);  // lossless only for well-formed vocabularies; the point is no crash
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
  return {gpt2_style, j.dump(), "{}", "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
          // Inputs that once crashed the loader (kept as regressions):
          // a wrong JSON type escaped as nlohmann's type_error.
          "{\"model\": {\"type\": false, \"vocab\": {}, \"merges\": []}}"};
}
