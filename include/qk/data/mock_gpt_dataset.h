// Megatron-Core's MockGPTLowLevelDataset (--mock-data): 100000 sequences
// whose lengths numpy.random.default_rng(0).integers(1, 4096) draws,
// sequence i being the tokens 1, 2, ..., length-1 followed by the
// tokenizer's end-of-document id. GptDataset samples it as it samples files
// on disk, so a --mock-data run here sees Megatron's mock samples.
//
//   qk::data::MockGptSequences mock(/*eod=*/tokenizer.eod());
//   mock.sequence_length(0);        // 3484, as numpy draws it
//   qk::data::GptDataset train(mock, options);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qk/data/token_sequences.h"

namespace qk::data {

class MockGptSequences : public TokenSequences {
 public:
  static constexpr int64_t kSize = 100000;              // MockGPTLowLevelDataset.size
  static constexpr int32_t kMaxSequenceLength = 4096;   // .max_sequence_length (exclusive)
  static constexpr uint64_t kSeed = 0;                  // .seed

  explicit MockGptSequences(int64_t eod);

  const std::string& prefix() const override { return name_; }
  size_t num_sequences() const override { return lengths_.size(); }
  int64_t num_tokens() const override { return num_tokens_; }
  int32_t sequence_length(size_t i) const override;
  std::vector<int32_t> sequence_lengths() const override { return lengths_; }
  std::vector<int64_t> get(size_t i, size_t offset, std::optional<size_t> length) const override;

  // The largest token id a sample can hold besides eod (kMaxSequenceLength - 2).
  static int64_t max_token_id() { return kMaxSequenceLength - 2; }

 private:
  std::string name_ = "mock";
  std::vector<int32_t> lengths_;
  int64_t eod_ = 0;
  int64_t num_tokens_ = 0;
};

}  // namespace qk::data
