// qcclMemAlloc buffers and the direct all-reduce (src/qccl/algo/direct.h):
// exact results for every op on the usual types, in and out of place, on 2 to
// 4 ranks, with counts below, at and above the rank count; taken automatically
// only when every rank's buffers are shared; a rank with plain buffers, tcp,
// QCCL_DIRECT=0 or QCCL_ALGO=ring keep the ring; random floats are summed in
// rank order on every rank; a rank killed mid-call gives the others an error.
// Plain buffers go direct by single copy (CMA) when forced or beyond the
// last-level cache, exact, and not without CMA.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "data.h"
#include "algo/cost_model.h"
#include "comm.h"
#include "transport/shared_mem.h"
#include "ranks.h"

namespace qccl_test {
namespace {

// A buffer from qcclMemAlloc (shared) or from new (plain), filled with `init`.
class Buf {
 public:
  Buf(size_t bytes, bool shared, const std::vector<char>& init = {}) : shared_(shared) {
    size_t n = std::max<size_t>(bytes, 1);
    if (shared) {
      REQUIRE_OK(qcclMemAlloc(reinterpret_cast<void**>(&p_), n));
    } else {
      plain_.resize(n);
      p_ = plain_.data();
    }
    std::memset(p_, 0x5a, n);
    if (!init.empty()) std::memcpy(p_, init.data(), std::min(bytes, init.size()));
  }
  ~Buf() {
    if (shared_) qcclMemFree(p_);
  }
  char* data() { return p_; }

 private:
  bool shared_;
  char* p_ = nullptr;
  std::vector<char> plain_;
};

TEST(MemAlloc, AllocatesFreesAndRefusesBadArguments) {
  void* p = nullptr;
  ASSERT_EQ(qcclMemAlloc(&p, 10000), qcclSuccess) << qcclGetLastError(nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  std::memset(p, 7, 10000);
  auto ref = qccl::find_shared(static_cast<char*>(p) + 100, 9900);
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->offset, 100u);
  EXPECT_FALSE(qccl::find_shared(static_cast<char*>(p) + 100, 100000).has_value());
  int local = 0;
  EXPECT_FALSE(qccl::find_shared(&local, sizeof local).has_value());
  EXPECT_EQ(qcclMemFree(p), qcclSuccess);
  EXPECT_FALSE(qccl::find_shared(p, 1).has_value());

  EXPECT_EQ(qcclMemAlloc(&p, 0), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(nullptr)).find("size"), std::string::npos);
  EXPECT_EQ(qcclMemAlloc(nullptr, 64), qcclInvalidArgument);
  EXPECT_EQ(qcclMemFree(&local), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(nullptr)).find("qcclMemAlloc"), std::string::npos);
  EXPECT_EQ(qcclMemFree(nullptr), qcclSuccess);
}

// Every op on a spread of types and counts, forced direct: exact, and counted as direct.
void check_exact(const Rank& me, qcclComm_t comm, bool expect_direct) {
  for (auto t : {qcclFloat32, qcclInt32, qcclBfloat16, qcclFloat16, qcclInt8, qcclFloat64})
    for (auto op : kAllOps)
      for (size_t count : {size_t(1), size_t(2), size_t(3), size_t(5), size_t(1000), size_t(65537)})
        for (bool in_place : {false, true}) {
          size_t es = qccl::dtype_size(t);
          auto in = make_input(me.rank, count, op, t);
          auto want = reference(me.nranks, count, op, t);
          Buf src(count * es, true, in), out(count * es, true);
          char* dst = in_place ? src.data() : out.data();
          uint64_t before = comm->direct_calls;
          REQUIRE_OK(qcclAllReduce(src.data(), dst, count, t, op, comm, nullptr));
          std::string what = cat(qccl::dtype_name(t), " ", qccl::op_name(op), " count ", count,
                                 in_place ? " in place" : "");
          std::string d = diff(dst, want.data(), count, t);
          REQUIRE(d.empty(), what, ": ", d);
          REQUIRE(comm->direct_calls == before + (expect_direct ? 1 : 0), what, ": direct_calls ",
                  comm->direct_calls, " (was ", before, ")");
        }
}

