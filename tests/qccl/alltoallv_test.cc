// qcclAllToAllv on the native engine: every dtype on 1-4 ranks with uneven,
// zero and large counts at scattered displacements, on shared memory (with
// and without single copy) and TCP, against a serial reference (exact bits,
// gaps untouched); inside groups; its traffic and flight-recorder entries;
// and its errors: bad arguments are refused before anything moves, and
// counts that disagree between ranks fail instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "alltoallv_data.h"
#include "comm.h"
#include "ranks.h"

namespace qccl_test {
namespace {

class AllToAllv : public ::testing::TestWithParam<const char*> {
 protected:
  Options opts() const {
    Options o;
    o.transport = GetParam();
    return o;
  }
};

TEST_P(AllToAllv, EveryTypeAndPatternOnOneToFourRanks) {
  for (int n = 1; n <= 4; ++n) {
    auto r = run_ranks(n, [](const Rank& me) {
      qcclComm_t comm = me.init();
      for (VPattern p : kAllVPatterns)
        for (qcclDataType_t t : kAllTypes) {
          VCase c(p, me.rank, me.nranks, t);
          REQUIRE_OK(c.run(comm));
          std::string d = c.check();
          REQUIRE(d.empty(), "alltoallv ", pattern_name(p), " ", qccl::dtype_name(t), " on ", me.nranks,
                  " ranks: ", d);
        }
      REQUIRE_OK(qcclCommDestroy(comm));
    }, opts());
    EXPECT_TRUE(r.ok()) << n << " ranks: " << r.summary();
  }
}

// Queued in a group with other collectives, it runs in call order at
// GroupEnd, from copies of the count arrays (the caller's are gone by then).
TEST_P(AllToAllv, RunsInsideAGroupFromCopiesOfTheCounts) {
  auto r = run_ranks(3, [](const Rank& me) {
    qcclComm_t comm = me.init();
    VCase a(VPattern::kUneven, me.rank, me.nranks, qcclInt32);
    VCase b(VPattern::kLarge, me.rank, me.nranks, qcclFloat32);
    int32_t one = me.rank + 1, sum = 0;
    REQUIRE_OK(qcclGroupStart());
    {
      std::vector<size_t> sc = a.send_counts, sd = a.send_displs, rc = a.recv_counts, rd = a.recv_displs;
      REQUIRE_OK(qcclAllToAllv(a.send_ptr(), sc.data(), sd.data(), a.recv_ptr(), rc.data(), rd.data(),
                               a.dtype, comm, nullptr));
      for (auto* v : {&sc, &sd, &rc, &rd}) v->assign(v->size(), 12345);  // garbage before GroupEnd
    }
    REQUIRE_OK(qcclAllReduce(&one, &sum, 1, qcclInt32, qcclSum, comm, nullptr));
    REQUIRE_OK(b.run(comm));
    REQUIRE_OK(qcclGroupEnd());
    REQUIRE(a.check().empty(), "grouped int32 alltoallv: ", a.check());
    REQUIRE(b.check().empty(), "grouped f32 alltoallv: ", b.check());
    REQUIRE(sum == 6, "grouped allreduce got ", sum);
    REQUIRE_OK(qcclCommDestroy(comm));
  }, opts());
  EXPECT_TRUE(r.ok()) << r.summary();
}

INSTANTIATE_TEST_SUITE_P(Transports, AllToAllv, ::testing::Values("shm", "shm_nocma", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

// qcclCommGetTraffic counts each peer's block (an empty one as a message of
// no bytes; the block to itself not at all), and the flight recorder names it.
TEST(AllToAllvAccounting, TrafficCountsEveryPeerBlockAndTheRecorderNamesIt) {
  auto r = run_ranks(4, [](const Rank& me) {
    qcclComm_t comm = me.init();
    VCase c(VPattern::kUneven, me.rank, me.nranks, qcclFloat64);
    qcclCommTraffic_t before{}, after{};
    REQUIRE_OK(qcclCommGetTraffic(comm, &before));
    REQUIRE_OK(c.run(comm));
    REQUIRE_OK(qcclCommGetTraffic(comm, &after));
    REQUIRE(c.check().empty(), c.check());
    REQUIRE(after.bytesSent - before.bytesSent == c.bytes_to_peers(), "sent ",
            after.bytesSent - before.bytesSent, " bytes, expected ", c.bytes_to_peers());
    REQUIRE(after.bytesReceived - before.bytesReceived == c.bytes_from_peers(), "received ",
            after.bytesReceived - before.bytesReceived, " bytes, expected ", c.bytes_from_peers());
    REQUIRE(after.messagesSent - before.messagesSent == 3 &&
                after.messagesReceived - before.messagesReceived == 3,
            "messages ", after.messagesSent - before.messagesSent, " out, ",
            after.messagesReceived - before.messagesReceived, " in; expected one per peer");
    std::string fr = comm->fr.dump();
    REQUIRE(fr.find("alltoallv") != std::string::npos, "flight recorder: ", fr);
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Each bad call returns qcclInvalidArgument with a message saying what is
// wrong, and moves nothing: a good call afterwards still works.
TEST(AllToAllvErrors, BadArgumentsAreRefusedBeforeAnythingMoves) {
  auto r = run_ranks(2, [](const Rank& me) {
    qcclComm_t comm = me.init();
    std::vector<int32_t> buf(64, 0), out(64, 0);
    const int peer = 1 - me.rank;
    std::vector<size_t> cnt = {2, 2}, displ = {0, 2}, none = {0, 0};
    auto expect_refused = [&](qcclResult_t rc, const char* what, const char* words) {
      std::string err = qcclGetLastError(comm);
      REQUIRE(rc == qcclInvalidArgument, what, ": got ", qcclGetErrorString(rc), ": ", err);
      REQUIRE(err.find(words) != std::string::npos, what, ": '", err, "' does not say '", words, "'");
    };
    auto* s = buf.data();
    auto* o = out.data();
    expect_refused(qcclAllToAllv(s, nullptr, displ.data(), o, cnt.data(), displ.data(), qcclInt32, comm, nullptr),
                   "NULL sendcounts", "sendcounts is NULL");
    expect_refused(qcclAllToAllv(s, cnt.data(), displ.data(), o, cnt.data(), nullptr, qcclInt32, comm, nullptr),
                   "NULL rdispls", "rdispls is NULL");
    expect_refused(qcclAllToAllv(nullptr, cnt.data(), displ.data(), o, cnt.data(), displ.data(), qcclInt32, comm,
                                 nullptr),
                   "NULL sendbuff", "sendbuff is NULL but sendcounts[0] is 2");
    expect_refused(qcclAllToAllv(s, cnt.data(), displ.data(), nullptr, cnt.data(), displ.data(), qcclInt32, comm,
                                 nullptr),
                   "NULL recvbuff", "recvbuff is NULL but recvcounts[0] is 2");
    expect_refused(qcclAllToAllv(s, cnt.data(), displ.data(), s, cnt.data(), displ.data(), qcclInt32, comm, nullptr),
                   "in place", "overlap the receive blocks");
    expect_refused(qcclAllToAllv(s, cnt.data(), displ.data(), s + 3, cnt.data(), displ.data(), qcclInt32, comm,
                                 nullptr),
                   "overlapping buffers", "overlap the receive blocks");
    std::vector<size_t> self_differs = cnt;
    self_differs[me.rank] = 1;
    expect_refused(qcclAllToAllv(s, cnt.data(), displ.data(), o, self_differs.data(), displ.data(), qcclInt32,
                                 comm, nullptr),
                   "own counts differ", "sends itself 2 elements");
    std::vector<size_t> same_place = {1, 1};
    expect_refused(qcclAllToAllv(s, cnt.data(), displ.data(), o, cnt.data(), same_place.data(), qcclInt32, comm,
                                 nullptr),
                   "receive blocks overlap", "overlap; each element of recvbuff may be written once");
    std::vector<size_t> far = {0, SIZE_MAX - 1};
    expect_refused(qcclAllToAllv(s, cnt.data(), far.data(), o, cnt.data(), displ.data(), qcclInt32, comm, nullptr),
                   "displacement past the address space", "runs past the end of the address space");
    expect_refused(qcclAllToAllv(s, cnt.data(), displ.data(), o, cnt.data(), displ.data(),
                                 static_cast<qcclDataType_t>(99), comm, nullptr),
                   "bad datatype", "expected a qcclDataType_t");
    qcclResult_t rc = qcclAllToAllv(s, cnt.data(), displ.data(), o, cnt.data(), displ.data(), qcclInt32, nullptr,
                                    nullptr);
    REQUIRE(rc == qcclInvalidArgument, "NULL comm: got ", qcclGetErrorString(rc));
    // A zero-count block may sit anywhere, even far past the buffer.
    std::vector<size_t> zero_far = {0, SIZE_MAX - 1};
    REQUIRE_OK(qcclAllToAllv(s, none.data(), zero_far.data(), o, none.data(), zero_far.data(), qcclInt32, comm,
                             nullptr));
    // The communicator is untouched: a good exchange works.
    for (int i = 0; i < 4; ++i) buf[i] = me.rank * 10 + i;
    REQUIRE_OK(qcclAllToAllv(s, cnt.data(), displ.data(), o, cnt.data(), displ.data(), qcclInt32, comm, nullptr));
    REQUIRE(out[2 * peer] == peer * 10 + 2 * me.rank && out[2 * peer + 1] == peer * 10 + 2 * me.rank + 1,
            "got ", out[2 * peer], ", ", out[2 * peer + 1]);
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Rank 1 expects a different count from rank 0 than rank 0 sends (rank 0
// sends `extra` more elements; -1: it sends none, rank 1 expects 5). Rank 1
// gets qcclRemoteError naming rank 0 and the mismatch; nobody waits for the
// deadline: the others' next call fails too (rank 1 left the communicator).
void expect_mismatch_fails_fast(int n, int extra) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_ranks(n, [extra](const Rank& me) {
    qcclComm_t comm = me.init();
    std::vector<size_t> sc(me.nranks, 3), rc(me.nranks, 3), sd, rd;
    if (extra < 0 && me.rank == 0) sc[1] = 0;
    if (extra < 0 && me.rank == 1) rc[0] = 5;
    if (extra > 0 && me.rank == 0) sc[1] += static_cast<size_t>(extra);
    std::vector<float> send(scatter_blocks(sc, true, sd), 1.0f), recv(scatter_blocks(rc, false, rd), 0.0f);
    qcclResult_t rc_call = qcclAllToAllv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                                         qcclFloat32, comm, nullptr);
    std::string err = qcclGetLastError(comm);
    if (me.rank == 1) {
      REQUIRE(rc_call == qcclRemoteError, "got ", qcclGetErrorString(rc_call), ": ", err);
      REQUIRE(err.find("rank 0") != std::string::npos &&
                  err.find("ranks passed different counts") != std::string::npos,
              err);
    } else if (rc_call == qcclSuccess) {
      int32_t one = 1, sum = 0;
      qcclResult_t next = qcclAllReduce(&one, &sum, 1, qcclInt32, qcclSum, comm, nullptr);
      REQUIRE(next != qcclSuccess, "rank ", me.rank, ": the call after the failed exchange succeeded");
    }
    ::_exit(0);  // the communicator is broken: leave without its teardown
  });
  EXPECT_TRUE(r.ok()) << n << " ranks, extra " << extra << ": " << r.summary();
  EXPECT_LT(seconds_since(t0), 20.0) << "took the deadline instead of failing on the count";
}

TEST(AllToAllvErrors, CountsThatDisagreeBetweenRanksFailInsteadOfHanging) {
  expect_mismatch_fails_fast(3, 1);
  expect_mismatch_fails_fast(2, -1);
  expect_mismatch_fails_fast(4, 70000);  // a large block, single copy on shm
}

}  // namespace
}  // namespace qccl_test
