// Fuzzes the GPT-2 vocab.json + merges.txt loader (GPT2BPETokenizer): any
// input must load (and encode and decode a fixed text) or raise qk::Error.
// Input: vocab.json, a NUL byte, merges.txt.
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_target.h"
#include "qk/base/error.h"
#include "qk/data/bpe_trainer.h"
#include "qk/data/tokenizer.h"

namespace {
void write_plain(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
const std::string& dir() {
  static const std::string d = fuzz_scratch_dir("gpt2_files");
  return d;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  write_plain(dir() + "/vocab.json", in.substr(0, nul));
  write_plain(dir() + "/merges.txt", nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1));
  try {
    auto tok = qk::data::load_tokenizer(
        {.type = "GPT2BPETokenizer", .vocab_file = dir() + "/vocab.json", .merge_file = dir() + "/merges.txt"});
    const auto ids = tok->encode("Hello, wörld! 12345 \n\n 你好 <|endoftext|>");
    (void)tok->decode(ids);
  } catch (const qk::Error&) {
  }
  return 0;
}

// A small GPT-2-style pair, taken from a trained tokenizer.json.
std::vector<std::string> fuzz_seeds() {
  qk::data::BpeTrainer t({.vocab_size = 300});
  t.add_text("the quick brown fox jumps over the lazy dog; the dog sleeps. 1234 1234");
  const auto j = nlohmann::json::parse(t.train_json());
  nlohmann::json vocab = j["model"]["vocab"];
  if (!vocab.contains("<|endoftext|>")) vocab["<|endoftext|>"] = vocab.size();
  std::string merges = "#version: 0.2\n";
  for (const auto& m : j["model"]["merges"])
    merges += m.is_string() ? m.get<std::string>() + "\n"
                            : m[0].get<std::string>() + " " + m[1].get<std::string>() + "\n";
  return {vocab.dump() + std::string(1, '\0') + merges, std::string("{}\0\n", 4)};
}
