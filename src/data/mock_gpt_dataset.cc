// MockGptSequences: Megatron's mock sequences, their lengths drawn with
// numpy's default_rng (data/numpy_pcg64.h).
#include "qk/data/mock_gpt_dataset.h"

#include <algorithm>

#include "numpy_pcg64.h"
#include "qk/base/error.h"

namespace qk::data {

MockGptSequences::MockGptSequences(int64_t eod) : eod_(eod) {
  QK_CHECK(eod >= 0, "--mock-data needs a tokenizer with an end-of-document id, got ", eod);
  NumpyPcg64 rng(kSeed);
  lengths_.resize(static_cast<size_t>(kSize));
  for (auto& n : lengths_) {
    n = rng.integer(1, kMaxSequenceLength);
    num_tokens_ += n;
  }
}

int32_t MockGptSequences::sequence_length(size_t i) const {
  QK_CHECK_INDEX(i < lengths_.size(), "mock sequence ", i, " out of range [0, ", lengths_.size(), ")");
  return lengths_[i];
}

std::vector<int64_t> MockGptSequences::get(size_t i, size_t offset, std::optional<size_t> length) const {
  const size_t n = static_cast<size_t>(sequence_length(i));
  // numpy slicing of concatenate([arange(n - 1) + 1, [eod]]) clamps to the end.
  const size_t begin = std::min(offset, n);
  const size_t end = length ? std::min(n, begin + *length) : n;
  std::vector<int64_t> out;
  out.reserve(end - begin);
  for (size_t k = begin; k < end; ++k) out.push_back(k + 1 < n ? static_cast<int64_t>(k + 1) : eod_);
  return out;
}

}  // namespace qk::data
