// Forked ranks with Megatron's rank grid of any sizes (pipeline, tensor,
// data parallel) through ParallelState, as a training run builds it, and a
// deadline of the test's choosing for every collective and send/receive.
//
//   qk::parallel::ParallelSizes s;
//   s.pipeline_model_parallel_size = 2;
//   auto r = qk_pp_test::on_parallel_ranks(2, "pp2", s, [](int rank, qk::parallel::ParallelState& ps) {
//     ... build this stage, run the schedule, compare with the unsplit run ...
//   });
//   EXPECT_TRUE(r.ok()) << r.summary();
#pragma once

#include <cstdlib>
#include <string>

#include "qccl/ranks.h"
#include "qk/dist/process_group.h"
#include "qk/parallel/parallel_state.h"
#include "qk/qccl/store.h"

namespace qk_pp_test {

struct RankOptions {
  double timeout_s = 30;   // every wait of every group (qccl's deadline)
  double watchdog_s = 120;  // the parent kills ranks that are still running then
};

// Ranks share the machine's cores, so each computes on one thread
// (QK_NUM_THREADS=1 for the pools the ranks start; see tp_ranks.h).
template <typename F>
qccl_test::Result on_parallel_ranks(int n, const std::string& token, const qk::parallel::ParallelSizes& sizes, F body,
                                    RankOptions opt = {}) {
  const char* before = std::getenv("QK_NUM_THREADS");
  const std::string saved = before ? before : "";
  ::setenv("QK_NUM_THREADS", "1", 1);
  qk::qccl::StoreServer server(0, token);
  const int port = server.port();
  qccl_test::Options o;
  o.watchdog_s = opt.watchdog_s;
  auto r = qccl_test::run_ranks(
      n,
      [&](const qccl_test::Rank& me) {
        ::setenv("RANK", std::to_string(me.rank).c_str(), 1);
        ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
        ::setenv("MASTER_ADDR", "127.0.0.1", 1);
        ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
        ::setenv("QK_STORE_TOKEN", token.c_str(), 1);
        ::setenv("QK_RUN", "1", 1);
        qk::dist::init(qk::dist::InitOptions().timeout(opt.timeout_s));
        {
          auto ps = qk::parallel::ParallelState::create(qk::dist::group(), sizes);
          body(me.rank, *ps);
        }
        qk::dist::destroy();
      },
      o);
  if (before)
    ::setenv("QK_NUM_THREADS", saved.c_str(), 1);
  else
    ::unsetenv("QK_NUM_THREADS");
  return r;
}

}  // namespace qk_pp_test
