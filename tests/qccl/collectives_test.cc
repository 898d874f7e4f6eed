// Every collective x dtype x op x size x ranks, in place and out of place,
// on shared memory and on TCP, against a serial reference (exact bits).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "data.h"
#include "ranks.h"

namespace qccl_test {
namespace {

const size_t kSizes[] = {0, 1, 7, 1000, 65537};
// The flat all-reduce algorithms, each forced on its own communicator.
const char* const kAllReduceAlgos[] = {"ring", "rd", "pairs"};

class Collectives : public ::testing::TestWithParam<const char*> {
 protected:
  Options opts() const {
    Options o;
    o.transport = GetParam();
    o.num_ids = 3;  // one communicator per forced all-reduce algorithm
    return o;
  }
};

// One all-reduce checked against the reference; returns "" or the failure.
std::string check_allreduce(qcclComm_t comm, const Rank& me, qcclDataType_t t, qcclRedOp_t op,
                            size_t count, bool in_place, int salt = 0) {
  auto in = make_input(me.rank, count, op, t, salt);
  auto want = reference(me.nranks, count, op, t, salt);
  std::vector<char> out(in.size(), 0x5a);
  void* recv = in_place ? in.data() : out.data();
  qcclResult_t rc = qcclAllReduce(in.data(), recv, count, t, op, comm, nullptr);
  if (rc != qcclSuccess) return cat("qcclAllReduce failed: ", qcclGetLastError(comm));
  std::string d = diff(recv, want.data(), count, t);
  if (!d.empty())
    return cat("allreduce ", qccl::dtype_name(t), " ", qccl::op_name(op), " count ", count,
               in_place ? " in place" : " out of place", " on ", me.nranks, " ranks: ", d);
  return "";
}

TEST_P(Collectives, AllReduceEveryTypeOpAndSizeOnOneToFourRanks) {
  for (int n = 1; n <= 4; ++n) {
    auto r = run_ranks(n, [](const Rank& me) {
      for (int ai = 0; ai < 3; ++ai) {
        const char* algo = kAllReduceAlgos[ai];
        qcclComm_t comm = me.init(ai, algo);
        for (auto t : kAllTypes)
          for (auto op : kAllOps)
            for (size_t count : kSizes)
              for (bool in_place : {false, true}) {
                std::string e = check_allreduce(comm, me, t, op, count, in_place);
                REQUIRE(e.empty(), "algo ", algo, ": ", e);
              }
        REQUIRE_OK(qcclCommDestroy(comm));
      }
    }, opts());
    EXPECT_TRUE(r.ok()) << n << " ranks: " << r.summary();
  }
}

TEST_P(Collectives, AllReduceOnEightRanks) {
  auto r = run_ranks(8, [](const Rank& me) {
    for (int ai = 0; ai < 3; ++ai) {
      const char* algo = kAllReduceAlgos[ai];
      qcclComm_t comm = me.init(ai, algo);
      for (auto t : {qcclFloat32, qcclBfloat16, qcclInt64})
        for (auto op : {qcclSum, qcclMax, qcclAvg})
          for (size_t count : {size_t(1), size_t(7), size_t(1000), size_t(65537)}) {
            std::string e = check_allreduce(comm, me, t, op, count, count % 2 == 0);
            REQUIRE(e.empty(), "algo ", algo, ": ", e);
          }
      REQUIRE_OK(qcclCommDestroy(comm));
    }
  }, opts());
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST_P(Collectives, AllReduceLargeMessage) {
  auto r = run_ranks(4, [](const Rank& me) {
    qcclComm_t comm = me.init();
    size_t count = (8u << 20) / 4 + 3;  // ~8 MiB of f32, not divisible by the ranks
    std::string e = check_allreduce(comm, me, qcclFloat32, qcclSum, count, false);
    REQUIRE(e.empty(), e);
    REQUIRE_OK(qcclCommDestroy(comm));
  }, opts());
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST_P(Collectives, BroadcastEveryRootSizeAndAlgorithm) {
  for (int n : {1, 2, 3, 4, 8}) {
    auto r = run_ranks(n, [](const Rank& me) {
      for (const char* algo : {"tree", "chain"}) {
        qcclComm_t comm = me.init(algo[0] == 't' ? 0 : 1, algo);
        for (auto t : {qcclUint8, qcclFloat64})
          for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(70001)})
            for (int root = 0; root < me.nranks; ++root)
              for (bool in_place : {false, true}) {
                if (me.nranks == 8 && count < 1000 && root > 1) continue;  // keep 8 ranks short
                auto data = make_input(root, count, qcclSum, t, 5);
                std::vector<char> buf(data.size(), 0x33);
                if (me.rank == root) buf = data;
                std::vector<char> out(data.size(), 0x44);
                void* recv = in_place ? buf.data() : out.data();
                REQUIRE_OK(qcclBroadcast(buf.data(), recv, count, t, root, comm, nullptr));
                std::string d = diff(recv, data.data(), count, t);
                REQUIRE(d.empty(), "broadcast ", algo, " root ", root, " count ", count, ": ", d);
              }
        REQUIRE_OK(qcclCommDestroy(comm));
      }
    }, opts());
    EXPECT_TRUE(r.ok()) << n << " ranks: " << r.summary();
  }
}

TEST_P(Collectives, ReduceEveryRootOpAndAlgorithm) {
  for (int n = 1; n <= 4; ++n) {
    auto r = run_ranks(n, [](const Rank& me) {
      for (const char* algo : {"tree", "chain"}) {
        qcclComm_t comm = me.init(algo[0] == 't' ? 0 : 1, algo);
        for (auto t : {qcclInt32, qcclFloat32, qcclBfloat16, qcclUint8})
          for (auto op : kAllOps)
            for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(70001)})
              for (int root = 0; root < me.nranks; ++root) {
                bool in_place = (count + root) % 2 == 0;
                auto in = make_input(me.rank, count, op, t);
                std::vector<char> out(in.size(), 0x11);
                void* recv = in_place ? in.data() : out.data();
                REQUIRE_OK(qcclReduce(in.data(), recv, count, t, op, root, comm, nullptr));
                if (me.rank != root) continue;
                auto want = reference(me.nranks, count, op, t);
                std::string d = diff(recv, want.data(), count, t);
                REQUIRE(d.empty(), "reduce ", algo, " ", qccl::op_name(op), " ",
                        qccl::dtype_name(t), " root ", root, " count ", count, ": ", d);
              }
        REQUIRE_OK(qcclCommDestroy(comm));
      }
    }, opts());
    EXPECT_TRUE(r.ok()) << n << " ranks: " << r.summary();
  }
}

