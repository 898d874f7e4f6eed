// The CPU allocator's cache of large blocks (src/tensor/cpu/block_cache.h):
// reuse by size, eviction on a miss, and the bound that live + cached bytes
// never exceed the peak of live bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "qk/tensor/tensor.h"
#include "cpu/block_cache.h"
#include "cpu/cpu_backend.h"

namespace qk::cpu {
namespace {

constexpr size_t kMin = 128 << 10;

TEST(BlockCache, ReusesAFreedBlockOfTheSameSize) {
  BlockCache c(kMin, true);
  EXPECT_FALSE(c.handles(kMin - 1));
  EXPECT_TRUE(c.handles(kMin));
  void* a = c.allocate(1 << 20);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  std::memset(a, 1, 1 << 20);  // writable
  c.deallocate(a, 1 << 20);
  EXPECT_EQ(c.cached_bytes(), BlockCache::round_up(1 << 20));
  // Rounded to pages, so a few bytes less is the same block.
  void* b = c.allocate((1 << 20) - 100);
  EXPECT_EQ(b, a);
  EXPECT_EQ(c.hits(), 1u);
  EXPECT_EQ(c.cached_bytes(), 0u);
  c.deallocate(b, (1 << 20) - 100);
}

// Sizes a few percent apart share a size class (at most an eighth of a
// power of two above the request), so the freed block serves the next: an
// MoE layer's routed rows and the expert all-to-all's buffers vary so.
TEST(BlockCache, SizesAFewPercentApartShareABlock) {
  BlockCache c(kMin, true);
  const size_t asked = 2'650'000;  // its class: 2.75 MiB
  void* a = c.allocate(asked);
  c.deallocate(a, asked);
  EXPECT_EQ(c.allocate(asked + 130'000), a);  // 5% more, the same class
  EXPECT_EQ(c.hits(), 1u);
  c.deallocate(a, asked + 130'000);
  for (size_t n : {size_t(1) << 17, size_t(1) << 20, size_t(3'000'000), size_t(100) << 20}) {
    EXPECT_GE(BlockCache::round_up(n), n + 4096);  // room for the colour
    EXPECT_LE(BlockCache::round_up(n), (n + 8192) * 9 / 8) << n;
  }
  void* big = c.allocate(asked * 2);  // twice the size: another class, a miss
  EXPECT_NE(big, a);
  EXPECT_EQ(c.hits(), 1u);
  c.deallocate(big, asked * 2);
}

// Where no block of the class is cached, the smallest one under twice the
// size serves (and goes back to the cache at its own size); a block of
// twice the size or more does not.
TEST(BlockCache, ASmallerRequestTakesABlockUnderTwiceItsSize) {
  BlockCache c(kMin, true);
  const size_t three = 3 << 20, two = 2 << 20, one = 1 << 20;
  void* a = c.allocate(three);
  c.deallocate(a, three);
  EXPECT_EQ(c.allocate(two), a);
  EXPECT_EQ(c.hits(), 1u);
  c.deallocate(a, two);
  EXPECT_EQ(c.cached_bytes(), BlockCache::round_up(three));  // back at its own size
  void* b = c.allocate(one);  // 3 MiB is more than twice 1 MiB: a miss
  EXPECT_NE(b, a);
  EXPECT_EQ(c.hits(), 1u);
  c.deallocate(b, one);
}

TEST(BlockCache, MissEvictsOldestBlocksFirst) {
  BlockCache c(kMin, true);
  const size_t s1 = 256 << 10, s2 = 512 << 10;
  void* a = c.allocate(s1);
  void* b = c.allocate(s2);
  c.deallocate(a, s1);  // oldest
  c.deallocate(b, s2);
  // A miss of 128 KiB gives back the oldest block only (256 KiB >= 128 KiB).
  void* d = c.allocate(kMin);
  EXPECT_EQ(c.cached_bytes(), BlockCache::round_up(s2));
  EXPECT_EQ(c.hits(), 0u);
  EXPECT_EQ(c.allocate(s2), b);  // still cached
  EXPECT_EQ(c.hits(), 1u);
  c.deallocate(b, s2);
  c.deallocate(d, kMin);
  // A miss larger than anything cached empties the cache before mapping.
  void* e = c.allocate(1 << 20);
  EXPECT_EQ(c.cached_bytes(), 0u);
  c.deallocate(e, 1 << 20);
}

// A random sequence of allocations and frees of a few sizes, as a training
// loop makes: at every point live + cached <= the peak of live bytes so far.
TEST(BlockCache, NeverHoldsMoreThanThePeakOfLiveBytes) {
  BlockCache c(kMin, true);
  std::mt19937 rng(5);
  const size_t sizes[] = {128 << 10, 256 << 10, 1 << 20, 3 << 20};
  std::vector<std::pair<void*, size_t>> live;
  size_t live_bytes = 0, peak = 0;
  for (int i = 0; i < 2000; ++i) {
    if (live.empty() || rng() % 2 == 0) {
      size_t n = sizes[rng() % 4];
      live.push_back({c.allocate(n), n});
      live_bytes += BlockCache::round_up(n);
    } else {
      size_t k = rng() % live.size();
      c.deallocate(live[k].first, live[k].second);
      live_bytes -= BlockCache::round_up(live[k].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    peak = std::max(peak, live_bytes);
    ASSERT_LE(live_bytes + c.cached_bytes(), peak) << "step " << i;
  }
  EXPECT_GT(c.hits(), 100u);  // and it did reuse
  for (auto [p, n] : live) c.deallocate(p, n);
  c.release_all();
  EXPECT_EQ(c.cached_bytes(), 0u);
}

TEST(BlockCache, KeepsBlocksWhileUnderThePeak) {
  BlockCache c(kMin, true);
  const size_t mb = 1 << 20;
  void* a = c.allocate(4 * mb);
  c.deallocate(a, 4 * mb);
  // A new 1 MiB block beside the cached 4 MiB would pass the 4 MiB peak, so
  // 1 MiB of the cache goes: the whole 4 MiB block (blocks are not split).
  void* b = c.allocate(mb);
  EXPECT_EQ(c.cached_bytes(), 0u);
  c.deallocate(b, mb);
  // Now the peak is 4 MiB: two 1 MiB blocks fit beside the cached one.
  void* d = c.allocate(mb);
  EXPECT_EQ(d, b);
  void* e = c.allocate(mb);
  c.deallocate(d, mb);
  c.deallocate(e, mb);
  EXPECT_EQ(c.cached_bytes(), 2 * BlockCache::round_up(mb));
  EXPECT_EQ(c.allocate(mb), e);  // most recently freed first
  EXPECT_EQ(c.allocate(mb), d);
  c.deallocate(d, mb);
  c.deallocate(e, mb);
}

TEST(BlockCache, DisabledUnmapsAtOnce) {
  BlockCache c(kMin, false);
  void* a = c.allocate(1 << 20);
  c.deallocate(a, 1 << 20);
  EXPECT_EQ(c.cached_bytes(), 0u);
}

TEST(BlockCache, BackendReusesTensorMemory) {
  empty_cache();
  const size_t hits = cache_hits();
  void* first;
  {
    Tensor t = empty({1 << 18});  // 1 MiB of f32
    first = t.raw_data();
  }
  EXPECT_GE(cached_bytes(), BlockCache::round_up(size_t(1) << 20));
  Tensor u = empty({1 << 18});
  EXPECT_EQ(u.raw_data(), first);
  EXPECT_EQ(cache_hits(), hits + 1);
  // Small tensors stay with malloc.
  Tensor small = empty({16});
  EXPECT_EQ(cache_hits(), hits + 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.raw_data()) % 64, 0u);
}

}  // namespace
}  // namespace qk::cpu
