// Process groups between forked ranks: the environment as mpirun or `qk run`
// would set it, tensor collectives, and a rank that never arrives.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "common/free_port.h"
#include "qccl/ranks.h"
#include "qk/base/error.h"
#include "qk/dist/launch_env.h"
#include "qk/dist/process_group.h"
#include "qk/qccl/store.h"

namespace {

using qccl_test::Rank;
using qccl_test::run_ranks;
using qk::dist::ProcessGroup;

using qk::test::free_port;

void clear_launcher_env() {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "QK_STORE_TOKEN", "QK_RUN", "QK_RESTART_COUNT", "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE",
                        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "QK_RANK", "QK_WORLD_SIZE",
                        "QCCL_COMM_ID"})
    ::unsetenv(v);
}

TEST(LaunchEnv, ReadsEachLaunchersVariables) {
  clear_launcher_env();
  auto e = qk::dist::launch_env();
  EXPECT_EQ(e.source, "none");
  EXPECT_EQ(e.world_size, 1);

  ::setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  e = qk::dist::launch_env();
  EXPECT_EQ(e.source, "OMPI");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  clear_launcher_env();

  ::setenv("PMI_RANK", "2", 1);
  ::setenv("PMI_SIZE", "5", 1);
  e = qk::dist::launch_env();
  EXPECT_EQ(e.source, "PMI");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 5);
  clear_launcher_env();

  ::setenv("SLURM_PROCID", "7", 1);
  ::setenv("SLURM_NTASKS", "8", 1);
  ::setenv("SLURM_LOCALID", "3", 1);
  e = qk::dist::launch_env();
  EXPECT_EQ(e.source, "SLURM");
  EXPECT_EQ(e.rank, 7);
  EXPECT_EQ(e.local_rank, 3);
  clear_launcher_env();

  // QK_RANK (any other launcher): after Open MPI's, before PMI's.
  ::setenv("QK_RANK", "1", 1);
  ::setenv("QK_WORLD_SIZE", "3", 1);
  ::setenv("PMI_RANK", "2", 1);
  ::setenv("PMI_SIZE", "5", 1);
  e = qk::dist::launch_env();
  EXPECT_EQ(e.source, "QK_RANK");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 3);
  EXPECT_EQ(e.local_rank, 0);
  ::setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_EQ(qk::dist::launch_env().source, "OMPI");
  clear_launcher_env();
  ::setenv("QK_RANK", "0", 1);
  EXPECT_THROW(qk::dist::launch_env(), qk::ValueError) << "QK_RANK without QK_WORLD_SIZE";
  clear_launcher_env();

  // RANK (qk run, torchrun) wins over the others.
  ::setenv("SLURM_PROCID", "7", 1);
  ::setenv("SLURM_NTASKS", "8", 1);
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("MASTER_ADDR", "10.0.0.1", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  ::setenv("QK_RUN", "1", 1);
  ::setenv("QK_RESTART_COUNT", "2", 1);
  e = qk::dist::launch_env();
  EXPECT_EQ(e.source, "qk run");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.restart_count, 2);
  clear_launcher_env();

  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  EXPECT_THROW(qk::dist::launch_env(), qk::ValueError);
  ::setenv("RANK", "x", 1);
  EXPECT_THROW(qk::dist::launch_env(), qk::ValueError);
  clear_launcher_env();
}

