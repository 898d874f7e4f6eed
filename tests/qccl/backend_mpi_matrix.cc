// The collective matrix on the MPI backend, run by mpirun (one process per
// rank; ctest: qccl_backend_mpi_np4 via backend_mpirun.sh):
//
//   QCCL_BACKEND=mpi mpirun --allow-run-as-root --oversubscribe -np 4 qk_qccl_backend_mpi_tests
//
// Communicators come from MPI (qk::qccl::init_from_mpi); the matrix runs on all
// ranks and on qcclCommSplit's sub-communicators of 3, 2 and 1 ranks, against
// the same serial references as collectives_test.cc (exact bits). The test
// binary wraps MPI_Allreduce (MPI's profiling interface) to prove the calls
// went through MPI. Every rank runs the same calls in the same order and
// collects failures instead of stopping, so ranks never fall out of step.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/mman.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "alltoallv_data.h"
#include "data.h"
#include "backend/backend.h"
#include "backend/mpi.h"
#include "comm.h"

// Counts the MPI_Allreduce and MPI_Alltoallv calls qccl makes (the
// executable's definitions win over libmpi's; PMPI_* are the real ones).
static long g_mpi_allreduce_calls = 0;
static long g_mpi_alltoallv_calls = 0;
extern "C" int MPI_Allreduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  ++g_mpi_allreduce_calls;
  return PMPI_Allreduce(s, r, n, t, op, c);
}
extern "C" int MPI_Alltoallv(const void* s, const int sc[], const int sd[], MPI_Datatype st, void* r,
                             const int rc[], const int rd[], MPI_Datatype rt, MPI_Comm c) {
  ++g_mpi_alltoallv_calls;
  return PMPI_Alltoallv(s, sc, sd, st, r, rc, rd, rt, c);
}