TEST_P(Collectives, AllGather) {
  for (int n : {1, 2, 3, 4, 8}) {
    auto r = run_ranks(n, [](const Rank& me) {
      qcclComm_t comm = me.init();
      for (auto t : {qcclInt8, qcclFloat16, qcclUint64})
        for (size_t count : kSizes)
          for (bool in_place : {false, true}) {
            size_t es = qccl::dtype_size(t), n_ = me.nranks;
            std::vector<char> want(count * es * n_ + 1);
            for (int r = 0; r < me.nranks; ++r) {
              auto blk = make_input(r, count, qcclSum, t, 3);
              std::memcpy(want.data() + r * count * es, blk.data(), count * es);
            }
            std::vector<char> out(want.size(), 0x77);
            auto mine = make_input(me.rank, count, qcclSum, t, 3);
            const void* send = mine.data();
            if (in_place) {
              std::memcpy(out.data() + me.rank * count * es, mine.data(), count * es);
              send = out.data() + me.rank * count * es;
            }
            REQUIRE_OK(qcclAllGather(send, out.data(), count, t, comm, nullptr));
            std::string d = diff(out.data(), want.data(), count * n_, t);
            REQUIRE(d.empty(), "allgather ", qccl::dtype_name(t), " count ", count, ": ", d);
          }
      REQUIRE_OK(qcclCommDestroy(comm));
    }, opts());
    EXPECT_TRUE(r.ok()) << n << " ranks: " << r.summary();
  }
}

TEST_P(Collectives, ReduceScatter) {
  for (int n : {1, 2, 3, 4, 8}) {
    auto r = run_ranks(n, [](const Rank& me) {
      qcclComm_t comm = me.init();
      for (auto t : {qcclInt32, qcclFloat32, qcclFloat16})
        for (auto op : kAllOps)
          for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000)})
            for (bool in_place : {false, true}) {
              if (me.nranks == 8 && op != qcclSum && op != qcclAvg) continue;
              size_t es = qccl::dtype_size(t), total = count * me.nranks;
              auto in = make_input(me.rank, total, op, t);
              auto full = reference(me.nranks, total, op, t);
              std::vector<char> out(count * es + 1, 0x66);
              void* recv = in_place ? in.data() + me.rank * count * es : out.data();
              REQUIRE_OK(qcclReduceScatter(in.data(), recv, count, t, op, comm, nullptr));
              std::string d = diff(recv, full.data() + me.rank * count * es, count, t);
              REQUIRE(d.empty(), "reducescatter ", qccl::dtype_name(t), " ", qccl::op_name(op),
                      " count ", count, ": ", d);
            }
      REQUIRE_OK(qcclCommDestroy(comm));
    }, opts());
    EXPECT_TRUE(r.ok()) << n << " ranks: " << r.summary();
  }
}

