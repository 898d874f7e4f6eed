// Byte-level BPE: the model (ids, merges) and the Tokenizer built on it.
// Loaders (tokenizer_loaders.cc) fill a BpeSpec; BpeTokenizer does the work.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "qk/data/tokenizer.h"

namespace qk::data {

struct AddedToken {
  std::string content;  // raw text, matched verbatim in the input
  int32_t id = -1;
  bool special = true;
};

// Everything a byte-level BPE tokenizer is made of, with tokens already
// mapped from GPT-2's printable-character form back to raw bytes.
struct BpeSpec {
  std::vector<std::pair<std::string, int32_t>> vocab;  // raw bytes -> id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order, raw bytes
  std::vector<AddedToken> added;
  SplitPattern pattern = SplitPattern::kGpt2;
  bool match_added_tokens = true;  // split out added tokens found in the text (HF)
  bool ignore_merges = false;      // a piece that is a whole token maps to it (Llama-3)
  std::vector<int32_t> prefix_ids;  // prepended to every encode (a BOS post-processor)
  int32_t eod = -1, bos = -1, pad = -1;
  std::string source;  // for messages: the file(s) it came from
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeSpec spec);
  ~BpeTokenizer() override;

  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  using Tokenizer::encode;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_bytes_.size()); }
  int32_t eod() const override { return eod_; }
  int32_t bos() const override { return bos_; }
  int32_t pad() const override { return pad_; }
  int32_t token_to_id(std::string_view token) const override;
  std::string describe() const override;

  // BPE of one pre-tokenized piece, uncached (tests compare it with the cache).
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  // Raw bytes of an id.
  const std::string& id_bytes(int32_t id) const { return id_to_bytes_.at(static_cast<size_t>(id)); }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  class MergeTable;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;
  void merge_small(std::vector<int32_t>& sym) const;
  void merge_large(std::vector<int32_t>& sym) const;

  std::vector<std::string> id_to_bytes_;
  std::unordered_map<std::string, int32_t> bytes_to_id_;
  std::array<int32_t, 256> byte_id_{};
  std::unique_ptr<MergeTable> merges_;
  std::vector<AddedToken> added_;  // longest first
  std::array<bool, 256> added_first_byte_{};
  SplitPattern pattern_;
  bool match_added_, ignore_merges_;
  std::vector<int32_t> prefix_ids_;
  int32_t eod_, bos_, pad_;
  uint64_t instance_id_;  // keys the per-thread piece cache
  std::string source_;
};

// Loaders (tokenizer_loaders.cc); load_tokenizer() dispatches to them.
std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::string& vocab_file, const std::string& merge_file);
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& model);

}  // namespace qk::data
