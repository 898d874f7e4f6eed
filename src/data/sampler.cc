// PyTorch's DistributedSampler partition (see qk/data/sampler.h).
#include "qk/data/sampler.h"

#include <numeric>

#include "qk/base/error.h"
#include "qk/tensor/generator.h"

namespace qk::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : n_(dataset_size), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed),
      drop_last_(drop_last) {
  QK_CHECK(dataset_size >= 0, "DistributedSampler: dataset size must be >= 0, got ", dataset_size);
  QK_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ", num_replicas);
  QK_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank must be in [0, ", num_replicas - 1,
           "], got ", rank);
  if (drop_last && n_ % num_replicas_ != 0) {
    // torch: math.ceil((len - num_replicas) / num_replicas), floored at 0 for tiny sets.
    num_samples_ = n_ < num_replicas_ ? 0 : (n_ - num_replicas_ + num_replicas_ - 1) / num_replicas_;
  } else {
    num_samples_ = (n_ + num_replicas_ - 1) / num_replicas_;
  }
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all(static_cast<size_t>(n_));
  if (shuffle_) {
    Generator g(seed_ + epoch_);
    const Tensor p = randperm(n_, g);
    const int64_t* pp = p.data_ptr<int64_t>();
    all.assign(pp, pp + n_);
  } else {
    std::iota(all.begin(), all.end(), int64_t{0});
  }
  const int64_t total = total_size();
  if (!drop_last_) {
    // Pad by wrap-around: repeat the list from its start (several times when
    // the padding is longer than the list).
    for (int64_t i = n_; i < total; ++i) all.push_back(all[static_cast<size_t>((i - n_) % n_)]);
  } else {
    all.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += num_replicas_) mine.push_back(all[static_cast<size_t>(i)]);
  QK_INTERNAL_ASSERT(static_cast<int64_t>(mine.size()) == num_samples_);
  return mine;
}

}  // namespace qk::data
