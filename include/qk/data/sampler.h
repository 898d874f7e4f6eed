// Which samples each rank reads in each epoch: PyTorch's DistributedSampler.
//
//   qk::data::DistributedSampler s(/*dataset_size=*/50000, /*num_replicas=*/4, /*rank=*/1,
//                                  /*shuffle=*/true, /*seed=*/0, /*drop_last=*/false);
//   s.set_epoch(3);                        // a new order every epoch
//   std::vector<int64_t> idx = s.indices(); // this rank's 12500 samples
//
// Exactly torch.utils.data.DistributedSampler's partition:
//   - shuffle: a permutation of 0..N-1 from a generator seeded with
//     seed + epoch (qk::randperm, qk's Philox, so the permutation itself
//     differs from torch's; the same on every rank, hence disjoint shards);
//   - not drop_last: num_samples = ceil(N / R); the list is padded to R *
//     num_samples by repeating it from its start (wrap-around);
//   - drop_last: num_samples = ceil((N - R) / R) when R does not divide N,
//     the tail is dropped;
//   - rank r takes positions r, r + R, r + 2R, ...
// With num_replicas = 1 it is a plain (shuffled or sequential) sampler.
#pragma once

#include <cstdint>
#include <vector>

namespace qk::data {

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int64_t num_replicas = 1, int64_t rank = 0, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }
  // This rank's samples for the current epoch, in order (num_samples() of them).
  std::vector<int64_t> indices() const;
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int64_t dataset_size() const { return n_; }
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }
  bool shuffle() const { return shuffle_; }
  uint64_t seed() const { return seed_; }
  bool drop_last() const { return drop_last_; }

 private:
  int64_t n_, num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  uint64_t epoch_ = 0;
  int64_t num_samples_ = 0;
};

}  // namespace qk::data
