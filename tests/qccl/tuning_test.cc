// The machine-derived knobs (src/qccl/algo/tuning.h): sizes follow the
// caches the machine reports, thresholds follow the model and the core count,
// the environment overrides both, and the model takes the direct all-reduce
// exactly where the buffers outgrow the last-level cache. Huge-page advice
// never changes a buffer's contents.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "algo/cost_model.h"
#include "algo/tuning.h"
#include "transport/cma.h"

namespace qccl {
namespace {

struct EnvGuard {
  explicit EnvGuard(const char* name) : name_(name) {}
  ~EnvGuard() { ::unsetenv(name_); }
  const char* name_;
};

TEST(Tuning, SizesFollowTheCachesTheMachineReports) {
  ::setenv("QCCL_SPIN_US", "2.5", 1);
  EnvGuard g("QCCL_SPIN_US");
  Tuning t = machine_tuning(CacheSizes{32 << 10, 1 << 20, 32 << 20}, 2);
  EXPECT_EQ(t.direct_chunk, size_t(32) << 10);
  EXPECT_EQ(t.cma_chunk, size_t(128) << 10);        // an eighth of the L2
  EXPECT_EQ(t.stream_from, size_t(8) << 20);        // 2 ranks x (send + receive) fill the L3
  EXPECT_EQ(t.spin_ns, 2500);                        // QCCL_SPIN_US wins over the measurement
  Tuning big = machine_tuning(CacheSizes{48 << 10, 2 << 20, 256 << 20}, 8);
  EXPECT_EQ(big.direct_chunk, size_t(32) << 10);     // a power of two within the L1
  EXPECT_EQ(big.cma_chunk, size_t(256) << 10);
  EXPECT_EQ(big.stream_from, size_t(16) << 20);
  Tuning unknown = machine_tuning(CacheSizes{}, 2);  // what the library reports nothing for
  EXPECT_EQ(unknown.direct_chunk, Tuning{}.direct_chunk);
  EXPECT_EQ(unknown.cma_chunk, Tuning{}.cma_chunk);
  EXPECT_EQ(unknown.stream_from, Tuning{}.stream_from);
}

TEST(Tuning, SpinIsTheMeasuredCostOfAYield) {
  ::unsetenv("QCCL_SPIN_US");
  double y = measure_yield_ns();
  EXPECT_GT(y, 0);
  Tuning t = machine_tuning(CacheSizes{}, 2);
  EXPECT_GT(t.yield_ns, 0);
  EXPECT_EQ(t.spin_ns, std::min(t.yield_ns, 20000.0));
  EXPECT_NE(t.describe().find("a yield costs"), std::string::npos) << t.describe();
}

TEST(Tuning, SingleCopyThresholdFollowsTheCacheAndTheCoreCount) {
  CostModel m;
  m.llc_bytes = 32 << 20;
  m.host_ranks = 2;
  Tuning t = machine_tuning(CacheSizes{32 << 10, 1 << 20, 32 << 20}, 2);
  derive_thresholds(t, m, 2, /*oversubscribed=*/false, 1 << 20);
  EXPECT_EQ(t.cma_min_bytes, size_t(8) << 20);  // 2 ranks x (send + receive) fill the LLC
  m.host_ranks = 16;
  derive_thresholds(t, m, 16, /*oversubscribed=*/true, 4 << 20);
  EXPECT_EQ(t.cma_min_bytes, (size_t(4) << 20) + 1);  // never what fits in the ring
  m.llc_bytes = 0;  // unknown: two single-copy pieces
  derive_thresholds(t, m, 2, false, 1 << 20);
  EXPECT_EQ(t.cma_min_bytes, 2 * t.cma_chunk);
  ::setenv("QCCL_CMA_MIN_BYTES", "4096", 1);
  ::setenv("QCCL_DIRECT_MIN_BYTES", "12345", 1);
  derive_thresholds(t, m, 4, true, 1 << 20);
  EXPECT_EQ(t.cma_min_bytes, 4096u);
  EXPECT_EQ(t.direct_min_bytes, 12345u);
  ::unsetenv("QCCL_CMA_MIN_BYTES");
  ::unsetenv("QCCL_DIRECT_MIN_BYTES");
}

TEST(Tuning, SharedBufferCheckWhereItCostsAtMostFivePercent) {
  CostModel m;  // static figures: 3 us + 6 GB/s per step, reduce 4 GB/s
  Tuning t;
  derive_thresholds(t, m, 2, false, 1 << 20);
  Algo a = choose(m, "auto", Coll::kAllReduce, 2, t.direct_min_bytes);
  EXPECT_LE(m.alpha_us, 0.05 * predict_us(m, Coll::kAllReduce, a, 2, t.direct_min_bytes));
  Algo below = choose(m, "auto", Coll::kAllReduce, 2, t.direct_min_bytes / 2);
  EXPECT_GT(m.alpha_us, 0.05 * predict_us(m, Coll::kAllReduce, below, 2, t.direct_min_bytes / 2));
}

TEST(Tuning, DirectIsChosenWhereTheBuffersOutgrowTheLastLevelCache) {
  CostModel m;
  m.llc_bytes = 32 << 20;
  m.host_ranks = 2;
  size_t edge = m.llc_bytes / (2 * 2);  // 2 ranks x (send + receive) x S = LLC
  EXPECT_NE(choose(m, "auto", Coll::kAllReduce, 2, edge * 2), Algo::kDirect) << "no single copy yet";
  m.cma_everywhere = true;
  EXPECT_NE(choose(m, "auto", Coll::kAllReduce, 2, edge), Algo::kDirect);
  EXPECT_EQ(choose(m, "auto", Coll::kAllReduce, 2, edge + 4), Algo::kDirect);
  EXPECT_EQ(choose(m, "auto", Coll::kAllReduce, 2, 1 << 30), Algo::kDirect);
  EXPECT_NE(choose(m, "auto", Coll::kBroadcast, 2, 1 << 30), Algo::kDirect);
  EXPECT_EQ(choose(m, "ring", Coll::kAllReduce, 2, 1 << 30), Algo::kRing);  // forced wins
  m.hosts = 2;  // across hosts the ranks cannot reach each other's memory
  EXPECT_NE(choose(m, "auto", Coll::kAllReduce, 2, 1 << 30), Algo::kDirect);
}

TEST(Tuning, HugePageAdviceKeepsTheContents) {
  constexpr size_t kBytes = 9 << 20;  // an unaligned malloc'd buffer with 2 MiB pages inside
  std::vector<uint32_t> buf(kBytes / 4);
  std::iota(buf.begin(), buf.end(), 7u);
  for (int i = 0; i < 3; ++i) advise_huge_pages(reinterpret_cast<char*>(buf.data()) + 12, kBytes - 12);
  for (size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], 7u + i) << "at " << i;
  advise_huge_pages(buf.data(), 100);  // nothing 2 MiB-aligned inside: nothing to do
  buf[5] = 1;
  EXPECT_EQ(buf[5], 1u);
}

}  // namespace
}  // namespace qccl
