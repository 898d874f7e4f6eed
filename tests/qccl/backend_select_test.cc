// Choosing a backend with QCCL_BACKEND: the native default, explicit native,
// and the clear errors for an unknown name or for mpi outside an MPI job.
// (The MPI matrix runs under mpirun: backend_mpi_matrix.cc; NCCL:
// backend_nccl_gpu.cc.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/backend.h"
#include "comm.h"
#include "ranks.h"

namespace qccl_test {
namespace {

std::string backend_name(qcclComm_t c) { return c->backend ? c->backend->name() : "(none)"; }

TEST(BackendSelect, DefaultAndExplicitNativeRunTheNativeEngine) {
  Options o;
  o.num_ids = 3;  // one communicator per setting
  auto r = run_ranks(3, [](const Rank& me) {
    const char* settings[] = {"", "auto", "native"};
    for (int i = 0; i < 3; ++i) {
      const char* want = settings[i];
      if (*want) ::setenv("QCCL_BACKEND", want, 1);
      else ::unsetenv("QCCL_BACKEND");
      qcclComm_t comm = me.init(i);
      REQUIRE(backend_name(comm) == "native", "QCCL_BACKEND='", want, "' gave ", backend_name(comm));
      int32_t v = me.rank + 1, sum = 0;
      REQUIRE_OK(qcclAllReduce(&v, &sum, 1, qcclInt32, qcclSum, comm, nullptr));
      REQUIRE(sum == 6, "sum ", sum);
      REQUIRE_OK(qcclCommDestroy(comm));
    }
  }, o);
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(BackendSelect, UnknownBackendIsAnInvalidArgumentNamingTheVariable) {
  auto r = run_ranks(2, [](const Rank& me) {
    ::setenv("QCCL_BACKEND", "gloo", 1);
    qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
    cfg.timeoutS = 10;
    qcclComm_t comm = nullptr;
    qcclResult_t rc = qcclCommInitRankConfig(&comm, 2, me.ids[0], me.rank, &cfg);
    std::string err = qcclGetLastError(nullptr);
    REQUIRE(rc == qcclInvalidArgument, "got ", qcclGetErrorString(rc), ": ", err);
    REQUIRE(err.find("QCCL_BACKEND") != std::string::npos && err.find("'gloo'") != std::string::npos &&
                err.find("native") != std::string::npos,
            err);
    REQUIRE(comm == nullptr, "a failed init must leave no communicator");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

#ifdef QK_HAVE_MPI
// Forked ranks are not an MPI job: the MPI backend says so instead of
// starting singleton MPI processes that cannot talk to each other.
TEST(BackendSelect, MpiOutsideAnMpiJobIsAClearUsageError) {
  auto r = run_ranks(2, [](const Rank& me) {
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                          "SLURM_PROCID", "SLURM_NTASKS"})
      ::unsetenv(v);
    ::setenv("QCCL_BACKEND", "mpi", 1);
    qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
    cfg.timeoutS = 10;
    qcclComm_t comm = nullptr;
    qcclResult_t rc = qcclCommInitRankConfig(&comm, 2, me.ids[0], me.rank, &cfg);
    std::string err = qcclGetLastError(nullptr);
    REQUIRE(rc == qcclInvalidUsage, "got ", qcclGetErrorString(rc), ": ", err);
    REQUIRE(err.find("mpirun") != std::string::npos, err);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}
#endif

}  // namespace
}  // namespace qccl_test
