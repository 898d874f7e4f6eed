// NCCL-shaped host code compiles against qccl unchanged and runs.
#include <gtest/gtest.h>

#include "qccl_nccl_compat.h"
#include "ranks.h"

namespace {

// Written as NCCL code would be: only nccl* names.
ncclResult_t allreduce_and_bcast(ncclComm_t comm, float* buf, int n, void* stream) {
  ncclResult_t rc = ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, stream);
  if (rc != ncclSuccess) return rc;
  ncclGroupStart();
  rc = ncclBroadcast(buf, buf, n, ncclFloat, 0, comm, stream);
  ncclGroupEnd();
  return rc;
}

TEST(NcclCompat, NcclNamedCodeRunsOnQccl) {
  auto r = qccl_test::run_ranks(3, [](const qccl_test::Rank& me) {
    ncclComm_t comm;
    ncclUniqueId id = me.ids[0];
    REQUIRE(ncclCommInitRank(&comm, me.nranks, id, me.rank) == ncclSuccess, ncclGetLastError(nullptr));
    float buf[4] = {1, 2, 3, float(me.rank)};
    REQUIRE(allreduce_and_bcast(comm, buf, 4, nullptr) == ncclSuccess, ncclGetLastError(comm));
    REQUIRE(buf[0] == 3 && buf[3] == 3, "got ", buf[0], " ", buf[3]);
    int count = 0;
    ncclCommCount(comm, &count);
    REQUIRE(count == 3, "count ", count);
    REQUIRE(std::string(ncclGetErrorString(ncclRemoteError)).find("remote") != std::string::npos, "");
    ncclCommDestroy(comm);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