namespace qccl_test {
namespace {

const size_t kSizes[] = {0, 1, 7, 1000, 65537};

struct Me {
  qcclComm_t comm;
  int rank, nranks;
};

Me who(qcclComm_t comm) {
  Me m{comm, 0, 0};
  qcclCommUserRank(comm, &m.rank);
  qcclCommCount(comm, &m.nranks);
  return m;
}

#define CHECK_OK(errs, call)                                                                 \
  do {                                                                                       \
    qcclResult_t rc_ = (call);                                                               \
    if (rc_ != qcclSuccess)                                                                  \
      errs.push_back(cat(#call, ": ", qcclGetErrorString(rc_), ": ", qcclGetLastError(nullptr))); \
  } while (0)
#define CHECK_DIFF(errs, d, ...)                     \
  do {                                               \
    std::string d_ = (d);                            \
    if (!d_.empty()) errs.push_back(cat(__VA_ARGS__, ": ", d_)); \
  } while (0)

void all_reduce_matrix(const Me& me, std::vector<std::string>& errs) {
  for (auto t : kAllTypes)
    for (auto op : kAllOps)
      for (size_t count : kSizes)
        for (bool in_place : {false, true}) {
          auto in = make_input(me.rank, count, op, t);
          auto want = reference(me.nranks, count, op, t);
          std::vector<char> out(in.size(), 0x5a);
          void* recv = in_place ? in.data() : out.data();
          CHECK_OK(errs, qcclAllReduce(in.data(), recv, count, t, op, me.comm, nullptr));
          CHECK_DIFF(errs, diff(recv, want.data(), count, t), "allreduce ", qccl::dtype_name(t), " ",
                     qccl::op_name(op), " count ", count, in_place ? " in place" : "", " on ",
                     me.nranks, " ranks");
        }
  // One large message (8 MiB of f32, not divisible by the ranks).
  size_t count = (8u << 20) / 4 + 3;
  auto in = make_input(me.rank, count, qcclSum, qcclFloat32);
  auto want = reference(me.nranks, count, qcclSum, qcclFloat32);
  std::vector<char> out(in.size());
  CHECK_OK(errs, qcclAllReduce(in.data(), out.data(), count, qcclFloat32, qcclSum, me.comm, nullptr));
  CHECK_DIFF(errs, diff(out.data(), want.data(), count, qcclFloat32), "allreduce 8 MiB");
}

void broadcast_matrix(const Me& me, std::vector<std::string>& errs) {
  for (auto t : {qcclUint8, qcclFloat16, qcclFloat64})
    for (size_t count : kSizes)
      for (int root = 0; root < me.nranks; ++root)
        for (bool in_place : {false, true}) {
          auto data = make_input(root, count, qcclSum, t, 5);
          std::vector<char> buf(data.size(), 0x33);
          if (me.rank == root) buf = data;
          std::vector<char> out(data.size(), 0x44);
          void* recv = in_place ? buf.data() : out.data();
          CHECK_OK(errs, qcclBroadcast(buf.data(), recv, count, t, root, me.comm, nullptr));
          CHECK_DIFF(errs, diff(recv, data.data(), count, t), "broadcast ", qccl::dtype_name(t),
                     " root ", root, " count ", count);
        }
}

void reduce_matrix(const Me& me, std::vector<std::string>& errs) {
  for (auto t : {qcclInt32, qcclUint8, qcclInt64, qcclFloat32, qcclBfloat16, qcclFloat16})
    for (auto op : kAllOps)
      for (size_t count : kSizes)
        for (int root = 0; root < me.nranks; ++root) {
          bool in_place = (count + root) % 2 == 0;
          auto in = make_input(me.rank, count, op, t);
          std::vector<char> out(in.size(), 0x11);
          void* recv = in_place ? in.data() : out.data();
          CHECK_OK(errs, qcclReduce(in.data(), recv, count, t, op, root, me.comm, nullptr));
          if (me.rank != root) continue;
          auto want = reference(me.nranks, count, op, t);
          CHECK_DIFF(errs, diff(recv, want.data(), count, t), "reduce ", qccl::dtype_name(t), " ",
                     qccl::op_name(op), " root ", root, " count ", count);
        }
}

void all_gather_matrix(const Me& me, std::vector<std::string>& errs) {
  for (auto t : {qcclInt8, qcclFloat16, qcclUint64, qcclFloat32})
    for (size_t count : kSizes)
      for (bool in_place : {false, true}) {
        size_t es = qccl::dtype_size(t);
        std::vector<char> want(count * es * me.nranks + 1);
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
        CHECK_OK(errs, qcclAllGather(send, out.data(), count, t, me.comm, nullptr));
        CHECK_DIFF(errs, diff(out.data(), want.data(), count * me.nranks, t), "allgather ",
                   qccl::dtype_name(t), " count ", count, in_place ? " in place" : "");
      }
}

void reduce_scatter_matrix(const Me& me, std::vector<std::string>& errs) {
  for (auto t : {qcclInt32, qcclUint16, qcclFloat32, qcclFloat16, qcclBfloat16, qcclFloat64})
    for (auto op : kAllOps)
      for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000)})
        for (bool in_place : {false, true}) {
          size_t es = qccl::dtype_size(t), total = count * me.nranks;
          auto in = make_input(me.rank, total, op, t);
          auto full = reference(me.nranks, total, op, t);
          std::vector<char> out(count * es + 1, 0x66);
          void* recv = in_place ? in.data() + me.rank * count * es : out.data();
          CHECK_OK(errs, qcclReduceScatter(in.data(), recv, count, t, op, me.comm, nullptr));
          CHECK_DIFF(errs, diff(recv, full.data() + me.rank * count * es, count, t), "reducescatter ",
                     qccl::dtype_name(t), " ", qccl::op_name(op), " count ", count,
                     in_place ? " in place" : "");
        }
}

void all_to_all_matrix(const Me& me, std::vector<std::string>& errs) {
  for (size_t count : kSizes)
    for (bool in_place : {false, true}) {
      int n = me.nranks;
      // Element i of the block from s to d: s * 1000003 + d * 1009 + i.
      std::vector<int32_t> in(count * n + 1), out(count * n + 1, -1), want(count * n + 1);
      for (int d = 0; d < n; ++d)
        for (size_t i = 0; i < count; ++i) {
          in[d * count + i] = static_cast<int32_t>(me.rank * 1000003 + d * 1009 + i);
          want[d * count + i] = static_cast<int32_t>(d * 1000003 + me.rank * 1009 + i);
        }
      int32_t* recv = in_place ? in.data() : out.data();
      CHECK_OK(errs, qcclAllToAll(in.data(), recv, count, qcclInt32, me.comm, nullptr));
      CHECK_DIFF(errs, diff(recv, want.data(), count * n, qcclInt32), "alltoall count ", count,
                 in_place ? " in place" : "");
    }
}

void all_to_all_v_matrix(const Me& me, std::vector<std::string>& errs) {
  for (VPattern p : kAllVPatterns)
    for (auto t : kAllTypes) {
      VCase c(p, me.rank, me.nranks, t);
      CHECK_OK(errs, c.run(me.comm));
      CHECK_DIFF(errs, c.check(), "alltoallv ", pattern_name(p), " ", qccl::dtype_name(t), " on ",
                 me.nranks, " ranks");
    }
}

void send_recv_matrix(const Me& me, std::vector<std::string>& errs) {
  int n = me.nranks, next = (me.rank + 1) % n, prev = (me.rank + n - 1) % n;
  for (size_t count : {size_t(0), size_t(1), size_t(1000), size_t(300000)}) {
    std::vector<int32_t> a(count + 1, me.rank), b(count + 1, me.rank * 10);
    std::vector<int32_t> ra(count + 1, -1), rb(count + 1, -1), self(count + 1, -1);
    // Two messages to one peer arrive in order; a self send pairs with a self recv.
    CHECK_OK(errs, qcclGroupStart());
    CHECK_OK(errs, qcclSend(a.data(), count, qcclInt32, next, me.comm, nullptr));
    CHECK_OK(errs, qcclSend(b.data(), count, qcclInt32, next, me.comm, nullptr));
    CHECK_OK(errs, qcclRecv(ra.data(), count, qcclInt32, prev, me.comm, nullptr));
    CHECK_OK(errs, qcclRecv(rb.data(), count, qcclInt32, prev, me.comm, nullptr));
    CHECK_OK(errs, qcclSend(a.data(), count, qcclInt32, me.rank, me.comm, nullptr));
    CHECK_OK(errs, qcclRecv(self.data(), count, qcclInt32, me.rank, me.comm, nullptr));
    CHECK_OK(errs, qcclGroupEnd());
    for (size_t i = 0; i < count; ++i)
      if (ra[i] != prev || rb[i] != prev * 10 || self[i] != me.rank) {
        errs.push_back(cat("sendrecv count ", count, " element ", i, ": ", ra[i], " ", rb[i], " ", self[i]));
        break;
      }
  }
  if (n >= 2 && me.rank < 2) {  // outside a group
    double v = me.rank == 0 ? 3.5 : 0;
    if (me.rank == 0) CHECK_OK(errs, qcclSend(&v, 1, qcclFloat64, 1, me.comm, nullptr));
    else CHECK_OK(errs, qcclRecv(&v, 1, qcclFloat64, 0, me.comm, nullptr));
    if (v != 3.5) errs.push_back(cat("single recv got ", v));
  }
  // Grouped collectives run in call order.
  int32_t x = me.rank + 1, y = 10 * (me.rank + 1), rx = 0, ry = 0;
  CHECK_OK(errs, qcclGroupStart());
  CHECK_OK(errs, qcclAllReduce(&x, &rx, 1, qcclInt32, qcclSum, me.comm, nullptr));
  CHECK_OK(errs, qcclAllReduce(&y, &ry, 1, qcclInt32, qcclMax, me.comm, nullptr));
  CHECK_OK(errs, qcclGroupEnd());
  if (rx != n * (n + 1) / 2 || ry != 10 * n) errs.push_back(cat("grouped allreduce got ", rx, " and ", ry));
}

using Matrix = void (*)(const Me&, std::vector<std::string>&);

// Runs `m` on all ranks, on a split of 3 + 1 and on a split of 2 + 2; every
// rank learns how many failed, so all of them pass or fail the test together.
void run_everywhere(Matrix m) {
  std::vector<std::string> errs;
  qcclComm_t world = qk::qccl::init_from_mpi(MPI_COMM_WORLD);
  int wrank = 0, wsize = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  ASSERT_STREQ(world->backend->name(), "mpi") << "QCCL_BACKEND=mpi must give the MPI backend";
  long before = g_mpi_allreduce_calls;
  m(who(world), errs);
  for (int split : {0, 1}) {
    int color = split == 0 ? (wrank == wsize - 1) : wrank % 2;
    qcclComm_t sub = nullptr;
    CHECK_OK(errs, qcclCommSplit(world, color, wrank, &sub, nullptr));
    if (!sub) continue;
    if (std::string(sub->backend->name()) != "mpi") errs.push_back("a split communicator is not on MPI");
    m(who(sub), errs);
    CHECK_OK(errs, qcclCommDestroy(sub));
  }
  CHECK_OK(errs, qcclCommDestroy(world));
  for (size_t i = 0; i < errs.size() && i < 10; ++i) ADD_FAILURE() << "MPI rank " << wrank << ": " << errs[i];
  int mine = static_cast<int>(errs.size()), all = 0;
  PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(all, 0) << "failures summed over all MPI ranks";
  if (m == all_reduce_matrix) {
    EXPECT_GT(g_mpi_allreduce_calls - before, 500) << "qcclAllReduce did not reach MPI_Allreduce";
  }
}

TEST(MpiBackend, AllReduceEveryTypeOpSizeAndPlace) { run_everywhere(all_reduce_matrix); }
TEST(MpiBackend, BroadcastEveryRoot) { run_everywhere(broadcast_matrix); }
TEST(MpiBackend, ReduceEveryRootAndOp) { run_everywhere(reduce_matrix); }
TEST(MpiBackend, AllGather) { run_everywhere(all_gather_matrix); }
TEST(MpiBackend, ReduceScatter) { run_everywhere(reduce_scatter_matrix); }
TEST(MpiBackend, AllToAll) { run_everywhere(all_to_all_matrix); }
TEST(MpiBackend, SendRecvAndGroups) { run_everywhere(send_recv_matrix); }

TEST(MpiBackend, AllToAllvEveryTypeAndPattern) {
  long before = g_mpi_alltoallv_calls;
  run_everywhere(all_to_all_v_matrix);
  // 3 patterns x 12 types on the world and on each rank's two splits.
  EXPECT_EQ(g_mpi_alltoallv_calls - before, 3 * 12 * 3) << "qcclAllToAllv did not reach MPI_Alltoallv";
}

// Counts that differ between two ranks fail on every rank, naming the pair,
// before MPI moves anything (it would under-fill or truncate the receive).
TEST(MpiBackend, AllToAllvCountsThatDisagreeFailOnEveryRank) {
  qcclComm_t world = qk::qccl::init_from_mpi(MPI_COMM_WORLD);
  Me me = who(world);
  if (me.nranks < 2) GTEST_SKIP() << "needs 2 MPI ranks (run under mpirun -np 4)";
  std::vector<size_t> sc(me.nranks, 3), rc(me.nranks, 3), sd, rd;
  if (me.rank == 1) rc[0] = 4;
  std::vector<float> send(scatter_blocks(sc, true, sd)), recv(scatter_blocks(rc, false, rd));
  qcclResult_t r = qcclAllToAllv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                                 qcclFloat32, world, nullptr);
  std::string err = qcclGetLastError(world);
  EXPECT_EQ(r, qcclRemoteError) << err;
  EXPECT_NE(err.find("sends 3 elements to rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("which expects 4 (its recvcounts[0]): ranks passed different counts"), std::string::npos)
      << err;
  qcclCommDestroy(world);
}

// Displacements past MPI's int: every rank learns that one rank's do not
// fit and all move the blocks point to point instead of MPI_Alltoallv.
TEST(MpiBackend, AllToAllvBeyondIntDisplacementsGoPointToPoint) {
  qcclComm_t world = qk::qccl::init_from_mpi(MPI_COMM_WORLD);
  Me me = who(world);
  const int n = me.nranks;
  const size_t far = size_t(INT_MAX) + 100, bytes = far + 4096;
  // Address space only: the pages of the few blocks written are the ones that get memory.
  auto reserve = [&] {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  };
  uint8_t* send = reserve();
  uint8_t* recv = reserve();
  ASSERT_TRUE(send && recv) << "mmap of 2 GiB of address space failed";
  std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
  for (int j = 0; j < n; ++j) {
    sc[j] = rc[j] = 10 + j + me.rank;                   // what I send j; j sends me 10 + me + j too
    sd[j] = me.rank == 0 && j == n - 1 ? far : 64 * j;  // rank 0's last block lies past INT_MAX
    rd[j] = me.rank == n - 1 && j == 0 ? far + 50 : 64 * j;
    for (size_t i = 0; i < sc[j]; ++i) send[sd[j] + i] = static_cast<uint8_t>(me.rank * 16 + j + i);
  }
  long before = g_mpi_alltoallv_calls;
  EXPECT_EQ(qcclAllToAllv(send, sc.data(), sd.data(), recv, rc.data(), rd.data(), qcclUint8, world, nullptr),
            qcclSuccess)
      << qcclGetLastError(world);
  EXPECT_EQ(g_mpi_alltoallv_calls, before) << "MPI_Alltoallv was called with displacements past INT_MAX";
  for (int j = 0; j < n; ++j)
    for (size_t i = 0; i < rc[j]; ++i)
      ASSERT_EQ(recv[rd[j] + i], static_cast<uint8_t>(j * 16 + me.rank + i)) << "block from rank " << j << " element " << i;
  ::munmap(send, bytes);
  ::munmap(recv, bytes);
  qcclCommDestroy(world);
}

// A receive that expects more than was sent is a remote error naming the
// peer, and breaks only that communicator.
TEST(MpiBackend, MismatchedCountsAreARemoteError) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) GTEST_SKIP() << "needs 2 MPI ranks (run under mpirun -np 4)";
  qcclComm_t world = qk::qccl::init_from_mpi(MPI_COMM_WORLD);
  qcclComm_t pair = nullptr;
  int wrank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  ASSERT_EQ(qcclCommSplit(world, wrank < 2 ? 0 : QCCL_SPLIT_NOCOLOR, 0, &pair, nullptr), qcclSuccess)
      << qcclGetLastError(nullptr);
  if (pair) {
    std::vector<int32_t> buf(10, 7);
    if (wrank == 0) {
      EXPECT_EQ(qcclSend(buf.data(), 5, qcclInt32, 1, pair, nullptr), qcclSuccess);
    } else {
      qcclResult_t rc = qcclRecv(buf.data(), 10, qcclInt32, 0, pair, nullptr);
      EXPECT_EQ(rc, qcclRemoteError) << qcclGetLastError(nullptr);
      EXPECT_NE(std::string(qcclGetLastError(nullptr)).find("sent 20 bytes where qcclRecv expected 40"),
                std::string::npos)
          << qcclGetLastError(nullptr);
      qcclResult_t async = qcclSuccess;
      qcclCommGetAsyncError(pair, &async);
      EXPECT_EQ(async, qcclRemoteError);
    }
    qcclCommDestroy(pair);
  }
  int32_t one = 1, n = 0;  // the parent still works
  EXPECT_EQ(qcclAllReduce(&one, &n, 1, qcclInt32, qcclSum, world, nullptr), qcclSuccess);
  int wsize = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  EXPECT_EQ(n, wsize);
  qcclCommDestroy(world);
}

