// The small DDP run the device tests share (tests/dist/cuda, the loopback
// device's): a conv net, buckets of ~1 KB (several per step), three SGD
// steps with momentum on `device`, the weights back on the host. Without a
// group it trains alone; `rank` picks each rank's batches.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "qk/autograd/functions.h"
#include "qk/dist/ddp.h"
#include "qk/nn/nn.h"
#include "qk/optim/optim.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"

namespace qk::test {

struct DeviceDdpRun {
  Device device = kCPU;
  dist::ProcessGroup* group = nullptr;  // null: no DDP
  std::optional<DType> compress;
  double weight_scale = 1.0;  // this rank's initial weights x this (rank 0's broadcast must undo it)
};

inline std::vector<Tensor> device_ddp_run(const DeviceDdpRun& r) {
  manual_seed(1);
  auto net = nn::Sequential(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)), nn::ReLU(), nn::Flatten(),
                            nn::Linear(4 * 6 * 6, 16), nn::Tanh(), nn::Linear(16, 3));
  if (r.weight_scale != 1.0) {
    NoGradGuard no_grad;
    for (const Tensor& p : net->parameters()) ops::mul_(p, r.weight_scale);
  }
  net->to(r.device);
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  const int rank = r.group ? r.group->rank() : 0;
  if (r.group) {
    dist::DDPOptions o;
    o.bucket_cap_mb = 0.001;
    o.first_bucket_mb = 0.0005;
    o.compress = r.compress;
    ddp = std::make_unique<dist::DistributedDataParallel>(net.ptr(), *r.group, o);
    if (ddp->num_buckets() < 3)
      throw std::runtime_error("device_ddp_run: expected several buckets, got " + std::to_string(ddp->num_buckets()));
  }
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  for (int s = 0; s < 3; ++s) {
    Generator g(100 + 10 * s + rank);
    const Tensor x = randn({4, 2, 6, 6}, {}, g).to(r.device);
    const Tensor y = from_vector<int64_t>({s % 3, 1, 2, 0}, {4}).to(r.device);
    opt.zero_grad();
    cross_entropy(net(x), y).backward();
    opt.step();
  }
  std::vector<Tensor> out;
  for (const Tensor& p : net->parameters()) out.push_back(p.to(kCPU));
  return out;
}

}  // namespace qk::test