// Every rank: env as mpirun sets it plus MASTER_*; rank 0 hosts the store.
void mpirun_env(const Rank& me, int port) {
  clear_launcher_env();
  ::setenv("OMPI_COMM_WORLD_RANK", std::to_string(me.rank).c_str(), 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", std::to_string(me.nranks).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
}

void check_collectives(ProcessGroup& pg) {
  int r = pg.rank(), w = pg.size();
  qk::Tensor x = qk::full({1000}, double(r + 1));
  auto a = pg.all_reduce_async(x);
  qk::Tensor y = qk::full({17}, double(r));
  auto b = pg.all_reduce_async(y, qk::dist::ReduceOp::max);  // queued behind a
  b->wait();
  a->wait();
  REQUIRE(x.data_ptr<float>()[999] == float(w * (w + 1) / 2), "sum ", x.data_ptr<float>()[999]);
  REQUIRE(y.data_ptr<float>()[0] == float(w - 1), "max ", y.data_ptr<float>()[0]);

  qk::Tensor h = qk::full({5}, r == 0 ? 3.0 : 0.0, qk::DType::bf16);
  pg.broadcast(h, 0);
  REQUIRE(h.to_vector<float>()[4] == 3.0f, "broadcast bf16");

  qk::Tensor mine = qk::full({3}, double(r), qk::DType::i64);
  qk::Tensor all = qk::empty({w * 3}, qk::DType::i64);
  pg.all_gather(all, mine);
  for (int k = 0; k < w; ++k) REQUIRE(all.data_ptr<int64_t>()[3 * k] == k, "all_gather block ", k);

  qk::Tensor in = qk::full({w * 2}, 1.0, qk::DType::f64);
  qk::Tensor out = qk::empty({2}, qk::DType::f64);
  pg.reduce_scatter(out, in, qk::dist::ReduceOp::avg);
  REQUIRE(out.data_ptr<double>()[1] == 1.0, "reduce_scatter avg");
  pg.barrier();

  // Misuse is refused before anything is sent.
  bool threw = false;
  try {
    pg.all_gather(qk::empty({w * 3 + 1}, qk::DType::i64), mine);
  } catch (const qk::ValueError&) {
    threw = true;
  }
  REQUIRE(threw, "all_gather accepted a wrongly sized output");
}

TEST(ProcessGroup, CollectivesOnTwoAndFourRanksRankZeroHostsTheStore) {
  for (int n : {2, 4}) {
    int port = free_port();
    auto r = run_ranks(n, [port](const Rank& me) {
      mpirun_env(me, port);
      auto pg = ProcessGroup::create(qk::dist::launch_env(), qk::dist::InitOptions().timeout(20));
      REQUIRE(pg->rank() == me.rank && pg->size() == me.nranks, "rank ", pg->rank());
      check_collectives(*pg);
    });
    EXPECT_TRUE(r.ok()) << n << " ranks: " << r.summary();
  }
}

TEST(ProcessGroup, UnderALauncherStore) {
  // As under `qk run`: the store exists already and needs the token.
  qk::qccl::StoreServer server(0, "tok");
  int port = server.port();
  auto r = run_ranks(3, [port](const Rank& me) {
    clear_launcher_env();
    ::setenv("RANK", std::to_string(me.rank).c_str(), 1);
    ::setenv("WORLD_SIZE", "3", 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    ::setenv("QK_STORE_TOKEN", "tok", 1);
    ::setenv("QK_RUN", "1", 1);
    qk::dist::init(qk::dist::InitOptions().timeout(20));
    REQUIRE(qk::dist::rank() == me.rank && qk::dist::world_size() == 3, "rank ", qk::dist::rank());
    check_collectives(qk::dist::group());
    qk::dist::destroy();
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(ProcessGroup, ARankThatNeverArrivesIsNamed) {
  int port = free_port();
  // WORLD_SIZE 4, but rank 2 never starts: ranks 0, 1, 3 run.
  auto r = run_ranks(3, [port](const Rank& me) {
    qccl_test::Rank as = me;
    as.rank = me.rank == 2 ? 3 : me.rank;
    as.nranks = 4;
    mpirun_env(as, port);
    try {
      ProcessGroup::create(qk::dist::launch_env(), qk::dist::InitOptions().timeout(1.5));
    } catch (const qk::TimeoutError& e) {
      std::string m = e.what();
      REQUIRE(m.find("rank(s) 2 never arrived") != std::string::npos, m);
      return;
    }
    REQUIRE(false, "the group formed without rank 2");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(ProcessGroup, NoRendezvousIsAClearError) {
  clear_launcher_env();
  ::setenv("PMI_RANK", "0", 1);
  ::setenv("PMI_SIZE", "2", 1);
  try {
    ProcessGroup::create(qk::dist::launch_env());
    FAIL() << "created a 2-rank group with no rendezvous";
  } catch (const qk::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
  }
  clear_launcher_env();
}

TEST(ProcessGroup, SingleProcessNeedsNothing) {
  clear_launcher_env();
  auto pg = ProcessGroup::create(qk::dist::launch_env());
  EXPECT_EQ(pg->size(), 1);
  qk::Tensor x = qk::full({4}, 2.0);
  pg->all_reduce(x);
  EXPECT_EQ(x.data_ptr<float>()[0], 2.0f);
}

}  // namespace