// Counts MPI's int cannot carry are refused before any data moves.
TEST(MpiBackend, CountsBeyondIntAreAnInvalidArgument) {
  qcclComm_t world = qk::qccl::init_from_mpi(MPI_COMM_WORLD);
  char dummy[16] = {0};
  size_t huge = size_t(INT_MAX) + 1;
  EXPECT_EQ(qcclAllGather(dummy, dummy, huge, qcclInt8, world, nullptr), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(nullptr)).find("larger than MPI's int counts"), std::string::npos)
      << qcclGetLastError(nullptr);
  int32_t one = 1, n = 0;  // still usable
  EXPECT_EQ(qcclAllReduce(&one, &n, 1, qcclInt32, qcclSum, world, nullptr), qcclSuccess);
  qcclCommDestroy(world);
}

// Ranks other than 0 print only their failures, each line with its rank.
class FailuresOnly : public ::testing::EmptyTestEventListener {
 public:
  explicit FailuresOnly(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[MPI rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace qccl_test

int main(int argc, char** argv) {
  ::setenv("QCCL_BACKEND", "mpi", 0);  // this program tests the MPI backend
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  qk::logging::set_prefix(qccl_test::cat("[rank ", rank, "] "));
  if (rank != 0) {
    auto& ls = ::testing::UnitTest::GetInstance()->listeners();
    delete ls.Release(ls.default_result_printer());
    ls.Append(new qccl_test::FailuresOnly(rank));
  }
  int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
