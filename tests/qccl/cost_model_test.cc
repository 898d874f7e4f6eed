// The cost model: configured figures move the ring / recursive-doubling
// switch to the size the alpha-beta formulas give; a new communicator
// measures its links (or takes the static figures) and picks per call.
#include <gtest/gtest.h>

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "algo/cost_model.h"
#include "algo/cost_probe.h"
#include "comm.h"
#include "ranks.h"

namespace qccl {
namespace {

struct ScopedEnv {
  ScopedEnv(const char* lat, const char* bw, const char* reduce = "1e6") {
    ::setenv("QCCL_LAT_US", lat, 1);
    ::setenv("QCCL_BW_GBPS", bw, 1);
    ::setenv("QCCL_REDUCE_GBPS", reduce, 1);
  }
  ~ScopedEnv() {
    ::unsetenv("QCCL_LAT_US");
    ::unsetenv("QCCL_BW_GBPS");
    ::unsetenv("QCCL_REDUCE_GBPS");
  }
};

// All-reduce over n ranks, alpha us per message, beta bytes per us:
//   rd   = log2(n) (alpha + s / beta)        ring = 2 (n-1) (alpha + s / (n beta))
// For n = 4 they cross at s = 8 alpha beta, for n = 8 at s = 8.8 alpha beta
// (reductions made free here with QCCL_REDUCE_GBPS=1e6).
TEST(CostModel, ConfiguredFiguresSwitchAlgorithmAtTheExpectedSize) {
  ScopedEnv env("shm=10,tcp=50", "shm=1,tcp=0.5");
  CostModel shm = CostModel::for_transport("shm");  // 10 us, 1000 B/us: n=4 switch at 80000 B
  EXPECT_EQ(shm.alpha_us, 10);
  EXPECT_EQ(shm.gbps, 1);
  EXPECT_STREQ(shm.source, "configured");
  EXPECT_EQ(choose(shm, "auto", Coll::kAllReduce, 4, 79000), Algo::kRecursiveDoubling);
  EXPECT_EQ(choose(shm, "auto", Coll::kAllReduce, 4, 81000), Algo::kRing);
  EXPECT_EQ(choose(shm, "auto", Coll::kAllReduce, 8, 87000), Algo::kRecursiveDoubling);
  EXPECT_EQ(choose(shm, "auto", Coll::kAllReduce, 8, 89000), Algo::kRing);
  CostModel tcp = CostModel::for_transport("tcp");  // 50 us, 500 B/us: n=4 switch at 200000 B
  EXPECT_EQ(choose(tcp, "auto", Coll::kAllReduce, 4, 199000), Algo::kRecursiveDoubling);
  EXPECT_EQ(choose(tcp, "auto", Coll::kAllReduce, 4, 201000), Algo::kRing);
  // QCCL_ALGO still wins.
  EXPECT_EQ(choose(tcp, "ring", Coll::kAllReduce, 4, 8), Algo::kRing);
  EXPECT_EQ(choose(tcp, "rd", Coll::kAllReduce, 4, 64 << 20), Algo::kRecursiveDoubling);
}

// Two ranks move the same bytes either way, but recursive doubling reduces
// all s bytes and the ring s/2: ring wins from s = 2 alpha R (R: reduce speed).
TEST(CostModel, OnTwoRanksTheReductionCostDecides) {
  ScopedEnv env("10", "1", "1");  // 10 us, 1000 B/us, reduce 1000 B/us: switch at 20000 B
  CostModel m = CostModel::for_transport("shm");
  EXPECT_EQ(m.reduce_gbps, 1);
  EXPECT_EQ(choose(m, "auto", Coll::kAllReduce, 2, 19000), Algo::kRecursiveDoubling);
  EXPECT_EQ(choose(m, "auto", Coll::kAllReduce, 2, 21000), Algo::kRing);
}

TEST(CostModel, OneFigureForEveryTransportAndBadSpecsRejected) {
  {
    ScopedEnv env("7", "3");
    EXPECT_EQ(static_link_cost("shm").lat_us, 7);
    EXPECT_EQ(static_link_cost("tcp").lat_us, 7);
    EXPECT_EQ(static_link_cost("tcp").gbps, 3);
    EXPECT_TRUE(lat_configured("tcp"));
  }
  {
    ScopedEnv env("tcp=40", "");
    EXPECT_EQ(static_link_cost("tcp").lat_us, 40);
    EXPECT_EQ(static_link_cost("shm").lat_us, CostModel::for_transport("shm").alpha_us);
    EXPECT_FALSE(lat_configured("shm"));
  }
  {
    ScopedEnv env("shm=fast", "");
    EXPECT_THROW(static_link_cost("shm"), qk::ValueError);
  }
  {
    ScopedEnv env("ib=3", "");
    EXPECT_THROW(static_link_cost("shm"), qk::ValueError);
  }
}

// 2 hosts x 2 ranks (ring 0 1 | 2 3) behind one link of 125 B/us each way,
// shared memory and reductions free. Flat ring: 6 steps of s/4, each host link
// carrying one ring hop, 1.5 s per direction. Hierarchical: the 2 cross-host
// rings of s/4 each share the link, 2 steps of s/2 through it, s per
// direction. So ring / hierarchical = 1.5, not 3 (the cross-host rings timed
// as if each had the link to itself).
CostModel two_hosts_of_two(double tcp_lat_us) {
  CostModel m;
  m.shm = LinkCost{0, 1e9};
  m.tcp = LinkCost{tcp_lat_us, 0.125};
  m.use_slowest(true, true);
  m.reduce_gbps = 1e9;
  m.hosts = 2;
  m.ranks_per_host = 2;
  return m;
}

TEST(CostModel, HierarchicalCrossHostRingsShareTheHostLink) {
  CostModel m = two_hosts_of_two(0);
  double s = 16 << 20;
  EXPECT_NEAR(predict_us(m, Coll::kAllReduce, Algo::kRing, 4, s), 1.5 * s / 125, 1e-6 * s);
  EXPECT_NEAR(predict_us(m, Coll::kAllReduce, Algo::kHierarchical, 4, s), s / 125, 1e-6 * s);
  EXPECT_EQ(choose(m, "auto", Coll::kAllReduce, 4, s), Algo::kHierarchical);
  // Latency: the ring pays 6 tcp hops, the hierarchical 2 (and 2 shm ones).
  m = two_hosts_of_two(100);
  EXPECT_NEAR(predict_us(m, Coll::kAllReduce, Algo::kRing, 4, 0), 600, 1e-6);
  EXPECT_NEAR(predict_us(m, Coll::kAllReduce, Algo::kHierarchical, 4, 0), 200, 1e-6);
  // 4 hosts x 2: cross-host steps 2 (H-1) = 6 of s/4 through each host link.
  m.tcp.lat_us = 0;
  m.hosts = 4;
  EXPECT_NEAR(predict_us(m, Coll::kAllReduce, Algo::kHierarchical, 8, s), 6 * s / 4 / 125, 1e-6 * s);
}

// The hierarchical algorithm reduces too: (L-1) blocks of s/L inside the
// host, (H-1) of s/(LH) across, as the flat ring's n-1 blocks of s/n.
TEST(CostModel, HierarchicalCountsItsReductions) {
  CostModel m = two_hosts_of_two(0);
  m.tcp.gbps = 1e9;
  m.use_slowest(true, true);
  m.reduce_gbps = 1;  // 1000 B/us
  double s = 1 << 20;
  EXPECT_NEAR(predict_us(m, Coll::kAllReduce, Algo::kHierarchical, 4, s), (s / 2 + s / 4) / 1000, 1e-3);
  EXPECT_NEAR(predict_us(m, Coll::kAllReduce, Algo::kRing, 4, s), 3 * (s / 4) / 1000, 1e-3);
}

// Probe figures: the lower quartile of the pings (delays from other
// processes only add) and the best train after the warm-up one (a token
// bucket's burst lets the first through fast).
TEST(CostProbe, LinkFiguresSkipTheWarmUpTrainAndNoisyPings) {
  std::vector<double> rtts = {400, 2400, 380, 5000, 410, 390, 3000, 2500};
  // 4 MiB at 125 B/us: the warm-up through a 256 KiB burst (31457 us + rtt),
  // then the steady rate (33554 us + rtt).
  double bytes = 4 << 20, rtt = 400;
  std::vector<double> trains = {31457 + rtt, 33554 + rtt + 50, 33554 + rtt};
  LinkCost l = link_figures(rtts, trains, 4 << 20);
  EXPECT_EQ(l.lat_us, 200);
  EXPECT_NEAR(l.gbps, bytes / 33554 / 1e3, 1e-4);
}

TEST(CostModel, EveryAlgorithmIsInTheTableAndParses) {
  for (const AlgoDesc& d : algorithms()) {
    Algo a;
    ASSERT_TRUE(parse_algo(d.name, &a));
    EXPECT_EQ(a, d.algo);
    EXPECT_STREQ(algo_name(a), d.name);
  }
}

}  // namespace
}  // namespace qccl

