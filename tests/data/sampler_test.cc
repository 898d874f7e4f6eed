// DistributedSampler against torch.utils.data.DistributedSampler's rules.
#include "qk/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "qk/base/error.h"

namespace {

using qk::data::DistributedSampler;
using V = std::vector<int64_t>;

V shard(int64_t n, int64_t r, int64_t rank, bool drop_last) {
  return DistributedSampler(n, r, rank, /*shuffle=*/false, 0, drop_last).indices();
}

TEST(DistributedSampler, SequentialPartitionMatchesTorch) {
  // torch: DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=False)
  EXPECT_EQ(shard(10, 3, 0, false), (V{0, 3, 6, 9}));
  EXPECT_EQ(shard(10, 3, 1, false), (V{1, 4, 7, 0}));  // padded by wrap-around
  EXPECT_EQ(shard(10, 3, 2, false), (V{2, 5, 8, 1}));
  // drop_last=True: ceil((10 - 3) / 3) = 3 each, the tail (9) dropped.
  EXPECT_EQ(shard(10, 3, 0, true), (V{0, 3, 6}));
  EXPECT_EQ(shard(10, 3, 1, true), (V{1, 4, 7}));
  EXPECT_EQ(shard(10, 3, 2, true), (V{2, 5, 8}));
  // Padding longer than the data set repeats it: [0, 1] -> [0, 1, 0, 1, 0].
  for (int64_t r = 0; r < 5; ++r) EXPECT_EQ(shard(2, 5, r, false), (V{r % 2})) << r;
  // drop_last with fewer samples than replicas: nothing for anyone.
  EXPECT_EQ(DistributedSampler(2, 5, 1, false, 0, true).num_samples(), 0);
  EXPECT_TRUE(shard(2, 5, 1, true).empty());
  // Divisible: drop_last makes no difference.
  EXPECT_EQ(shard(12, 4, 3, true), shard(12, 4, 3, false));
  EXPECT_EQ(shard(12, 4, 3, false), (V{3, 7, 11}));
  EXPECT_TRUE(shard(0, 2, 0, false).empty());
}

TEST(DistributedSampler, SizesMatchTorchFormulaOverASweep) {
  for (int64_t n : {0, 1, 2, 7, 10, 99, 100, 101, 1000})
    for (int64_t r : {1, 2, 3, 4, 7, 8, 15}) {
      for (bool drop : {false, true}) {
        // math.ceil(n / r), or math.ceil((n - r) / r) when dropping a tail.
        const double want = (drop && n % r != 0) ? std::ceil(static_cast<double>(n - r) / r)
                                                 : std::ceil(static_cast<double>(n) / r);
        DistributedSampler s(n, r, r - 1, true, 5, drop);
        EXPECT_EQ(s.num_samples(), std::max<int64_t>(0, static_cast<int64_t>(want))) << n << " " << r << " " << drop;
        EXPECT_EQ(static_cast<int64_t>(s.indices().size()), s.num_samples());
      }
    }
}

TEST(DistributedSampler, ShardsAreDisjointAndCoverEverySample) {
  for (int64_t n : {1, 10, 97, 1000})
    for (int64_t r : {1, 2, 3, 8}) {
      std::multiset<int64_t> seen;
      for (int64_t rank = 0; rank < r; ++rank) {
        DistributedSampler s(n, r, rank, /*shuffle=*/true, /*seed=*/11);
        s.set_epoch(4);
        for (int64_t i : s.indices()) {
          ASSERT_TRUE(i >= 0 && i < n);
          seen.insert(i);
        }
      }
      std::set<int64_t> distinct(seen.begin(), seen.end());
      EXPECT_EQ(static_cast<int64_t>(distinct.size()), n) << n << " " << r;        // every sample
      EXPECT_EQ(static_cast<int64_t>(seen.size()) - n, (r - n % r) % r) << n << " " << r;  // only padding repeats
    }
}

TEST(DistributedSampler, ShuffleIsSeededPerEpoch) {
  DistributedSampler a(100, 2, 0, true, 42), b(100, 2, 0, true, 42), c(100, 2, 0, true, 43);
  EXPECT_EQ(a.indices(), b.indices());
  EXPECT_NE(a.indices(), c.indices());
  const V e0 = a.indices();
  a.set_epoch(1);
  EXPECT_NE(a.indices(), e0);
  b.set_epoch(1);
  EXPECT_EQ(a.indices(), b.indices());
  // torch seeds with seed + epoch: (seed 42, epoch 1) == (seed 43, epoch 0).
  EXPECT_EQ(a.indices(), c.indices());
  // Not sorted, and a permutation on one replica.
  DistributedSampler one(50, 1, 0, true, 9);
  V p = one.indices();
  EXPECT_FALSE(std::is_sorted(p.begin(), p.end()));
  std::sort(p.begin(), p.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(p[static_cast<size_t>(i)], i);
}

TEST(DistributedSampler, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(10, 0, 0), qk::ValueError);
  EXPECT_THROW(DistributedSampler(10, 2, 2), qk::ValueError);
  EXPECT_THROW(DistributedSampler(10, 2, -1), qk::ValueError);
  EXPECT_THROW(DistributedSampler(-1, 1, 0), qk::ValueError);
}

}  // namespace
