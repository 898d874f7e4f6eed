// PME over ranks with the FFT split in slabs (pme_slab_fft.h): ranks played
// by threads, each spreading and gathering its share of the atoms and
// transforming its slab of the grid, give one Pme's forces on their atoms and,
// summed, its energy and virial; also with a new box, uneven slabs, atoms
// sorted into x-ranges (each rank touching a few planes) or not (all), and
// more ranks than the grid has planes (the replicated FFT instead).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "pme.h"
#include "pme_slab_fft.h"
#include "qk/base/error.h"
#include "thread_comm.h"

namespace {

using qk::md::Mat3;
using qk::md::Vec3;

struct Charges {
  std::vector<Vec3> x;
  std::vector<double> q;
};

// n random charges in the box, neutral, some zero (as a TIP4P oxygen's); sorted by x when `by_x`.
Charges random_charges(const Vec3& box, int n, bool by_x, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(0, 1);
  Charges c;
  for (int i = 0; i < n; ++i) {
    c.x.push_back({u(gen) * box[0], u(gen) * box[1], u(gen) * box[2]});
    c.q.push_back(i % 7 == 3 ? 0.0 : u(gen) - 0.5);
  }
  const double mean = std::accumulate(c.q.begin(), c.q.end(), 0.0) / n;
  for (double& q : c.q)
    if (q != 0) q -= mean * n / (n - n / 7);
  if (by_x) {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return c.x[a][0] < c.x[b][0]; });
    Charges s;
    for (int i : order) {
      s.x.push_back(c.x[i]);
      s.q.push_back(c.q[i]);
    }
    return s;
  }
  return c;
}

struct Result {
  std::vector<Vec3> f;
  double energy = 0;
  Mat3 virial{};
};

// Each of `ranks` threads computes atoms [n r / ranks, n (r + 1) / ranks) over `boxes` in turn (set_box
// between); per box, the forces of every atom (each from its rank) and the ranks' summed energy and virial.
std::vector<Result> over_ranks(const Charges& c, const std::vector<Vec3>& boxes, const std::array<int, 3>& grid,
                               int order, int ranks, bool forces_only_too) {
  const int n = static_cast<int>(c.x.size());
  qk::md::test::ThreadComm comm(ranks);
  std::vector<std::vector<Result>> per_rank(ranks, std::vector<Result>(boxes.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      const qk::md::ForceShare s = comm.share(r);
      const qk::md::PmeShare share{n * r / ranks, n * (r + 1) / ranks, s.allreduce_sum, r == 0, r, ranks,
                                   s.exchange};
      qk::md::Pme pme(boxes[0], grid, order, 3.1, 1.0);
      for (size_t b = 0; b < boxes.size(); ++b) {
        pme.set_box(boxes[b]);
        Result& res = per_rank[r][b];
        res.f.assign(n, Vec3{0, 0, 0});
        res.energy = pme.compute(c.x, c.q, &res.f, &res.virial, &share);
        if (forces_only_too) {  // a step without energies: the same forces, no energy
          std::vector<Vec3> f2(n, Vec3{0, 0, 0});
          EXPECT_EQ(pme.compute(c.x, c.q, &f2, nullptr, &share), 0);
          for (int a = share.a0; a < share.a1; ++a)
            for (int d = 0; d < 3; ++d) EXPECT_DOUBLE_EQ(f2[a][d], res.f[a][d]) << "rank " << r << " atom " << a;
        }
      }
    });
  for (std::thread& t : threads) t.join();
  std::vector<Result> out(boxes.size());
  for (size_t b = 0; b < boxes.size(); ++b) {
    out[b].f.assign(n, Vec3{0, 0, 0});
    for (int r = 0; r < ranks; ++r) {
      for (int a = n * r / ranks; a < n * (r + 1) / ranks; ++a) out[b].f[a] = per_rank[r][b].f[a];
      out[b].energy += per_rank[r][b].energy;
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) out[b].virial[i][j] += per_rank[r][b].virial[i][j];
    }
  }
  return out;
}