namespace qccl_test {
namespace {

Options two_ids() {
  Options o;
  o.num_ids = 2;
  return o;
}

// Ranks measure their links at init and agree on them; with figures
// configured instead (static), the flight recorder shows the switch at 80000 bytes.
TEST(CostModelInit, MeasuredFiguresAgreeAcrossRanksAndConfiguredOnesDecide) {
  auto r = run_ranks(4, [](const Rank& me) {
    qcclComm_t comm = me.init();
    // With more ranks than CPUs (4 on the 2-core VM) shared memory is timed
    // as ring steps of all ranks at once, otherwise pair by pair: measured
    // either way, never the static 3 us + 6 GB/s.
    const qccl::CostModel& m = comm->cost;
    REQUIRE(std::string(m.source) == "measured", "source ", m.source, comm->oversubscribed ? " (oversubscribed)" : "");
    const qccl::LinkCost fixed = qccl::static_link_cost("shm");
    REQUIRE(m.shm.lat_us > 0 && m.shm.gbps > 0 && m.shm.lat_us != fixed.lat_us && m.shm.gbps != fixed.gbps,
            "shm ", m.shm.lat_us, " us ", m.shm.gbps, " GB/s", comm->oversubscribed ? " (oversubscribed)" : "");
    REQUIRE(!m.cma_everywhere || (m.cma.lat_us > 0 && m.cma.gbps > 0), "single copy ", m.cma.lat_us, " us ",
            m.cma.gbps, " GB/s");
    double mine[5] = {m.alpha_us, m.gbps, m.cma.lat_us, m.cma.gbps, m.cma_everywhere ? 1.0 : 0.0}, all[20];
    REQUIRE_OK(qcclAllGather(mine, all, 5, qcclFloat64, comm, nullptr));
    for (int q = 0; q < me.nranks; ++q)
      for (int i = 0; i < 5; ++i)
        REQUIRE(all[5 * q + i] == mine[i], "rank ", q, " uses other figures (field ", i, ")");
    REQUIRE_OK(qcclCommDestroy(comm));

    ::setenv("QCCL_COST_MODEL", "static", 1);
    ::setenv("QCCL_LAT_US", "shm=10", 1);
    ::setenv("QCCL_BW_GBPS", "shm=1", 1);
    ::setenv("QCCL_REDUCE_GBPS", "1e6", 1);  // reductions free: the switch is at 8 alpha beta
    comm = me.init(1);
    REQUIRE(comm->cost.alpha_us == 10 && comm->cost.gbps == 1, "configured figures not used");
    std::vector<float> buf(81000 / 4);
    REQUIRE_OK(qcclAllReduce(buf.data(), buf.data(), 79000 / 4, qcclFloat32, qcclSum, comm, nullptr));
    REQUIRE_OK(qcclAllReduce(buf.data(), buf.data(), 81000 / 4, qcclFloat32, qcclSum, comm, nullptr));
    std::string fr = comm->fr.dump();
    REQUIRE(fr.find("79000     - rd") != std::string::npos && fr.find("81000     - ring") != std::string::npos,
            "flight recorder:\n", fr);
    REQUIRE_OK(qcclCommDestroy(comm));
  }, two_ids());
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Init may move a rank off a CPU another rank of its host runs on, but
// never leaves it bound: every rank's CPU mask after init is the one before.
TEST(CostModelInit, InitLeavesTheCpuMaskAsItWas) {
  auto r = run_ranks(2, [](const Rank& me) {
    cpu_set_t before, after;
    CPU_ZERO(&before);
    CPU_ZERO(&after);
    REQUIRE(::sched_getaffinity(0, sizeof before, &before) == 0, "sched_getaffinity");
    qcclComm_t comm = me.init();
    REQUIRE(::sched_getaffinity(0, sizeof after, &after) == 0, "sched_getaffinity");
    REQUIRE(CPU_EQUAL(&before, &after), "the CPU mask changed: ", CPU_COUNT(&before), " CPUs before, ",
            CPU_COUNT(&after), " after");
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Ranks outnumbering their CPUs (4 confined to one, on any machine): shared
// memory is timed as ring steps of all of them at once, and every rank takes
// the same figures.
TEST(CostModelInit, OversubscribedRanksTimeRingStepsTogether) {
  // One CPU for all: each rank's own current CPU would be 4 different ones
  // on a machine with 4 free.
  const int cpu = ::sched_getcpu();
  ASSERT_GE(cpu, 0);
  auto r = run_ranks(4, [cpu](const Rank& me) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    REQUIRE(::sched_setaffinity(0, sizeof one, &one) == 0, "sched_setaffinity");
    qcclComm_t comm = me.init();
    REQUIRE(comm->oversubscribed, "4 ranks on one CPU not oversubscribed");
    const qccl::CostModel& m = comm->cost;
    const qccl::LinkCost fixed = qccl::static_link_cost("shm");
    REQUIRE(std::string(m.source) == "measured", "source ", m.source);
    REQUIRE(m.shm.lat_us > 0 && m.shm.gbps > 0 && m.shm.lat_us != fixed.lat_us && m.shm.gbps != fixed.gbps,
            "shm ", m.shm.lat_us, " us ", m.shm.gbps, " GB/s: not measured");
    double mine[2] = {m.shm.lat_us, m.shm.gbps}, all[8];
    REQUIRE_OK(qcclAllGather(mine, all, 2, qcclFloat64, comm, nullptr));
    for (int q = 0; q < me.nranks; ++q)
      REQUIRE(all[2 * q] == mine[0] && all[2 * q + 1] == mine[1], "rank ", q, " took other shm figures");
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// A rank per CPU: shared memory is timed.
TEST(CostModelInit, RanksWithACoreEachMeasureSharedMemory) {
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "needs 2 CPUs";
  auto r = run_ranks(2, [](const Rank& me) {
    qcclComm_t comm = me.init();
    REQUIRE(!comm->oversubscribed, "2 ranks on ", ::sysconf(_SC_NPROCESSORS_ONLN), " CPUs oversubscribed");
    REQUIRE(std::string(comm->cost.source) == "measured", "source ", comm->cost.source);
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qccl_test