TEST_P(Collectives, AllToAll) {
  for (int n : {1, 2, 3, 4, 8}) {
    auto r = run_ranks(n, [](const Rank& me) {
      qcclComm_t comm = me.init();
      for (size_t count : kSizes)
        for (bool in_place : {false, true}) {
          int n_ = me.nranks;
          // Element i of the block from s to d: s * 1000003 + d * 1009 + i.
          std::vector<int32_t> in(count * n_ + 1), out(count * n_ + 1, -1), want(count * n_ + 1);
          for (int d = 0; d < n_; ++d)
            for (size_t i = 0; i < count; ++i) {
              in[d * count + i] = static_cast<int32_t>(me.rank * 1000003 + d * 1009 + i);
              want[d * count + i] = static_cast<int32_t>(d * 1000003 + me.rank * 1009 + i);
            }
          int32_t* recv = in_place ? in.data() : out.data();
          REQUIRE_OK(qcclAllToAll(in.data(), recv, count, qcclInt32, comm, nullptr));
          REQUIRE(std::memcmp(recv, want.data(), count * n_ * 4) == 0, "alltoall count ", count,
                  in_place ? " in place" : "", " differs");
        }
      REQUIRE_OK(qcclCommDestroy(comm));
    }, opts());
    EXPECT_TRUE(r.ok()) << n << " ranks: " << r.summary();
  }
}

