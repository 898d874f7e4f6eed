// DDP between forked ranks: equal to one process on the whole batch (with
// and without no_sync accumulation), buckets overlap backward, bf16
// compression halves the bytes, rank 0's weights win at the start, and a
// model that differs across ranks is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "dist_ranks.h"
#include "qccl/ranks.h"
#include "qk/autograd/functions.h"
#include "qk/dist/ddp.h"
#include "qk/dist/process_group.h"
#include "qk/nn/nn.h"
#include "qk/optim/optim.h"
#include "qk/qccl/store.h"

namespace {

using namespace qk;
using qccl_test::Rank;
using qccl_test::run_ranks;

// Ranks in a process group joined through a store (dist_ranks.h).
template <typename F>
qccl_test::Result on_ranks(int n, F body) {
  return qk_dist_test::on_ranks(n, "ddp-test", body);
}

// Buckets of ~2 KB so the small test net has several.
dist::DDPOptions small_buckets() {
  dist::DDPOptions o;
  o.bucket_cap_mb = 0.002;
  o.first_bucket_mb = 0.001;
  return o;
}

nn::Sequential make_net(uint64_t seed) {
  manual_seed(seed);
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)), nn::ReLU(),
                        nn::Flatten(), nn::Linear(4 * 6 * 6, 16), nn::Tanh(), nn::Linear(16, 3));
}

// The whole batch: 8 samples; shard r of n is the r-th of n equal slices.
struct Batch {
  Tensor x, y;
};
Batch full_batch(int step) {
  Generator g(100 + step);
  Tensor x = randn({8, 2, 6, 6}, {}, g);
  std::vector<int64_t> y(8);
  for (int i = 0; i < 8; ++i) y[i] = (i * 7 + step) % 3;
  return {x, from_vector<int64_t>(y, {8})};
}
Batch shard(const Batch& b, int rank, int n) {
  int64_t per = b.x.size(0) / n;
  return {b.x.narrow(0, rank * per, per).contiguous(), b.y.narrow(0, rank * per, per).contiguous()};
}

double max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].to_vector<float>(), y = b[i].to_vector<float>();
    for (size_t k = 0; k < x.size(); ++k) d = std::max(d, std::fabs(double(x[k]) - y[k]));
  }
  return d;
}

// Three SGD steps on one process over the whole batch; accumulate = 2 splits
// each step's batch into two halves whose gradients add up (loss / 2 each).
std::vector<Tensor> reference(int steps, int accumulate) {
  auto net = make_net(1);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Batch b = full_batch(s);
    for (int a = 0; a < accumulate; ++a) {
      Batch part = shard(b, a, accumulate);
      (cross_entropy(net(part.x), part.y) * (1.0 / accumulate)).backward();
    }
    opt.step();
  }
  return net->parameters();
}

TEST(DDP, EqualsOneProcessOnTheWholeBatch) {
  for (int n : {2, 4}) {
    auto r = on_ranks(n, [n](const Rank& me, dist::ProcessGroup& pg) {
      const auto want = reference(3, 1);
      auto net = make_net(1 + me.rank);  // differing init: rank 0's is broadcast
      dist::DistributedDataParallel ddp(net.ptr(), pg, small_buckets());
      REQUIRE(ddp.num_buckets() > 1, "expected several buckets, got ", ddp.num_buckets());
      optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
      for (int s = 0; s < 3; ++s) {
        opt.zero_grad();
        ddp.prepare_forward();
        Batch b = shard(full_batch(s), me.rank, n);
        cross_entropy(net(b.x), b.y).backward();
        opt.step();
      }
      double d = max_abs_diff(net->parameters(), want);
      REQUIRE(d < 1e-5, "rank ", me.rank, " of ", n, ": weights differ from one process by ", d);
    });
    EXPECT_TRUE(r.ok()) << n << " ranks: " << r.summary();
  }
}

