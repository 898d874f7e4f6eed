// What GPT samples are cut from: numbered token sequences (Megatron-Core's
// "low-level dataset"). IndexedDataset (.bin/.idx files) and
// MockGptSequences (--mock-data) are two kinds.
//
//   const qk::data::TokenSequences& s = indexed_dataset;
//   s.sequence_length(3);             // tokens in sequence 3
//   s.get(3, /*offset=*/2, /*length=*/5);   // 5 of them, from the third on
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qk::data {

class TokenSequences {
 public:
  virtual ~TokenSequences() = default;
  // For messages and the GPT index cache (a path prefix for files on disk).
  virtual const std::string& prefix() const = 0;
  virtual size_t num_sequences() const = 0;
  virtual int64_t num_tokens() const = 0;
  virtual int32_t sequence_length(size_t i) const = 0;
  virtual std::vector<int32_t> sequence_lengths() const = 0;
  // Tokens of sequence i from `offset`, `length` of them (all the rest when
  // absent), widened to int64 (Megatron's get(idx, offset, length)).
  virtual std::vector<int64_t> get(size_t i, size_t offset, std::optional<size_t> length) const = 0;
};

}  // namespace qk::data