// "Auto" goes direct in place of a ring the cost model chose, and which
// algorithm a measured model chooses depends on the machine (a fast
// reduction makes recursive doubling win on Zen 5). These figures make the
// ring the choice from 64 KiB on for 2-4 ranks anywhere: static links and a
// slow reduction (0.1 GB/s), which recursive doubling pays log2(n) times over.
// Called in a rank process before it creates its communicator.
void figures_where_ring_wins() {
  ::setenv("QCCL_COST_MODEL", "static", 1);
  ::setenv("QCCL_REDUCE_GBPS", "0.1", 1);
}
void require_model_picks_ring(qcclComm_t comm, size_t bytes) {
  qccl::Algo a = qccl::choose(comm->cost, comm->algo, qccl::Coll::kAllReduce, comm->nranks, bytes);
  REQUIRE(a == qccl::Algo::kRing, "the model chose ", qccl::algo_name(a), " for ", bytes, " bytes on ",
          comm->nranks, " ranks, not the ring the test needs");
}

class Direct : public ::testing::TestWithParam<int> {};

TEST_P(Direct, ForcedIsExactForEveryOp) {
  auto r = run_ranks(GetParam(), [](const Rank& me) {
    qcclComm_t comm = me.init(0, "direct");
    check_exact(me, comm, true);
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

INSTANTIATE_TEST_SUITE_P(Ranks, Direct, ::testing::Values(2, 3, 4));

// Auto: shared buffers of 64 KiB and more go direct; plain ones, smaller
// ones, and a job where one rank's buffers are plain do not, and stay exact.
TEST(DirectAuto, OnlyWhenEveryRankSharesItsBuffers) {
  auto r = run_ranks(3, [](const Rank& me) {
    figures_where_ring_wins();
    qcclComm_t comm = me.init();
    require_model_picks_ring(comm, 4 << 20);
    auto run = [&](size_t count, bool shared, bool expect) {
      auto in = make_input(me.rank, count, qcclSum, qcclFloat32);
      auto want = reference(me.nranks, count, qcclSum, qcclFloat32);
      Buf src(count * 4, shared, in), dst(count * 4, shared);
      uint64_t before = comm->direct_calls;
      REQUIRE_OK(qcclAllReduce(src.data(), dst.data(), count, qcclFloat32, qcclSum, comm, nullptr));
      std::string d = diff(dst.data(), want.data(), count, qcclFloat32);
      REQUIRE(d.empty(), "count ", count, shared ? " shared" : " plain", ": ", d);
      REQUIRE(comm->direct_calls == before + (expect ? 1 : 0), "count ", count,
              shared ? " shared" : " plain", ": went direct ", comm->direct_calls - before, " times");
    };
    run(1 << 20, true, true);      // 4 MiB, shared everywhere
    run(1 << 20, false, false);    // plain
    run(100, true, false);         // shared but small: recursive doubling
    run(1 << 20, me.rank != 1, false);  // rank 1's buffers are plain: nobody goes direct
    run(1 << 20, true, true);      // and the next shared call goes direct again
    REQUIRE_OK(qcclCommDestroy(comm));
    // QCCL_ALGO=ring stays a ring on shared buffers.
    qcclComm_t ring = me.init(1, "ring");
    auto in = make_input(me.rank, 1 << 20, qcclMax, qcclFloat32);
    Buf src(4 << 20, true, in);
    REQUIRE_OK(qcclAllReduce(src.data(), src.data(), 1 << 20, qcclFloat32, qcclMax, ring, nullptr));
    REQUIRE(ring->direct_calls == 0, "QCCL_ALGO=ring went direct");
    REQUIRE_OK(qcclCommDestroy(ring));
  }, [] { Options o; o.num_ids = 2; return o; }());
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(DirectAuto, OffOverTcpAndWithQcclDirectZero) {
  Options tcp;
  tcp.transport = "tcp";
  auto r = run_ranks(2, [](const Rank& me) {
    qcclComm_t comm = me.init(0, "direct");  // forced, but tcp peers cannot map our memory
    check_exact(me, comm, false);
    REQUIRE_OK(qcclCommDestroy(comm));
  }, tcp);
  EXPECT_TRUE(r.ok()) << r.summary();
  r = run_ranks(2, [](const Rank& me) {
    ::setenv("QCCL_DIRECT", "0", 1);
    qcclComm_t comm = me.init(0, "direct");
    check_exact(me, comm, false);
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Random floats (inexact sums): each element is reduced by one rank in rank
// order, so every rank holds ((x0 + x1) + x2) + x3 bit for bit.
TEST(DirectAuto, RandomFloatsAreSummedInRankOrder) {
  constexpr size_t kCount = 300001;
  auto input = [](int r) {
    std::mt19937 g(1234 + r);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(kCount);
    for (float& x : v) x = u(g) * std::exp2(static_cast<float>(g() % 20) - 10);
    return v;
  };
  auto r = run_ranks(4, [&](const Rank& me) {
    figures_where_ring_wins();
    qcclComm_t comm = me.init();
    require_model_picks_ring(comm, kCount * 4);
    std::vector<float> want = input(0);
    for (int k = 1; k < me.nranks; ++k) {
      std::vector<float> x = input(k);
      for (size_t i = 0; i < kCount; ++i) want[i] = want[i] + x[i];
    }
    std::vector<float> mine = input(me.rank);
    Buf buf(kCount * 4, true, std::vector<char>(reinterpret_cast<char*>(mine.data()),
                                                 reinterpret_cast<char*>(mine.data() + kCount)));
    REQUIRE_OK(qcclAllReduce(buf.data(), buf.data(), kCount, qcclFloat32, qcclSum, comm, nullptr));
    REQUIRE(comm->direct_calls == 1, "did not go direct");
    REQUIRE(std::memcmp(buf.data(), want.data(), kCount * 4) == 0,
            "sums differ from the rank-order reference");
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Single copy: plain (malloc'd) buffers go direct when forced, every op
// exact, each peer reached by process_vm_readv / process_vm_writev; where some
// ranks' buffers are shared, those that can map them do, the rest copy.
class DirectCma : public ::testing::TestWithParam<int> {};

// rank1_registers false: rank 1 never registers its plain buffers while the
// others do (as when ranks see different sizes first), so every call mixes
// mapped, registered and copied buffers.
void check_plain_buffers(const Rank& me, bool rank1_registers) {
  if (!rank1_registers && me.rank == 1) ::setenv("QCCL_REGISTER", "0", 1);
  qcclComm_t comm = me.init(0, "direct");
  bool cma = true;
  for (int p = 0; p < me.nranks; ++p)
    if (p != me.rank) cma &= comm->conns[p]->cma();
  REQUIRE(cma, "single copy is not allowed between these processes (ptrace policy?)");
  for (auto t : {qcclFloat32, qcclInt32, qcclBfloat16, qcclInt8, qcclFloat64})
    for (auto op : kAllOps)
      for (size_t count : {size_t(1), size_t(3), size_t(1000), size_t(65537), size_t(300001)})
        for (int layout = 0; layout < 3; ++layout) {  // plain out of place, plain in place, rank 1 shared
          size_t es = qccl::dtype_size(t);
          bool shared = layout == 2 && me.rank == 1;
          auto in = make_input(me.rank, count, op, t);
          auto want = reference(me.nranks, count, op, t);
          Buf src(count * es, shared, in), out(count * es, shared);
          char* dst = layout == 1 ? src.data() : out.data();
          uint64_t before = comm->direct_calls, cma_before = comm->direct_cma_calls;
          REQUIRE_OK(qcclAllReduce(src.data(), dst, count, t, op, comm, nullptr));
          std::string what = cat(qccl::dtype_name(t), " ", qccl::op_name(op), " count ", count,
                                 " layout ", layout);
          std::string d = diff(dst, want.data(), count, t);
          REQUIRE(d.empty(), what, ": ", d);
          REQUIRE(comm->direct_calls == before + 1, what, ": did not go direct");
          // Plain buffers of some peer: copied in part at least (the bytes
          // outside whole pages, even once registered). With 2 ranks in
          // layout 2, rank 0 maps all of rank 1's.
          bool copies = layout != 2 || me.nranks > 2 || me.rank == 1;
          REQUIRE(comm->direct_cma_calls == cma_before + (copies ? 1 : 0), what, ": single copy ",
                  comm->direct_cma_calls - cma_before, " times");
        }
  REQUIRE_OK(qcclCommDestroy(comm));
}

TEST_P(DirectCma, ForcedOnPlainBuffersIsExactForEveryOp) {
  auto r = run_ranks(GetParam(), [](const Rank& me) { check_plain_buffers(me, true); });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST_P(DirectCma, ExactWhenOneRankDoesNotRegister) {
  auto r = run_ranks(GetParam(), [](const Rank& me) { check_plain_buffers(me, false); });
  EXPECT_TRUE(r.ok()) << r.summary();
}

INSTANTIATE_TEST_SUITE_P(Ranks, DirectCma, ::testing::Values(2, 3, 4));

// Without single copy (QCCL_CMA=0) plain buffers cannot be reached: a forced
// direct all-reduce runs the ring, exact.
TEST(DirectCmaOff, PlainBuffersFallBackToTheRing) {
  auto r = run_ranks(3, [](const Rank& me) {
    ::setenv("QCCL_CMA", "0", 1);
    qcclComm_t comm = me.init(0, "direct");
    REQUIRE(!comm->cost.cma_everywhere, "single copy on with QCCL_CMA=0");
    size_t count = 100000;
    auto in = make_input(me.rank, count, qcclSum, qcclFloat32);
    auto want = reference(me.nranks, count, qcclSum, qcclFloat32);
    Buf src(count * 4, false, in), dst(count * 4, false);
    REQUIRE_OK(qcclAllReduce(src.data(), dst.data(), count, qcclFloat32, qcclSum, comm, nullptr));
    REQUIRE(diff(dst.data(), want.data(), count, qcclFloat32).empty(), "wrong sum");
    REQUIRE(comm->direct_calls == 0, "went direct without single copy");
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Auto: the model takes the direct all-reduce on plain buffers once they
// outgrow the last-level cache (set small here, alike on every rank, so the
// test does not depend on this machine's cache), not below.
TEST(DirectCmaAuto, TakenWhereTheBuffersOutgrowTheCache) {
  auto r = run_ranks(2, [](const Rank& me) {
    qcclComm_t comm = me.init();
    REQUIRE(comm->cost.cma_everywhere, "single copy not measured on every pair");
    comm->cost.llc_bytes = 1 << 20;
    auto run = [&](size_t count, bool expect) {
      auto in = make_input(me.rank, count, qcclSum, qcclFloat32);
      auto want = reference(me.nranks, count, qcclSum, qcclFloat32);
      Buf src(count * 4, false, in), dst(count * 4, false);
      uint64_t before = comm->direct_cma_calls;
      REQUIRE_OK(qcclAllReduce(src.data(), dst.data(), count, qcclFloat32, qcclSum, comm, nullptr));
      REQUIRE(diff(dst.data(), want.data(), count, qcclFloat32).empty(), "count ", count, ": wrong sum");
      REQUIRE(comm->direct_cma_calls == before + (expect ? 1 : 0), "count ", count, ": direct ",
              comm->direct_cma_calls - before, " times");
    };
    run(1 << 16, false);  // 256 KiB: 2 ranks x 2 buffers = 1 MiB, fits
    run((1 << 16) + 1, true);
    run(1 << 20, true);
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(DirectFaults, KillNineMidCallGivesTheOthersAnError) {
  Options o;
  o.timeout_s = 20;
  auto r = run_ranks(3, [](const Rank& me) {
    figures_where_ring_wins();
    qcclComm_t comm = me.init();
    constexpr size_t kCount = 1 << 20;
    require_model_picks_ring(comm, kCount * 4);
    Buf buf(kCount * 4, true);
    std::fill_n(reinterpret_cast<float*>(buf.data()), kCount, 1.0f);
    if (me.rank == 1) sigkill_self_after(300);
    auto t0 = std::chrono::steady_clock::now();
    qcclResult_t rc = qcclSuccess;
    uint64_t calls = 0;
    while (rc == qcclSuccess && seconds_since(t0) < 15) {
      rc = qcclAllReduce(buf.data(), buf.data(), kCount, qcclFloat32, qcclMax, comm, nullptr);
      ++calls;
    }
    REQUIRE(rc == qcclRemoteError || rc == qcclTimeout, "expected an error after rank 1 died, got ",
            qcclGetErrorString(rc));
    // Every call but the one that failed (and at most one more, which the
    // failure broke before it was counted) went direct.
    REQUIRE(comm->direct_calls > 0 && comm->direct_calls + 2 >= calls,
            "the calls before the kill did not go direct (", comm->direct_calls, " of ", calls, ")");
    std::string msg = qcclGetLastError(comm);
    REQUIRE(msg.find("rank 1") != std::string::npos, "error does not name rank 1: ", msg);
    REQUIRE(seconds_since(t0) < 15, "error took ", seconds_since(t0), " s");
    REQUIRE_OK(qcclCommAbort(comm));
  }, o);
  ASSERT_FALSE(r.timed_out) << r.summary();
  EXPECT_EQ(r.status[1], 128 + SIGKILL);
  EXPECT_EQ(r.status[0], 0) << r.summary();
  EXPECT_EQ(r.status[2], 0) << r.summary();
}

}  // namespace
}  // namespace qccl_test