TEST(DDP, NoSyncAccumulatesThenAverages) {
  // 2 ranks x 2 micro-batches of 2 samples = the whole batch of 8, per step.
  auto r = on_ranks(2, [](const Rank& me, dist::ProcessGroup& pg) {
    const auto want = reference(3, 1);
    auto net = make_net(1);
    dist::DistributedDataParallel ddp(net.ptr(), pg);
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      Batch mine = shard(full_batch(s), me.rank, 2);
      {
        auto guard = ddp.no_sync();
        Batch m0 = shard(mine, 0, 2);
        (cross_entropy(net(m0.x), m0.y) * 0.5).backward();
      }
      Batch m1 = shard(mine, 1, 2);
      (cross_entropy(net(m1.x), m1.y) * 0.5).backward();
      opt.step();
    }
    double d = max_abs_diff(net->parameters(), want);
    REQUIRE(d < 1e-5, "rank ", me.rank, ": weights differ from one process by ", d);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(DDP, BucketsStartDuringBackward) {
  auto r = on_ranks(2, [](const Rank& me, dist::ProcessGroup& pg) {
    auto net = make_net(1);
    dist::DistributedDataParallel ddp(net.ptr(), pg, small_buckets());
    // Reverse registration order: the last Linear's parameters come first.
    auto layout = ddp.bucket_layout();
    size_t nparams = net->parameters().size();
    REQUIRE(layout.front().front() == nparams - 1, "first bucket starts with parameter ",
            layout.front().front());
    Batch b = shard(full_batch(0), me.rank, 2);
    cross_entropy(net(b.x), b.y).backward();
    const auto& st = ddp.last_step();
    REQUIRE(st.buckets == static_cast<int>(layout.size()), "buckets ", st.buckets);
    REQUIRE(st.buckets_launched_in_backward >= 1, "no bucket was launched during backward");
    REQUIRE(st.first_launch < st.backward_end, "the first all-reduce started after backward ended");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(DDP, Bf16CompressionHalvesTheBytes) {
  auto r = on_ranks(2, [](const Rank& me, dist::ProcessGroup& pg) {
    const auto want = reference(1, 1);
    int64_t bytes[2] = {0, 0};
    for (int c = 0; c < 2; ++c) {
      auto net = make_net(1);
      dist::DDPOptions o;
      if (c == 1) o.compress = DType::bf16;
      dist::DistributedDataParallel ddp(net.ptr(), pg, o);
      optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
      Batch b = shard(full_batch(0), me.rank, 2);
      cross_entropy(net(b.x), b.y).backward();
      opt.step();
      bytes[c] = ddp.last_step().wire_bytes;
      double d = max_abs_diff(net->parameters(), want);
      REQUIRE(d < (c == 1 ? 2e-3 : 1e-5), "compress ", c, ": weights differ by ", d);
    }
    REQUIRE(bytes[1] * 2 == bytes[0], "wire bytes f32 ", bytes[0], " bf16 ", bytes[1]);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(DDP, BuffersComeFromRankZero) {
  auto r = on_ranks(2, [](const Rank& me, dist::ProcessGroup& pg) {
    manual_seed(5);
    nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(2, 3, 3)), nn::BatchNorm2d(3));
    dist::DistributedDataParallel ddp(net.ptr(), pg);
    // Each rank's forward updates its running stats from its own data.
    Tensor x = randn({4, 2, 5, 5}) + double(me.rank);
    net(x);
    ddp.prepare_forward();
    Tensor mine = net->named_buffers().find("1.running_mean")->contiguous();
    Tensor all = empty({2 * mine.numel()});
    pg.all_gather(all, mine);
    auto v = all.to_vector<float>();
    for (int64_t k = 0; k < mine.numel(); ++k)
      REQUIRE(v[k] == v[mine.numel() + k], "running_mean differs after prepare_forward");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(DDP, AModelThatDiffersAcrossRanksIsRefused) {
  auto r = on_ranks(3, [](const Rank& me, dist::ProcessGroup& pg) {
    nn::Sequential net(nn::Linear(4, me.rank == 2 ? 5 : 4));
    try {
      dist::DistributedDataParallel ddp(net.ptr(), pg);
    } catch (const ValueError& e) {
      std::string m = e.what();
      REQUIRE(m.find("rank 2") != std::string::npos && m.find("rank 1 ") == std::string::npos, m);
      return;
    }
    REQUIRE(false, "a mismatched model was accepted");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
