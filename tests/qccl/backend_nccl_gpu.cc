// The NCCL backend (qianka::qccl_nccl), built when CUDA and NCCL are found.
// The device tests run only where a CUDA device exists and skip, saying why,
// elsewhere; the others check, on any machine, that linking NCCL changes
// nothing for host buffers and that QCCL_BACKEND=nccl without a device is a
// clear error. CUDA is touched only inside forked ranks: a CUDA context does
// not survive fork().
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "alltoallv_data.h"
#include "backend/backend.h"
#include "comm.h"
#include "core/reduce.h"
#include "ranks.h"

namespace qccl_test {
namespace {

// cudaGetDeviceCount in a child process (-1: the call failed), so that this
// process never initialises CUDA before forking ranks.
int device_count_in_child(std::string* why) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    char msg[256];
    int len = std::snprintf(msg, sizeof msg, "%d %s", e == cudaSuccess ? n : -1,
                            e == cudaSuccess ? "ok" : cudaGetErrorString(e));
    ssize_t w = ::write(fds[1], msg, static_cast<size_t>(len));
    ::_exit(w == len ? 0 : 1);
  }
  ::close(fds[1]);
  char buf[256] = {0};
  ssize_t got = ::read(fds[0], buf, sizeof buf - 1);
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (got <= 0) return -1;
  int n = std::atoi(buf);
  const char* space = std::strchr(buf, ' ');
  *why = space ? space + 1 : "";
  return n;
}

#define SKIP_WITHOUT_DEVICES(k)                                                                  \
  do {                                                                                           \
    std::string why_;                                                                            \
    int n_ = device_count_in_child(&why_);                                                       \
    if (n_ < (k))                                                                                \
      GTEST_SKIP() << "needs " << (k) << " CUDA device(s), cudaGetDeviceCount gave "            \
                   << (n_ < 0 ? "an error: " + why_ : std::to_string(n_))                        \
                   << ((k) > 1 && n_ == 1 ? " (NCCL refuses two ranks on one device)" : ""); \
  } while (0)

// Each rank all-reduces device buffers (f32 and bf16, in and out of place);
// QCCL_BACKEND=auto routes them to NCCL.
void device_all_reduce(const Rank& me) {
  REQUIRE(cudaSetDevice(me.rank) == cudaSuccess, "cudaSetDevice(", me.rank, ")");
  qcclComm_t comm = me.init();
  const size_t count = 1 << 20;
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = float((me.rank + 1) * (i % 1000));
  float *dsend = nullptr, *drecv = nullptr;
  REQUIRE(cudaMalloc(&dsend, count * 4) == cudaSuccess, "cudaMalloc");
  REQUIRE(cudaMalloc(&drecv, count * 4) == cudaSuccess, "cudaMalloc");
  REQUIRE(cudaMemcpy(dsend, host.data(), count * 4, cudaMemcpyHostToDevice) == cudaSuccess, "copy in");
  int n = me.nranks;
  float scale = float(n * (n + 1) / 2);
  REQUIRE_OK(qcclAllReduce(dsend, drecv, count, qcclFloat32, qcclSum, comm, nullptr));
  REQUIRE(comm->device_backend && std::string(comm->device_backend->name()) == "nccl",
          "device buffers did not go through NCCL");
  std::vector<float> out(count);
  REQUIRE(cudaMemcpy(out.data(), drecv, count * 4, cudaMemcpyDeviceToHost) == cudaSuccess, "copy out");
  for (size_t i = 0; i < count; ++i)
    REQUIRE(out[i] == scale * float(i % 1000), "element ", i, ": ", out[i]);
  // In place, and bf16 (reduced by NCCL; small integers are exact).
  std::vector<uint16_t> hb(count);
  for (size_t i = 0; i < count; ++i) hb[i] = qccl::float_to_bf16(float(i % 7));
  REQUIRE(cudaMemcpy(dsend, hb.data(), count * 2, cudaMemcpyHostToDevice) == cudaSuccess, "copy in");
  REQUIRE_OK(qcclAllReduce(dsend, dsend, count, qcclBfloat16, qcclSum, comm, nullptr));
  REQUIRE(cudaMemcpy(hb.data(), dsend, count * 2, cudaMemcpyDeviceToHost) == cudaSuccess, "copy out");
  for (size_t i = 0; i < count; ++i)
    REQUIRE(qccl::bf16_to_float(hb[i]) == float(n * (i % 7)), "bf16 element ", i);
  // Host buffers on the same communicator still use the native engine.
  int32_t v = 1, sum = 0;
  REQUIRE_OK(qcclAllReduce(&v, &sum, 1, qcclInt32, qcclSum, comm, nullptr));
  REQUIRE(sum == n, "host sum ", sum);
  cudaFree(dsend);
  cudaFree(drecv);
  REQUIRE_OK(qcclCommDestroy(comm));
}