void expect_ranks_equal_one_pme(const std::array<int, 3>& grid, int order, int ranks, bool by_x) {
  SCOPED_TRACE(std::to_string(ranks) + " ranks, grid " + std::to_string(grid[0]) + "x" + std::to_string(grid[1]) +
               "x" + std::to_string(grid[2]) + (by_x ? ", atoms by x" : ", atoms mixed"));
  const std::vector<Vec3> boxes = {{2.1, 1.9, 2.3}, {2.14, 1.93, 2.27}};
  const Charges c = random_charges(boxes[0], 400, by_x, 7);
  const std::vector<Result> got = over_ranks(c, boxes, grid, order, ranks, true);
  qk::md::Pme one(boxes[0], grid, order, 3.1, 1.0);
  for (size_t b = 0; b < boxes.size(); ++b) {
    one.set_box(boxes[b]);
    Result want;
    want.f.assign(c.x.size(), Vec3{0, 0, 0});
    want.energy = one.compute(c.x, c.q, &want.f, &want.virial);
    ASSERT_NE(want.energy, 0);
    EXPECT_NEAR(got[b].energy, want.energy, 1e-11 * std::abs(want.energy)) << "box " << b;
    double fmax = 0, vmax = 0;
    for (const Vec3& v : want.f) fmax = std::max({fmax, std::abs(v[0]), std::abs(v[1]), std::abs(v[2])});
    for (const Vec3& v : want.virial) vmax = std::max({vmax, std::abs(v[0]), std::abs(v[1]), std::abs(v[2])});
    for (size_t a = 0; a < c.x.size(); ++a)
      for (int d = 0; d < 3; ++d) ASSERT_NEAR(got[b].f[a][d], want.f[a][d], 1e-11 * fmax) << "atom " << a << " dim " << d;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_NEAR(got[b].virial[i][j], want.virial[i][j], 1e-11 * vmax) << i << j;
  }
}

TEST(PmeSlabFft, SplitsTheGridAsEvenlyAsItCan) {
  EXPECT_TRUE(qk::md::PmeSlabFft::fits({20, 18, 24}, 18));
  EXPECT_FALSE(qk::md::PmeSlabFft::fits({20, 18, 24}, 19));  // fewer y-lines than ranks
  EXPECT_FALSE(qk::md::PmeSlabFft::fits({4, 18, 24}, 5));
  const qk::md::PmeSlabFft fft({20, 18, 24}, 1, 3, [](int, const double*, int64_t, int, double*, int64_t) {});
  EXPECT_EQ(fft.x_begin(0), 0);
  EXPECT_EQ(fft.x_begin(1), 6);
  EXPECT_EQ(fft.x_begin(2), 13);
  EXPECT_EQ(fft.x_begin(3), 20);
  EXPECT_EQ(fft.ky_begin(1), 6);
  EXPECT_EQ(fft.ky_begin(3), 18);
  const qk::md::PairExchange none = [](int, const double*, int64_t, int, double*, int64_t) {};
  EXPECT_THROW(qk::md::PmeSlabFft({4, 18, 24}, 0, 5, none), qk::Error);
}

TEST(PmeSlabFft, RanksGiveOnePmesForcesEnergyAndVirial) {
  for (int ranks : {2, 3, 4})
    for (bool by_x : {true, false}) expect_ranks_equal_one_pme({20, 18, 24}, 4, ranks, by_x);
}

TEST(PmeSlabFft, OddGridsAndOrders) {
  expect_ranks_equal_one_pme({25, 21, 27}, 5, 3, true);  // odd nz: no Nyquist plane in k-space
  expect_ranks_equal_one_pme({16, 16, 16}, 4, 4, true);  // even slabs
  expect_ranks_equal_one_pme({7, 9, 8}, 6, 7, false);    // one plane per rank, order close to the grid
}

TEST(PmeSlabFft, MoreRanksThanPlanesReplicateTheTransform) {
  expect_ranks_equal_one_pme({6, 8, 8}, 4, 7, true);  // 6 x-planes for 7 ranks: the all-reduce instead
}

}  // namespace
