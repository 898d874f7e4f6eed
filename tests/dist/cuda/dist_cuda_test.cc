// Process groups and DDP on CUDA tensors, one rank (the GPU machine has one
// GPU, and NCCL refuses two ranks on one device). Skipped, saying why,
// without a device. Under QCCL_BACKEND=auto the tensors go straight to
// qccl's NCCL backend behind a fence on the caller's stream; under native
// they go through host copies; both must give what the tensors say.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/device_ddp_run.h"
#include "qccl.h"
#include "qk/autograd/functions.h"
#include "qk/dist/ddp.h"
#include "qk/dist/process_group.h"
#include "qk/nn/nn.h"
#include "qk/optim/optim.h"
#include "qk/tensor/cuda.h"
#include "qk/tensor/cuda/stream.h"
#include "qk/tensor/ops/elementwise.h"

namespace {

using namespace qk;
const Device kGpu("cuda:0");

class DistCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
  // A one-rank group whose collectives run on `backend` (QCCL_BACKEND).
  static std::unique_ptr<dist::ProcessGroup> group(const char* backend) {
    ::setenv("QCCL_BACKEND", backend, 1);
    auto pg = dist::ProcessGroup::create(dist::LaunchEnv{}, dist::InitOptions().timeout(60));
    ::setenv("QCCL_BACKEND", "auto", 1);
    return pg;
  }
  static std::string carrier(dist::ProcessGroup& pg, const Tensor& t) {
    const char* name = nullptr;
    EXPECT_EQ(qcclCommDeviceBackend(pg.comm().handle(), t.raw_data(), &name), qcclSuccess);
    return name ? name : "host";
  }
};

int64_t count_not(const Tensor& t, float v) {
  int64_t k = 0;
  for (float e : t.to(kCPU).to_vector<float>()) k += e != v;
  return k;
}

// A long chain of kernels on a side stream writes x; the all-gather is
// submitted at once and must still read the chain's result (the fence), not
// what x held when the call was made.
TEST_F(DistCuda, CollectivesReadWhatTheCurrentStreamWrote) {
  for (const char* backend : {"auto", "native"}) {
    SCOPED_TRACE(backend);
    auto pg = group(backend);
    const int64_t n = int64_t{1} << 24;
    Tensor x = zeros({n}, TensorOptions().device(kGpu));
    Tensor out = zeros({n}, TensorOptions().device(kGpu));
    EXPECT_EQ(carrier(*pg, x), std::string(backend) == "auto" ? "nccl" : "host");
    cuda::Stream side = cuda::Stream::create(0);
    {
      cuda::StreamGuard g(side);
      const Tensor one = ones({n}, TensorOptions().device(kGpu));
      for (int i = 0; i < 40; ++i) ops::add_(x, one);
      dist::WorkPtr w = pg->all_gather_async(out, x);
      w->wait();
      EXPECT_EQ(count_not(out, 40.0f), 0) << "elements the all-gather read before the kernels wrote them";
      pg->all_reduce(x, dist::ReduceOp::avg);
      EXPECT_EQ(count_not(x, 40.0f), 0);
    }
  }
}

// One rank averages over itself: DDP's buckets through NCCL (or staged) must
// leave every step as without DDP, bit for bit.
TEST_F(DistCuda, OneRankDdpOnTheGpuEqualsTrainingWithoutIt) {
  test::DeviceDdpRun run;
  run.device = kGpu;
  const std::vector<Tensor> local = test::device_ddp_run(run);
  for (const char* backend : {"auto", "native"}) {
    SCOPED_TRACE(backend);
    auto pg = group(backend);
    run.group = pg.get();
    const std::vector<Tensor> ddp = test::device_ddp_run(run);
    ASSERT_EQ(local.size(), ddp.size());
    for (size_t i = 0; i < local.size(); ++i)
      EXPECT_EQ(local[i].to_vector<float>(), ddp[i].to_vector<float>()) << "parameter " << i;
  }
}

}  // namespace
