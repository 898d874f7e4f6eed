// Process groups under `qk run`: tensor collectives on 2 and 4 ranks, a group
// restarted after a rank is killed, and `qk perf` meeting through the store.
#include <gtest/gtest.h>

#include "cli/run_qk.h"

namespace {
using qk::test::run_qk;

TEST(RunDist, TensorCollectivesOnTwoAndFourRanks) {
  for (int n : {2, 4}) {
    auto r = run_qk("run --nproc-per-node " + std::to_string(n) + " -- '" QK_DIST_WORKER "'");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    for (int k = 0; k < n; ++k) {
      std::string want = "[rank" + std::to_string(k) + "]: rank " + std::to_string(k) + " of " +
                         std::to_string(n) + ": all collectives OK";
      EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
    }
  }
}

TEST(RunDist, AGroupRestartedAfterAKilledRankFormsAgain) {
  // Rank 1 is killed before it joins in attempt 0; rank 0 is then stuck in
  // the rendezvous until the launcher stops it. Attempt 1 must not read the
  // keys attempt 0 left in the store.
  auto r = run_qk("run --nproc-per-node 2 --max-restarts 1 --grace 1 -- sh -c "
                  "'if [ $QK_RESTART_COUNT = 0 ] && [ $RANK = 1 ]; then kill -9 $$; fi; exec \"" QK_DIST_WORKER "\"'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("was killed by signal 9 (SIGKILL); restarting all workers (restart 1 of 1)"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank1]: rank 1 of 2: all collectives OK"), std::string::npos) << r.output;
}

TEST(RunDist, PerfUnderQkRun) {
  auto r = run_qk("run --nproc-per-node 2 -- '" QK_BIN "' perf all_reduce -b 8 -e 4K -f 8 -n 2 -w 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0]: # qk perf all_reduce: nranks 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank0]: # Out of bounds values : 0 OK"), std::string::npos) << r.output;
}

}  // namespace
