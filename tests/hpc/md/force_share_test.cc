// Forces shared out over ranks (ForceShare): ranks played by threads, each
// with its own ForceCalculator and an in-process all-reduce, give the forces
// and every energy term of one calculator alone, on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "qk/base/error.h"
#include "qk/hpc/md/forces.h"
#include "reference_energies.h"
#include "thread_comm.h"

namespace {

using qk::md::PotentialTerms;
using qk::md::Vec3;

// Each fixture's forces and terms at its start, two steps' worth of calls (the list built, then reused),
// alone and shared over `ranks` (with `exchange`, as processes share: PME's FFT split over the ranks).
void expect_shared_equals_alone(const std::string& system, int ranks, bool exchange = false) {
  SCOPED_TRACE(system + " over " + std::to_string(ranks) + " ranks" + (exchange ? " with PME in slabs" : ""));
  const qk::md::test::Fixture fx(system);
  std::vector<Vec3> x = fx.x();
  qk::md::ForceCalculator alone(fx.top, fx.mdp, fx.conf.box, qk::md::Precision::kDouble);
  std::vector<Vec3> f_alone;
  PotentialTerms e_alone;
  for (int call = 0; call < 2; ++call) e_alone = alone.compute(x, &f_alone, true, call);
  qk::md::test::ThreadComm comm(ranks);
  std::vector<std::vector<Vec3>> f(ranks);
  std::vector<PotentialTerms> e(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      qk::md::ForceCalculator ff(fx.top, fx.mdp, fx.conf.box, qk::md::Precision::kDouble);
      qk::md::ForceShare share = comm.share(r);
      if (!exchange) share.exchange = {};  // the all-reduce alone: PME's whole grid summed
      ff.set_share(share);
      for (int call = 0; call < 2; ++call) e[r] = ff.compute(x, &f[r], true, call);
    });
  for (std::thread& t : threads) t.join();
  const std::vector<double> want = qk::md::test::terms_of(e_alone);
  double fmax = 0;
  for (const Vec3& v : f_alone) fmax = std::max({fmax, std::abs(v[0]), std::abs(v[1]), std::abs(v[2])});
  for (int r = 0; r < ranks; ++r) {
    const std::vector<double> got = qk::md::test::terms_of(e[r]);
    for (size_t k = 0; k < want.size(); ++k)
      EXPECT_NEAR(got[k], want[k], 1e-9 * std::abs(want[k]) + 1e-9) << "rank " << r << " term " << k;
    ASSERT_EQ(f[r].size(), f_alone.size());
    for (size_t i = 0; i < f_alone.size(); ++i)
      for (int d = 0; d < 3; ++d)
        ASSERT_NEAR(f[r][i][d], f_alone[i][d], 1e-10 * fmax) << "rank " << r << " atom " << i << " dim " << d;
    // Every rank holds the same totals, bit for bit (they integrate alike).
    EXPECT_EQ(f[r], f[0]) << "rank " << r;
  }
}

TEST(ForceShare, RanksSumToTheForcesAndTermsOfOneCalculator) {
  expect_shared_equals_alone("water_pme", 2);      // PME: the grid summed over the ranks
  expect_shared_equals_alone("water_pme", 3, true);  // PME: the FFT in slabs over the ranks
  expect_shared_equals_alone("water_rf", 3);       // reaction field
  expect_shared_equals_alone("peptide_water", 2);  // bonded terms, 1-4 pairs, the dispersion correction
}

TEST(ForceShare, AShareNeedsItsSumAndAValidRank) {
  const qk::md::test::Fixture fx("water_rf");
  qk::md::ForceCalculator ff(fx.top, fx.mdp, fx.conf.box);
  EXPECT_THROW(ff.set_share({.rank = 2, .size = 2, .allreduce_sum = [](double*, int64_t) {}}), qk::Error);
  EXPECT_THROW(ff.set_share({.rank = 0, .size = 2}), qk::Error);
  EXPECT_NO_THROW(ff.set_share({.rank = 0, .size = 1}));
}

}  // namespace