TEST_P(Collectives, SendRecvInGroups) {
  auto r = run_ranks(4, [](const Rank& me) {
    qcclComm_t comm = me.init();
    int n = me.nranks, next = (me.rank + 1) % n, prev = (me.rank + n - 1) % n;
    for (size_t count : {size_t(0), size_t(1), size_t(1000), size_t(300000)}) {
      std::vector<int32_t> a(count + 1, me.rank), b(count + 1, me.rank * 10);
      std::vector<int32_t> ra(count + 1, -1), rb(count + 1, -1), self(count + 1, -1);
      // Two messages to the same peer in one group arrive in order; a self send pairs with a self recv.
      REQUIRE_OK(qcclGroupStart());
      REQUIRE_OK(qcclSend(a.data(), count, qcclInt32, next, comm, nullptr));
      REQUIRE_OK(qcclSend(b.data(), count, qcclInt32, next, comm, nullptr));
      REQUIRE_OK(qcclRecv(ra.data(), count, qcclInt32, prev, comm, nullptr));
      REQUIRE_OK(qcclRecv(rb.data(), count, qcclInt32, prev, comm, nullptr));
      REQUIRE_OK(qcclSend(a.data(), count, qcclInt32, me.rank, comm, nullptr));
      REQUIRE_OK(qcclRecv(self.data(), count, qcclInt32, me.rank, comm, nullptr));
      REQUIRE_OK(qcclGroupEnd());
      for (size_t i = 0; i < count; ++i) {
        REQUIRE(ra[i] == prev && rb[i] == prev * 10 && self[i] == me.rank, "count ", count,
                " element ", i, ": ", ra[i], " ", rb[i], " ", self[i]);
      }
    }
    // Outside a group: rank 0 sends, rank 1 receives.
    if (me.rank < 2) {
      double v = 3.5;
      if (me.rank == 0) REQUIRE_OK(qcclSend(&v, 1, qcclFloat64, 1, comm, nullptr));
      else {
        v = 0;
        REQUIRE_OK(qcclRecv(&v, 1, qcclFloat64, 0, comm, nullptr));
        REQUIRE(v == 3.5, "got ", v);
      }
    }
    REQUIRE_OK(qcclCommDestroy(comm));
  }, opts());
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST_P(Collectives, GroupedCollectivesRunInOrder) {
  auto r = run_ranks(3, [](const Rank& me) {
    qcclComm_t comm = me.init();
    int32_t a = me.rank + 1, b = 10 * (me.rank + 1), ra = 0, rb = 0;
    REQUIRE_OK(qcclGroupStart());
    REQUIRE_OK(qcclAllReduce(&a, &ra, 1, qcclInt32, qcclSum, comm, nullptr));
    REQUIRE_OK(qcclAllReduce(&b, &rb, 1, qcclInt32, qcclMax, comm, nullptr));
    REQUIRE_OK(qcclGroupEnd());
    REQUIRE(ra == 6 && rb == 30, "got ", ra, " and ", rb);
    REQUIRE_OK(qcclCommDestroy(comm));
  }, opts());
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST_P(Collectives, SplitByColorOrderedByKey) {
  auto r = run_ranks(5, [](const Rank& me) {
    qcclComm_t comm = me.init();
    int color = me.rank == 4 ? QCCL_SPLIT_NOCOLOR : me.rank % 2;
    qcclComm_t sub = nullptr;
    REQUIRE_OK(qcclCommSplit(comm, color, -me.rank, &sub, nullptr));
    if (color == QCCL_SPLIT_NOCOLOR) {
      REQUIRE(sub == nullptr, "NOCOLOR must give no communicator");
    } else {
      int n = 0, r = -1;
      REQUIRE_OK(qcclCommCount(sub, &n));
      REQUIRE_OK(qcclCommUserRank(sub, &r));
      REQUIRE(n == 2, "size ", n);
      // Keys are -rank: the higher old rank comes first.
      int expect = (me.rank == 2 || me.rank == 3) ? 0 : 1;
      REQUIRE(r == expect, "old rank ", me.rank, " got new rank ", r);
      int32_t v = me.rank, sum = 0;
      REQUIRE_OK(qcclAllReduce(&v, &sum, 1, qcclInt32, qcclSum, sub, nullptr));
      REQUIRE(sum == (color == 0 ? 0 + 2 : 1 + 3), "sum ", sum);
      REQUIRE_OK(qcclCommDestroy(sub));
    }
    // The parent keeps working after the split.
    int32_t v = 1, total = 0;
    REQUIRE_OK(qcclAllReduce(&v, &total, 1, qcclInt32, qcclSum, comm, nullptr));
    REQUIRE(total == 5, "total ", total);
    REQUIRE_OK(qcclCommDestroy(comm));
  }, opts());
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Random floats: the result is not exact, but every rank must hold the same bits.
TEST_P(Collectives, FloatResultsAreBitIdenticalAcrossRanks) {
  for (int n : {3, 4}) {
    auto r = run_ranks(n, [](const Rank& me) {
      for (int ai = 0; ai < 3; ++ai) {
        const char* algo = kAllReduceAlgos[ai];
        qcclComm_t comm = me.init(ai, algo);
        for (auto t : {qcclFloat32, qcclFloat16, qcclBfloat16, qcclFloat64}) {
          size_t count = 4099;
          std::vector<char> in(count * 8), out(count * 8);
          uint64_t s = 88172645463325252ull + me.rank * 7919;
          for (size_t i = 0; i < count; ++i) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            set(in.data(), t, i, (static_cast<double>(s % 2000001) - 1e6) / 3e5);
          }
          REQUIRE_OK(qcclAllReduce(in.data(), out.data(), count, t, qcclSum, comm, nullptr));
          uint64_t h = 1469598103934665603ull;
          for (size_t i = 0; i < count * qccl::dtype_size(t); ++i) h = (h ^ uint8_t(out[i])) * 1099511628211ull;
          std::vector<uint64_t> all(me.nranks);
          REQUIRE_OK(qcclAllGather(&h, all.data(), 1, qcclUint64, comm, nullptr));
          for (int q = 0; q < me.nranks; ++q)
            REQUIRE(all[q] == all[0], qccl::dtype_name(t), " ", algo, ": rank ", q,
                    " holds different bits than rank 0");
        }
        REQUIRE_OK(qcclCommDestroy(comm));
      }
    }, opts());
    EXPECT_TRUE(r.ok()) << n << " ranks: " << r.summary();
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, Collectives, ::testing::Values("shm", "shm_nocma", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace qccl_test

namespace qccl_test {
namespace {

// Two simulated hosts (QCCL_HOST_ID): shm inside each, tcp between them, so
// one ring mixes both transports.
TEST(TwoHosts, AutoTransportMixesShmAndTcpAndResultsStayExact) {
  auto r = run_ranks(4, [](const Rank& me) {
    ::setenv("QCCL_HOST_ID", me.rank < 2 ? "host-a" : "host-b", 1);
    qcclComm_t comm = me.init();
    for (auto op : {qcclSum, qcclMax})
      for (size_t count : {size_t(7), size_t(65537), size_t(300001)}) {
        std::string e = check_allreduce(comm, me, qcclFloat32, op, count, false);
        REQUIRE(e.empty(), e);
      }
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TwoHosts, ForcingShmAcrossHostsIsAClearError) {
  Options o;
  o.transport = "shm_nocma";
  auto r = run_ranks(2, [](const Rank& me) {
    ::setenv("QCCL_HOST_ID", me.rank == 0 ? "host-a" : "host-b", 1);
    qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
    cfg.timeoutS = 5;
    cfg.transport = "shm";
    qcclComm_t comm = nullptr;
    qcclResult_t rc = qcclCommInitRankConfig(&comm, 2, me.ids[0], me.rank, &cfg);
    REQUIRE(rc == qcclInvalidArgument, "got ", qcclGetErrorString(rc), ": ", qcclGetLastError(nullptr));
    REQUIRE(std::string(qcclGetLastError(nullptr)).find("is on another host") != std::string::npos,
            qcclGetLastError(nullptr));
  }, o);
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qccl_test
