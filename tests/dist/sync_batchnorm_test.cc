// SyncBatchNorm between forked ranks: each rank's slice of a batch gives the
// same output, running stats and gradients as plain BatchNorm2d on the whole
// batch in one process; DDP + SyncBatchNorm training equals one process; the
// synced backward passes a finite-difference check.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "dist_ranks.h"
#include "qccl/ranks.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/dist/ddp.h"
#include "qk/dist/process_group.h"
#include "qk/dist/sync_batchnorm.h"
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
  return qk_dist_test::on_ranks(n, "syncbn-test", body);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  if (x.size() != y.size()) return INFINITY;
  double d = 0;
  for (size_t k = 0; k < x.size(); ++k) d = std::max(d, std::fabs(x[k] - y[k]));
  return d;
}

// Rows [first, first + count) of the batch that rank r of n holds: uneven
// (rank r has r + 1 rows) so the statistics must weight ranks by count.
struct Slice {
  int64_t first, count;
};
Slice slice_of(int rank) { return {int64_t(rank) * (rank + 1) / 2, rank + 1}; }
int64_t batch_of(int n) { return int64_t(n) * (n + 1) / 2; }

nn::BatchNorm2d make_bn(const nn::BatchNormOptions& o) {
  nn::BatchNorm2d bn(o);
  if (o.affine()) {  // not the identity, so weight and bias matter
    NoGradGuard ng;
    bn->weight.copy_(from_vector<float>({0.5f, 1.5f, -1.0f}, {3}));
    bn->bias.copy_(from_vector<float>({0.1f, -0.2f, 0.3f}, {3}));
  }
  return bn;
}

TEST(SyncBatchNorm, EqualsBatchNormOnTheWholeBatch) {
  for (int n : {2, 3}) {
    auto r = on_ranks(n, [n](const Rank& me, dist::ProcessGroup& pg) {
      const Slice s = slice_of(me.rank);
      const int64_t B = batch_of(n);
      // Default momentum with affine; cumulative average without.
      for (bool affine : {true, false}) {
        auto o = nn::BatchNormOptions(3).affine(affine);
        if (!affine) o.momentum(std::nullopt);
        nn::BatchNorm2d ref = make_bn(o), bn = make_bn(o);
        nn::Sequential net(nn::Identity(), bn);
        REQUIRE(dist::convert_sync_batchnorm(*net, pg) == 1, "expected one BatchNorm2d converted");
        for (int step = 0; step < 2; ++step) {
          Generator g(10 + step);
          // A large mean: the moments must not cancel the variance away.
          Tensor x_all = randn({B, 3, 4, 5}, {}, g) * 2.0 + 3.0;
          Tensor dy_all = randn({B, 3, 4, 5}, {}, g);
          Tensor xr = x_all.clone().requires_grad_();
          Tensor yr = ref(xr);
          (yr * dy_all).sum().backward();
          Tensor x = x_all.narrow(0, s.first, s.count).contiguous().requires_grad_();
          Tensor y = net(x);
          (y * dy_all.narrow(0, s.first, s.count).contiguous()).sum().backward();

          const std::string at = qccl_test::cat("rank ", me.rank, " of ", n, " affine ", affine,
                                                " step ", step, ": ");
          double d = max_abs_diff(y, yr.narrow(0, s.first, s.count).contiguous());
          REQUIRE(d < 1e-5, at, "output differs by ", d);
          d = max_abs_diff(x.grad(), xr.grad().narrow(0, s.first, s.count).contiguous());
          REQUIRE(d < 1e-5, at, "input gradient differs by ", d);
          d = max_abs_diff(bn->running_mean, ref->running_mean);
          REQUIRE(d < 1e-5, at, "running_mean differs by ", d);
          d = max_abs_diff(bn->running_var, ref->running_var);
          REQUIRE(d < 1e-5, at, "running_var differs by ", d);
          REQUIRE(bn->num_batches_tracked.item<int64_t>() == step + 1, at, "num_batches_tracked");
          if (affine) {
            // Local per rank, as PyTorch: their sum over ranks is the whole batch's.
            const std::vector<std::pair<Tensor, Tensor>> params = {{bn->weight, ref->weight},
                                                                   {bn->bias, ref->bias}};
            for (const auto& [mine, want] : params) {
              Tensor total = mine.grad().clone();
              pg.all_reduce(total);
              d = max_abs_diff(total, want.grad());
              REQUIRE(d < 1e-4, at, "summed weight/bias gradient differs by ", d);
            }
            bn->zero_grad();
            ref->zero_grad();
          }
        }
        // Eval: running stats, no communication (rank 0 alone evaluates).
        ref->eval();
        bn->eval();
        if (me.rank == 0) {
          Tensor x = randn({2, 3, 4, 5});
          double d = max_abs_diff(bn(x), ref(x));
          REQUIRE(d < 1e-6, "eval output differs by ", d);
        }
        pg.barrier();
      }
    });
    EXPECT_TRUE(r.ok()) << n << " ranks: " << r.summary();
  }
}

