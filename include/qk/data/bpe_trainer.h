// Training a byte-level BPE tokenizer (GPT-2 split pattern) and writing it
// as a Hugging Face tokenizer.json that load_tokenizer() reads back.
//
//   qk::data::BpeTrainer t({.vocab_size = 8192});
//   t.add_text(read_file("corpus.txt"));          // any number of calls
//   qk::atomic_write_file("tokenizer.json", t.train_json());
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qk::data {

struct BpeTrainerOptions {
  int64_t vocab_size = 8192;  // 256 bytes + merges + special tokens
  int64_t min_frequency = 2;  // a pair seen fewer times is never merged
  std::vector<std::string> special_tokens = {"<|endoftext|>"};  // appended after the merges; the first is the EOD
};

class BpeTrainer {
 public:
  explicit BpeTrainer(BpeTrainerOptions o);
  // Counts the pre-tokenized pieces of `text`.
  void add_text(std::string_view text);
  // Learns the merges and returns the tokenizer.json text.
  std::string train_json() const;
  size_t distinct_pieces() const { return counts_.size(); }

 private:
  BpeTrainerOptions o_;
  std::unordered_map<std::string, int64_t> counts_;
};

}  // namespace qk::data
