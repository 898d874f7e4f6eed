// Process groups and DDP on CUDA tensors, one rank (the GPU machine has one
// GPU, and NCCL refuses two ranks on one device). Skipped, saying why,
// without a device. Under QCCL_BACKEND=auto the tensors go straight to
// qccl's NCCL backend behind a fence on the caller's stream; under native
// they go through host copies; both must give what the tensors say.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

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

nn::Sequential make_net() {
  manual_seed(1);
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)), nn::ReLU(), nn::Flatten(),
                        nn::Linear(4 * 6 * 6, 16), nn::Tanh(), nn::Linear(16, 3));
}

std::vector<Tensor> train(dist::ProcessGroup* pg) {
  auto net = make_net();
  net->to(kGpu);
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (pg) {
    dist::DDPOptions o;
    o.bucket_cap_mb = 0.001;
    o.first_bucket_mb = 0.0005;
    ddp = std::make_unique<dist::DistributedDataParallel>(net.ptr(), *pg, o);
    EXPECT_GT(ddp->num_buckets(), 2u);
  }
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  for (int s = 0; s < 3; ++s) {
    Generator g(100 + s);
    const Tensor x = randn({4, 2, 6, 6}, {}, g).to(kGpu);
    const Tensor y = from_vector<int64_t>({s % 3, 1, 2, 0}, {4}).to(kGpu);
    opt.zero_grad();
    cross_entropy(net(x), y).backward();
    opt.step();
  }
  std::vector<Tensor> out;
  for (const Tensor& p : net->parameters()) out.push_back(p.to(kCPU));
  return out;
}

// One rank averages over itself: DDP's buckets through NCCL (or staged) must
// leave every step as without DDP, bit for bit.
TEST_F(DistCuda, OneRankDdpOnTheGpuEqualsTrainingWithoutIt) {
  const std::vector<Tensor> local = train(nullptr);
  for (const char* backend : {"auto", "native"}) {
    SCOPED_TRACE(backend);
    auto pg = group(backend);
    const std::vector<Tensor> ddp = train(pg.get());
    ASSERT_EQ(local.size(), ddp.size());
    for (size_t i = 0; i < local.size(); ++i)
      EXPECT_EQ(local[i].to_vector<float>(), ddp[i].to_vector<float>()) << "parameter " << i;
  }
}

}  // namespace
