// Faults: a rank killed with SIGKILL, a stalled peer, strangers and garbage,
// aborts, mismatched calls. Nothing may hang; every error names the peer.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "bootstrap/bootstrap.h"
#include "ranks.h"

namespace qccl_test {
namespace {


class Faults : public ::testing::TestWithParam<const char*> {};

TEST_P(Faults, KillNineMidAllReduceGivesEveryoneAnErrorNamingAPeer) {
  Options o;
  o.transport = GetParam();
  o.timeout_s = 20;
  std::string dir = ::testing::TempDir() + "qccl_kill_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto r = run_ranks(4, [dir](const Rank& me) {
    qcclComm_t comm = me.init();
    std::vector<float> buf(1 << 18, 1.0f);  // 1 MiB
    if (me.rank == 2) sigkill_self_after(300);
    auto t0 = std::chrono::steady_clock::now();
    qcclResult_t rc = qcclSuccess;
    while (rc == qcclSuccess && seconds_since(t0) < 15)
      rc = qcclAllReduce(buf.data(), buf.data(), buf.size(), qcclFloat32, qcclSum, comm, nullptr);
    REQUIRE(rc == qcclRemoteError || rc == qcclTimeout, "expected an error after rank 2 died, got ",
            qcclGetErrorString(rc));
    std::string msg = qcclGetLastError(comm);
    REQUIRE(std::regex_search(msg, std::regex("rank [0-9]")), "error names no peer: ", msg);
    std::ofstream(dir + "/" + std::to_string(me.rank)) << msg;
    REQUIRE(seconds_since(t0) < 15, "error took ", seconds_since(t0), " s");
    qcclResult_t async = qcclSuccess;
    REQUIRE_OK(qcclCommGetAsyncError(comm, &async));
    REQUIRE(async == rc, "async error ", qcclGetErrorString(async));
    // A broken communicator fails fast from now on.
    REQUIRE(qcclAllReduce(buf.data(), buf.data(), 1, qcclFloat32, qcclSum, comm, nullptr) ==
            qcclInvalidUsage, "a broken comm must refuse new calls");
    REQUIRE_OK(qcclCommAbort(comm));
  }, o);
  ASSERT_FALSE(r.timed_out) << r.summary();
  EXPECT_EQ(r.status[2], 128 + SIGKILL);
  for (int q : {0, 1, 3}) EXPECT_EQ(r.status[q], 0) << "rank " << q << ": " << r.summary();
  // The first survivors to notice name the dead rank. Over shared memory a
  // rank that gives up leaves its reason in the segment, so every survivor's
  // error leads back to rank 2; over TCP a later one may name only the
  // neighbour that left.
  int named_rank2 = 0;
  for (int q : {0, 1, 3}) {
    std::ifstream f(dir + "/" + std::to_string(q));
    std::string msg((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    bool named = msg.find("rank 2") != std::string::npos;
    named_rank2 += named;
    if (std::string(GetParam()) == "shm") {
      EXPECT_TRUE(named) << "rank " << q << ": " << msg;
    }
  }
  EXPECT_GE(named_rank2, 1);
  std::filesystem::remove_all(dir);
}

TEST_P(Faults, TimeoutNamesTheStalledPeerAndDumpsTheFlightRecorder) {
  std::string dir = ::testing::TempDir() + "qccl_fr_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  Options o;
  o.transport = GetParam();
  o.timeout_s = 1.5;
  auto r = run_ranks(2, [dir](const Rank& me) {
    ::setenv("QCCL_FR_DUMP_DIR", dir.c_str(), 1);
    qcclComm_t comm = me.init();
    int32_t v = 1, out = 0;
    REQUIRE_OK(qcclAllReduce(&v, &out, 1, qcclInt32, qcclSum, comm, nullptr));
    if (me.rank == 1) {  // stalls: never joins the second all-reduce
      std::this_thread::sleep_for(std::chrono::milliseconds(5000));
      qcclCommDestroy(comm);
      return;
    }
    auto t0 = std::chrono::steady_clock::now();
    qcclResult_t rc = qcclAllReduce(&v, &out, 1, qcclInt32, qcclSum, comm, nullptr);
    double t = seconds_since(t0);
    REQUIRE(rc == qcclTimeout, "expected qcclTimeout, got ", qcclGetErrorString(rc));
    REQUIRE(t >= 1.4 && t < 4.5, "timed out after ", t, " s; the deadline was 1.5 s");
    std::string msg = qcclGetLastError(comm);
    REQUIRE(msg.find("rank 1") != std::string::npos && msg.find("allreduce #1") != std::string::npos, msg);
    std::ifstream f(dir + "/qccl_fr_qccl_rank0.txt");
    std::string dump((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    REQUIRE(dump.find("allreduce") != std::string::npos && dump.find("timed out") != std::string::npos,
            "flight recorder dump: '", dump, "'");
    qcclCommDestroy(comm);
  }, o);
  EXPECT_TRUE(r.ok()) << r.summary();
  std::filesystem::remove_all(dir);
}

TEST_P(Faults, AbortUnblocksAPendingCallAtOnce) {
  Options o;
  o.transport = GetParam();
  o.timeout_s = 30;
  auto r = run_ranks(2, [](const Rank& me) {
    qcclComm_t comm = me.init();
    if (me.rank == 1) {  // never takes part
      std::this_thread::sleep_for(std::chrono::milliseconds(3000));
      qcclCommDestroy(comm);
      return;
    }
    std::vector<float> buf(1000, 1.0f);
    qcclResult_t rc = qcclSuccess;
    std::chrono::steady_clock::time_point done;
    std::thread t([&] {
      rc = qcclAllReduce(buf.data(), buf.data(), buf.size(), qcclFloat32, qcclSum, comm, nullptr);
      done = std::chrono::steady_clock::now();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto t0 = std::chrono::steady_clock::now();
    REQUIRE_OK(qcclCommAbort(comm));
    double abort_s = seconds_since(t0);
    t.join();
    // include/qccl.h: calls in progress on an aborted communicator return qcclInvalidUsage.
    REQUIRE(rc == qcclInvalidUsage, "the pending all-reduce returned ", qcclGetErrorString(rc),
            ", expected qcclInvalidUsage");
    REQUIRE(abort_s < 2.0, "qcclCommAbort took ", abort_s, " s");  // the deadline is 30 s
    REQUIRE(std::chrono::duration<double>(done - t0).count() < 2.0, "the call returned late");
  }, o);
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST_P(Faults, MismatchedCountsAreReportedNotTrusted) {
  Options o;
  o.transport = GetParam();
  o.timeout_s = 10;
  auto r = run_ranks(2, [](const Rank& me) {
    qcclComm_t comm = me.init();
    std::vector<float> buf(64, 1.0f);
    size_t count = me.rank == 0 ? 10 : 20;
    qcclResult_t rc = qcclAllReduce(buf.data(), buf.data(), count, qcclFloat32, qcclSum, comm, nullptr);
    REQUIRE(rc == qcclRemoteError, "got ", qcclGetErrorString(rc));
    std::string msg = qcclGetLastError(comm);
    REQUIRE(msg.find("different counts") != std::string::npos ||
                msg.find("closed") != std::string::npos || msg.find("gone") != std::string::npos,
            msg);
    qcclCommAbort(comm);
  }, o);
  EXPECT_TRUE(r.ok()) << r.summary();
}

INSTANTIATE_TEST_SUITE_P(Transports, Faults, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

TEST(Bootstrap, StrangersWithoutTheTokenAreRefusedAndTheJobGoesOn) {
  qcclUniqueId id;
  ASSERT_EQ(qcclGetUniqueId(&id), qcclSuccess);
  qccl::UniqueIdData real = qccl::decode_unique_id(id);
  // 1. Garbage bytes on the root's port.
  {
    qccl::Fd fd = qccl::connect_to(real.root, qccl::Deadline(5), "root");
    std::string junk(300, 'x');
    qccl::send_all(fd.get(), junk.data(), junk.size(), qccl::Deadline(5), "root");
    char buf[512];
    bool closed = false;
    try {
      qccl::recv_all(fd.get(), buf, sizeof buf, qccl::Deadline(5), "root");
    } catch (const qccl::RemoteError&) {
      closed = true;  // refused: a reply and/or the connection closed
    }
    EXPECT_TRUE(closed);
  }
  // 2. A well-formed hello with the wrong token.
  {
    qccl::UniqueIdData stranger = real;
    stranger.token[0] ^= 0xff;
    qccl::PeerInfo me;
    try {
      qccl::join(stranger, 0, 2, me, qccl::Deadline(5));
      ADD_FAILURE() << "a stranger joined";
    } catch (const qccl::RemoteError& e) {
      EXPECT_NE(std::string(e.what()).find("wrong job token"), std::string::npos) << e.what();
    }
  }
  // 3. The real ranks still form the job.
  Options o;
  auto r = run_ranks(2, [](const Rank& me) {
    qcclComm_t comm = me.init();
    int32_t v = me.rank + 1, out = 0;
    REQUIRE_OK(qcclAllReduce(&v, &out, 1, qcclInt32, qcclSum, comm, nullptr));
    REQUIRE(out == 3, "got ", out);
    qcclCommDestroy(comm);
  }, o);
  // run_ranks made its own id; also check the id we attacked still works.
  EXPECT_TRUE(r.ok()) << r.summary();
  auto r2 = run_ranks(2, [id](const Rank& me) {
    qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
    cfg.timeoutS = 20;
    qcclComm_t comm = nullptr;
    REQUIRE_OK(qcclCommInitRankConfig(&comm, 2, id, me.rank, &cfg));
    int32_t v = 5, out = 0;
    REQUIRE_OK(qcclAllReduce(&v, &out, 1, qcclInt32, qcclSum, comm, nullptr));
    REQUIRE(out == 10, "got ", out);
    qcclCommDestroy(comm);
  }, o);
  EXPECT_TRUE(r2.ok()) << r2.summary();
}

TEST(Bootstrap, InitTimesOutWhenARankNeverJoins) {
  qcclUniqueId id;
  ASSERT_EQ(qcclGetUniqueId(&id), qcclSuccess);
  qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
  cfg.timeoutS = 1.0;
  qcclComm_t comm = nullptr;
  auto t0 = std::chrono::steady_clock::now();
  qcclResult_t rc = qcclCommInitRankConfig(&comm, 2, id, 0, &cfg);
  EXPECT_EQ(rc, qcclTimeout) << qcclGetLastError(nullptr);
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(std::string(qcclGetLastError(nullptr)).find("bootstrap root"), std::string::npos)
      << qcclGetLastError(nullptr);
}

}  // namespace
}  // namespace qccl_test
