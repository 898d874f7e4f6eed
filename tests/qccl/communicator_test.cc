// The C++ layer: async calls on a progress thread, errors as exceptions, abort.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "qk/base/error.h"
#include "qk/qccl/communicator.h"
#include "ranks.h"

namespace qccl_test {
namespace {

TEST(Communicator, AsyncAllReduceOverlapsWithWork) {
  auto r = run_ranks(3, [](const Rank& me) {
    auto comm = qk::qccl::Communicator::init(me.nranks, me.ids[0], me.rank,
                                             qk::qccl::CommOptions().timeout(30).comm_name("ddp"));
    std::vector<float> a(100000, 1.0f + me.rank), b(1000, 2.0f);
    auto w1 = comm->all_reduce_async(a.data(), a.data(), a.size(), qcclFloat32, qcclSum);
    auto w2 = comm->all_reduce_async(b.data(), b.data(), b.size(), qcclFloat32, qcclMax);
    double busy = 0;
    for (int i = 0; i < 100000; ++i) busy += i * 1e-9;  // "backward" while the calls run
    w1->wait();
    w2->wait();
    REQUIRE(w1->ready() && w2->ready(), "");
    REQUIRE(a[0] == 6.0f && a[99999] == 6.0f && b[5] == 2.0f, "got ", a[0], " ", b[5], " ", busy);
    comm->barrier();
    std::vector<int32_t> g(3, -1);
    int32_t mine = me.rank * 10;
    comm->all_gather_async(&mine, g.data(), 1, qcclInt32)->wait();
    REQUIRE(g[0] == 0 && g[1] == 10 && g[2] == 20, "allgather ", g[0], g[1], g[2]);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(Communicator, FailuresBecomeExceptionsAndAbortFailsQueuedWork) {
  auto r = run_ranks(2, [](const Rank& me) {
    auto comm = qk::qccl::Communicator::init(me.nranks, me.ids[0], me.rank,
                                             qk::qccl::CommOptions().timeout(20));
    if (me.rank == 1) {  // never takes part; leaves after rank 0 aborted
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      comm->abort();
      return;
    }
    float x = 1;
    auto w1 = comm->all_reduce_async(&x, &x, 1, qcclFloat32, qcclSum);
    auto w2 = comm->all_reduce_async(&x, &x, 1, qcclFloat32, qcclSum);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto t0 = std::chrono::steady_clock::now();
    comm->abort();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE(s < 2.0, "abort took ", s, " s");  // the deadline is 20 s
    bool threw = false;
    try {
      w1->wait();
    } catch (const qk::Error& e) {
      threw = true;
    }
    REQUIRE(threw, "the aborted call must throw");
    REQUIRE(w1->result() == qcclInvalidUsage, "the aborted call: ", qcclGetErrorString(w1->result()));
    REQUIRE(w2->result() == qcclInvalidUsage, "queued work after abort: ", qcclGetErrorString(w2->result()));
    REQUIRE(comm->all_reduce_async(&x, &x, 1, qcclFloat32, qcclSum)->result() == qcclInvalidUsage, "");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qccl_test
