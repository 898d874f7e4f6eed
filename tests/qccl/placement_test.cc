// Where ranks run: spreading ranks that share a CPU (set-up only) and
// binding ranks that outnumber their CPUs (kept).
#include <gtest/gtest.h>

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "algo/placement.h"
#include "comm.h"
#include "ranks.h"

namespace qccl {
namespace {

RankCpus on(uint64_t host, int cpu, std::vector<int> allowed) {
  return RankCpus{host, cpu, static_cast<int>(allowed.size()), std::move(allowed)};
}
Placement move_to(int cpu) { return {cpu, false, false}; }
Placement bind_to(int cpu) { return {cpu, true, true}; }
const Placement stay{};
const Placement stay_oversubscribed{-1, false, true};

TEST(PlacementPlan, LaterRanksSharingACpuMoveToFreeOnes) {
  using V = std::vector<int>;
  const V all4{0, 1, 2, 3};
  using P = std::vector<Placement>;
  EXPECT_EQ(placement_plan({on(7, 0, {0, 1}), on(7, 0, {0, 1})}, true, true), (P{stay, move_to(1)}));
  EXPECT_EQ(placement_plan({on(7, 0, all4), on(7, 0, all4), on(7, 1, all4)}, true, true),
            (P{stay, move_to(2), stay}));
  EXPECT_EQ(placement_plan({on(7, 3, all4), on(7, 3, all4), on(7, 3, all4)}, true, true),
            (P{stay, move_to(0), move_to(1)}));
  EXPECT_EQ(placement_plan({on(7, 0, {0, 1}), on(8, 0, {0, 1})}, true, true), (P{stay, stay}))
      << "other hosts: no conflict";
  EXPECT_EQ(placement_plan({on(7, 0, {0, 1}), on(7, 1, {0, 1})}, true, true), (P{stay, stay}));
  EXPECT_EQ(placement_plan({on(7, 0, {0, 1}), on(7, 0, {0, 1})}, false, true), (P{stay, stay}))
      << "QCCL_SPREAD=0";
}

TEST(PlacementPlan, RanksOutnumberingTheirCpusAreBoundEvenly) {
  using P = std::vector<Placement>;
  std::vector<RankCpus> four_on_two(4, on(7, 0, {0, 1}));
  EXPECT_EQ(placement_plan(four_on_two, true, true), (P{bind_to(0), bind_to(1), bind_to(0), bind_to(1)}));
  EXPECT_EQ(placement_plan(four_on_two, true, false), (P(4, stay_oversubscribed)))
      << "QCCL_BIND=0, and nothing to spread to";
  // Ranks already confined to one CPU stay, and count: the others go elsewhere.
  EXPECT_EQ(placement_plan({on(7, 0, {0}), on(7, 0, {0, 1, 2}), on(7, 0, {0, 1, 2}), on(7, 0, {0, 1, 2}),
                            on(7, 0, {0, 1, 2})},
                           true, true),
            (P{stay_oversubscribed, bind_to(1), bind_to(2), bind_to(0), bind_to(1)}));
  // Per host: the host with a CPU per rank is left alone.
  EXPECT_EQ(placement_plan({on(7, 0, {0}), on(7, 0, {0}), on(8, 0, {0, 1}), on(8, 1, {0, 1})}, true, true),
            (P{stay_oversubscribed, stay_oversubscribed, stay, stay}));
  // A mask's count, not its (cut) list, says how many CPUs it allows: 3
  // ranks listing 2 of 100 CPUs are not oversubscribed.
  std::vector<RankCpus> cut(3, RankCpus{7, 0, 100, {0, 1}});
  EXPECT_EQ(placement_plan(cut, false, true), (P(3, stay)));
  // A rank that could not read its mask (none reported): nothing is known of its host.
  EXPECT_EQ(placement_plan({on(7, 0, {0}), on(7, 0, {0}), RankCpus{7, 0, 0, {}}}, true, true), (P(3, stay)));
}

}  // namespace
}  // namespace qccl

namespace qccl_test {
namespace {

std::vector<int> cpus_of_mask() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  REQUIRE(::sched_getaffinity(0, sizeof mask, &mask) == 0, "sched_getaffinity");
  std::vector<int> cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &mask)) cpus.push_back(i);
  return cpus;
}

void confine_to(const std::vector<int>& cpus) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int c : cpus) CPU_SET(c, &mask);
  REQUIRE(::sched_setaffinity(0, sizeof mask, &mask) == 0, "sched_setaffinity");
}

// 4 ranks whose masks allow the same 2 CPUs (of however many the machine
// has): oversubscribed, and after init each is bound to one of them, two per
// CPU; with QCCL_BIND=0 the masks are as they were.
TEST(PlacementInit, RanksOutnumberingTheirCpusAreBoundTwoPerCpu) {
  const std::vector<int> mine = cpus_of_mask();
  if (mine.size() < 2) GTEST_SKIP() << "needs a mask of 2 CPUs";
  const std::vector<int> two{mine[0], mine[1]};
  for (bool bind : {true, false}) {
    auto r = run_ranks(4, [&](const Rank& me) {
      confine_to(two);
      if (!bind) ::setenv("QCCL_BIND", "0", 1);
      qcclComm_t comm = me.init();
      REQUIRE(comm->oversubscribed, "4 ranks confined to 2 CPUs not taken as oversubscribed");
      const std::vector<int> after = cpus_of_mask();
      if (!bind) {
        REQUIRE(after == two, "QCCL_BIND=0: the mask changed to ", after.size(), " CPUs");
      } else {
        REQUIRE(after.size() == 1 && (after[0] == two[0] || after[0] == two[1]), "rank ", me.rank,
                ": bound to ", after.size(), " CPUs, first ", after.empty() ? -1 : after[0]);
        int32_t cpu = after[0], all[4] = {};
        REQUIRE_OK(qcclAllGather(&cpu, all, 1, qcclInt32, comm, nullptr));
        REQUIRE(std::count(all, all + 4, two[0]) == 2 && std::count(all, all + 4, two[1]) == 2,
                "not two per CPU: ", all[0], " ", all[1], " ", all[2], " ", all[3]);
      }
      REQUIRE_OK(qcclCommDestroy(comm));
    });
    EXPECT_TRUE(r.ok()) << (bind ? "bound: " : "QCCL_BIND=0: ") << r.summary();
  }
}

// 2 ranks confined to one CPU: oversubscribed whatever sysconf counts (2
// CPUs on the VM), waits yield at once; nothing to bind, the masks stay.
TEST(PlacementInit, TwoRanksConfinedToOneCpuAreOversubscribed) {
  const std::vector<int> mine = cpus_of_mask();
  const std::vector<int> one{mine[0]};
  auto r = run_ranks(2, [&](const Rank& me) {
    confine_to(one);
    qcclComm_t comm = me.init();
    REQUIRE(comm->oversubscribed, "2 ranks on one CPU not taken as oversubscribed");
    REQUIRE(cpus_of_mask() == one, "the mask changed");
    float x = 1.0f + me.rank, sum = 0;
    REQUIRE_OK(qcclAllReduce(&x, &sum, 1, qcclFloat32, qcclSum, comm, nullptr));
    REQUIRE(sum == 3.0f, "sum ", sum);
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qccl_test