// conv + bn + linear; batch of 8 split 4 + 4.
nn::Sequential make_net() {
  manual_seed(3);
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)), nn::BatchNorm2d(4),
                        nn::ReLU(), nn::Flatten(), nn::Linear(4 * 6 * 6, 3));
}
struct Batch {
  Tensor x, y;
};
Batch full_batch(int step) {
  Generator g(200 + step);
  Tensor x = randn({8, 2, 6, 6}, {}, g) + 0.5;
  std::vector<int64_t> y(8);
  for (int i = 0; i < 8; ++i) y[i] = (i * 5 + step) % 3;
  return {x, from_vector<int64_t>(y, {8})};
}

TEST(SyncBatchNorm, WithDDPEqualsOneProcessOnTheWholeBatch) {
  auto r = on_ranks(2, [](const Rank& me, dist::ProcessGroup& pg) {
    const int steps = 3;
    auto ref = make_net();
    optim::SGD ref_opt(ref->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < steps; ++s) {
      ref_opt.zero_grad();
      Batch b = full_batch(s);
      cross_entropy(ref(b.x), b.y).backward();
      ref_opt.step();
    }

    auto net = make_net();
    REQUIRE(dist::convert_sync_batchnorm(*net, pg) == 1, "expected one BatchNorm2d converted");
    dist::DistributedDataParallel ddp(net.ptr(), pg);
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < steps; ++s) {
      opt.zero_grad();
      ddp.prepare_forward();
      Batch b = full_batch(s);
      Tensor x = b.x.narrow(0, 4 * me.rank, 4).contiguous();
      Tensor y = b.y.narrow(0, 4 * me.rank, 4).contiguous();
      cross_entropy(net(x), y).backward();
      opt.step();
    }
    auto got = net->state_dict(), want = ref->state_dict();
    for (const auto& key : want.keys()) {
      double d = max_abs_diff(*got.find(key), *want.find(key));
      REQUIRE(d < 1e-5, "rank ", me.rank, ": ", key, " differs from one process by ", d);
    }
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(SyncBatchNorm, BackwardMatchesFiniteDifferences) {
  auto r = on_ranks(1, [](const Rank&, dist::ProcessGroup& pg) {
    Generator g(7);
    Tensor x = (randn({3, 2, 2, 3}, DType::f64, g) * 1.5 + 0.5).requires_grad_();
    Tensor w = randn({2}, DType::f64, g).requires_grad_();
    Tensor b = randn({2}, DType::f64, g).requires_grad_();
    Tensor dy = randn({3, 2, 2, 3}, DType::f64, g);
    auto f = [&pg, &dy](const std::vector<Tensor>& in) {
      Tensor w = in.size() > 1 ? in[1] : Tensor(), b = in.size() > 2 ? in[2] : Tensor();
      Tensor y = dist::sync_batch_norm(in[0], w, b, Tensor(), Tensor(), 0.1, 1e-5, pg);
      return (y * dy).sum() + (y * y).sum() * 0.25;  // nonlinear in y too
    };
    auto res = autograd::gradcheck(f, {x, w, b});
    REQUIRE(res.ok, "affine: ", res.message);
    res = autograd::gradcheck(f, {x});
    REQUIRE(res.ok, "no affine: ", res.message);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(SyncBatchNorm, TooFewValuesOverAllRanksIsAnError) {
  auto r = on_ranks(2, [](const Rank& me, dist::ProcessGroup& pg) {
    // Rank 0 has one sample of one pixel, rank 1 none: one value per channel in all.
    Tensor x = zeros({me.rank == 0 ? 1 : 0, 3, 1, 1});
    try {
      dist::sync_batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5, pg);
    } catch (const Error& e) {
      REQUIRE(std::string(e.what()).find("more than 1 value per channel") != std::string::npos,
              e.what());
      return;
    }
    REQUIRE(false, "a global batch of one value per channel was accepted");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
