// TCP forced with 1, 2 and 4 sockets per peer (QCCL_NSOCKS): every collective
// exact, and order-sensitive float sums bit-identical across socket counts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "every_collective.h"
#include "comm.h"

namespace qccl_test {
namespace {

// Random floats whose sum depends on the order of reduction; the hash of the
// result (per algorithm) must not depend on how many sockets carried it.
uint64_t random_sum_hash(qcclComm_t comm, const Rank& me) {
  size_t count = 600001;  // 2.4 MB: many stripes per ring step
  std::vector<float> in(count), out(count);
  uint64_t s = 88172645463325252ull + me.rank * 7919;
  for (auto& v : in) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    v = static_cast<float>((static_cast<double>(s % 2000001) - 1e6) / 3e5);
  }
  REQUIRE_OK(qcclAllReduce(in.data(), out.data(), count, qcclFloat32, qcclSum, comm, nullptr));
  return fnv1a(out.data(), count * sizeof(float));
}

TEST(TcpSockets, OneTwoAndFourSocketsPerPeerGiveIdenticalResults) {
  std::string dir = "/tmp/qccl_nsocks_" + std::to_string(::getpid());
  std::vector<std::string> hashes;
  for (int ns : {1, 2, 4}) {
    std::string path = dir + "_" + std::to_string(ns);
    Options o;
    o.transport = "tcp";
    o.num_ids = 2;
    auto r = run_ranks(3, [&](const Rank& me) {
      ::setenv("QCCL_NSOCKS", std::to_string(ns).c_str(), 1);
      std::string line;
      for (int k = 0; k < 2; ++k) {
        const char* algo = k == 0 ? "ring" : "rd";
        qcclComm_t comm = me.init(k, algo);
        for (int p = 0; p < me.nranks; ++p)
          if (p != me.rank)
            REQUIRE(comm->conns[p]->nsocks() == ns, "rank ", p, " has ", comm->conns[p]->nsocks(),
                    " sockets, expected QCCL_NSOCKS=", ns);
        if (k == 0) check_every_collective(comm, me);
        line += std::to_string(random_sum_hash(comm, me)) + " ";
        REQUIRE_OK(qcclCommDestroy(comm));
      }
      if (me.rank == 0) std::ofstream(path) << line;
    }, o);
    ASSERT_TRUE(r.ok()) << "QCCL_NSOCKS=" << ns << ": " << r.summary();
    std::string line;
    std::getline(std::ifstream(path), line);
    std::remove(path.c_str());
    hashes.push_back(line);
  }
  EXPECT_FALSE(hashes[0].empty());
  EXPECT_EQ(hashes[0], hashes[1]) << "1 vs 2 sockets";
  EXPECT_EQ(hashes[0], hashes[2]) << "1 vs 4 sockets";
}

TEST(TcpSockets, MismatchedSocketCountsAreRefusedWithAClearError) {
  Options o;
  o.transport = "tcp";
  auto r = run_ranks(2, [](const Rank& me) {
    ::setenv("QCCL_NSOCKS", me.rank == 0 ? "2" : "3", 1);
    qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
    cfg.timeoutS = 1.5;  // rank 0 waits this long for a well-formed peer
    cfg.transport = "tcp";
    qcclComm_t comm = nullptr;
    qcclResult_t rc = qcclCommInitRankConfig(&comm, 2, me.ids[0], me.rank, &cfg);
    REQUIRE(rc != qcclSuccess, "init succeeded with different QCCL_NSOCKS");
  }, o);
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qccl_test