TEST(NcclBackend, AllReduceOfDeviceBuffersAcrossTwoProcesses) {
  SKIP_WITHOUT_DEVICES(2);
  auto r = run_ranks(2, device_all_reduce);
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(NcclBackend, AllReduceOfDeviceBuffersOnOneRank) {
  SKIP_WITHOUT_DEVICES(1);
  auto r = run_ranks(1, device_all_reduce);
  EXPECT_TRUE(r.ok()) << r.summary();
}

// qcclAllToAllv of device buffers: NCCL's grouped send/receive, on one rank
// (NCCL refuses two ranks on one device) with blocks at scattered
// displacements, the gaps left alone.
TEST(NcclBackend, AllToAllvOfDeviceBuffersOnOneRank) {
  SKIP_WITHOUT_DEVICES(1);
  auto r = run_ranks(1, [](const Rank& me) {
    REQUIRE(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
    qcclComm_t comm = me.init();
    for (VPattern p : {VPattern::kUneven, VPattern::kLarge}) {
      VCase c(p, me.rank, me.nranks, qcclFloat32);
      void *dsend = nullptr, *drecv = nullptr;
      REQUIRE(cudaMalloc(&dsend, c.send.size()) == cudaSuccess, "cudaMalloc");
      REQUIRE(cudaMalloc(&drecv, c.recv.size()) == cudaSuccess, "cudaMalloc");
      REQUIRE(cudaMemcpy(dsend, c.send.data(), c.send.size(), cudaMemcpyHostToDevice) == cudaSuccess, "copy in");
      REQUIRE(cudaMemcpy(drecv, c.recv.data(), c.recv.size(), cudaMemcpyHostToDevice) == cudaSuccess, "copy in");
      REQUIRE_OK(qcclAllToAllv(dsend, c.send_counts.data(), c.send_displs.data(), drecv, c.recv_counts.data(),
                               c.recv_displs.data(), c.dtype, comm, nullptr));
      REQUIRE(comm->device_backend && std::string(comm->device_backend->name()) == "nccl",
              "device buffers did not go through NCCL");
      REQUIRE(cudaMemcpy(c.recv.data(), drecv, c.recv.size(), cudaMemcpyDeviceToHost) == cudaSuccess, "copy out");
      REQUIRE(c.check().empty(), pattern_name(p), ": ", c.check());
      cudaFree(dsend);
      cudaFree(drecv);
    }
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Linking NCCL changes nothing for host memory (no GPU needed).
TEST(NcclBackend, HostBuffersStayOnTheNativeEngine) {
  auto r = run_ranks(2, [](const Rank& me) {
    ::unsetenv("QCCL_BACKEND");
    qcclComm_t comm = me.init();
    std::vector<float> a(1000, float(me.rank + 1)), b(1000, 0);
    REQUIRE_OK(qcclAllReduce(a.data(), b.data(), a.size(), qcclFloat32, qcclSum, comm, nullptr));
    REQUIRE(b[0] == 3 && b[999] == 3, "got ", b[0]);
    REQUIRE(std::string(comm->backend->name()) == "native" && !comm->device_backend,
            "host buffers must not start NCCL");
    REQUIRE(comm->device_kind && std::string(comm->device_kind) == "nccl",
            "the NCCL backend did not register itself (linked whole?)");
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// QCCL_BACKEND=nccl: device buffers through NCCL, host buffers (a job's
// metrics and barriers) still on the native engine, not handed to NCCL.
TEST(NcclBackend, ForcedNcclLeavesHostBuffersToTheNativeEngine) {
  SKIP_WITHOUT_DEVICES(1);
  auto r = run_ranks(1, [](const Rank& me) {
    REQUIRE(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
    ::setenv("QCCL_BACKEND", "nccl", 1);
    qcclComm_t comm = me.init();
    ::unsetenv("QCCL_BACKEND");
    REQUIRE(std::string(comm->backend->name()) == "nccl", "QCCL_BACKEND=nccl did not choose NCCL");
    std::vector<float> a(1000, 2.0f), b(1000, 0);
    REQUIRE_OK(qcclAllReduce(a.data(), b.data(), a.size(), qcclFloat32, qcclSum, comm, nullptr));
    REQUIRE(b[0] == 2 && b[999] == 2, "host all-reduce got ", b[0]);
    const char* carrier = "unset";
    REQUIRE_OK(qcclCommDeviceBackend(comm, a.data(), &carrier));
    REQUIRE(carrier == nullptr, "a host buffer reported as carried by ", carrier);
    void* d = nullptr;
    REQUIRE(cudaMalloc(&d, 4000) == cudaSuccess, "cudaMalloc");
    REQUIRE_OK(qcclCommDeviceBackend(comm, d, &carrier));
    REQUIRE(carrier && std::string(carrier) == "nccl", "device memory not carried by NCCL");
    REQUIRE(cudaMemcpy(d, a.data(), 4000, cudaMemcpyHostToDevice) == cudaSuccess, "copy in");
    REQUIRE_OK(qcclAllReduce(d, d, 1000, qcclFloat32, qcclSum, comm, nullptr));
    REQUIRE(cudaMemcpy(b.data(), d, 4000, cudaMemcpyDeviceToHost) == cudaSuccess, "copy out");
    REQUIRE(b[0] == 2, "device all-reduce got ", b[0]);
    cudaFree(d);
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Without a device, QCCL_BACKEND=nccl fails init with a message saying so.
TEST(NcclBackend, ForcedWithoutADeviceIsAClearError) {
  std::string why;
  if (device_count_in_child(&why) > 0) GTEST_SKIP() << "this machine has a CUDA device";
  auto r = run_ranks(2, [](const Rank& me) {
    ::setenv("QCCL_BACKEND", "nccl", 1);
    qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
    cfg.timeoutS = 10;
    qcclComm_t comm = nullptr;
    qcclResult_t rc = qcclCommInitRankConfig(&comm, 2, me.ids[0], me.rank, &cfg);
    std::string err = qcclGetLastError(nullptr);
    REQUIRE(rc == qcclInvalidUsage, "got ", qcclGetErrorString(rc), ": ", err);
    REQUIRE(err.find("needs a CUDA device") != std::string::npos, err);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qccl_test
