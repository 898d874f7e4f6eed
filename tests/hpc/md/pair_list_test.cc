// The cluster pair list (pair_list.h) and its kernel (nonbonded.h): no pair inside the cut-off is lost
// as atoms move and the list is pruned and rebuilt, the forces do not depend on the thread count beyond
// rounding, and mixed precision stays close to double; the excluded-pair corrections split over atom ranges.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "qk/base/thread_pool.h"
#include "qk/hpc/md/forces.h"
#include "nonbonded.h"
#include "pme.h"
#include "reference_energies.h"

namespace {

using qk::md::Vec3;
using qk::md::test::Fixture;

// LJ (SR) with the potential-shift modifier by brute force over all minimum-image pairs.
double brute_force_lj(const qk::md::Topology& top, const std::vector<Vec3>& x, const Vec3& box, double rc) {
  const double rc6 = std::pow(rc, -6), rc12 = rc6 * rc6;
  double e = 0;
  for (int i = 0; i < top.num_atoms(); ++i)
    for (int j = i + 1; j < top.num_atoms(); ++j) {
      if (std::binary_search(top.exclusions[i].begin(), top.exclusions[i].end(), j)) continue;
      double r2 = 0;
      for (int d = 0; d < 3; ++d) {
        double dd = x[i][d] - x[j][d];
        dd -= box[d] * std::nearbyint(dd / box[d]);
        r2 += dd * dd;
      }
      if (r2 >= rc * rc) continue;
      const double r6 = 1 / (r2 * r2 * r2);
      const int ti = top.type[i], tj = top.type[j];
      e += top.c12(ti, tj) * (r6 * r6 - rc12) - top.c6(ti, tj) * (r6 - rc6);
    }
  return e;
}

double max_abs(const std::vector<Vec3>& f) {
  double m = 0;
  for (const Vec3& v : f)
    for (double c : v) m = std::max(m, std::abs(c));
  return m;
}

double max_diff(const std::vector<Vec3>& a, const std::vector<Vec3>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (int d = 0; d < 3; ++d) m = std::max(m, std::abs(a[i][d] - b[i][d]));
  return m;
}

}  // namespace

// Random moves of every atom, some under the inner buffer (the pruned list is kept), some past it (pruned
// again) and past the outer one (rebuilt), some out of the box (images): LJ (SR) equals the brute-force
// sum each time. A list that dropped a pair, a stale prune or a wrong image would miss it.
TEST(PairList, PrunedAndRebuiltListsKeepEveryPairInsideTheCutoff) {
  Fixture fx("argon");
  qk::md::ForceCalculator ff(fx.top, fx.mdp, fx.conf.box, qk::md::Precision::kDouble);
  std::vector<Vec3> x = fx.x(), f;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> step(-1, 1);
  for (int it = 0; it < 30; ++it) {
    const double amplitude = it % 3 == 0 ? 0.05 : 0.01;  // nm per component
    for (Vec3& xi : x)
      for (double& c : xi) c += amplitude * step(rng);
    const double ours = ff.compute(x, &f).lj_sr;
    const double exact = brute_force_lj(fx.top, x, fx.conf.box, ff.cutoff());
    ASSERT_NEAR(ours, exact, 1e-10 * std::abs(exact)) << "after move " << it;
  }
  EXPECT_GT(ff.pair_list_builds(), 2);
  EXPECT_GT(ff.pair_list_prunes(), ff.pair_list_builds());
}

TEST(NonbondedKernel, ForcesDoNotDependOnTheThreadCountBeyondRounding) {
  Fixture fx("water_pme");
  const int threads = qk::num_threads();
  for (qk::md::Precision precision : {qk::md::Precision::kDouble, qk::md::Precision::kMixed}) {
    std::vector<Vec3> f1, f3;
    qk::set_num_threads(1);
    qk::md::ForceCalculator one(fx.top, fx.mdp, fx.conf.box, precision);
    const double e1 = one.compute(fx.x(), &f1).potential();
    qk::set_num_threads(3);
    qk::md::ForceCalculator three(fx.top, fx.mdp, fx.conf.box, precision);
    const double e3 = three.compute(fx.x(), &f3).potential();
    const double tol = precision == qk::md::Precision::kDouble ? 1e-12 : 1e-6;
    std::printf("  %s: 1 vs 3 threads, max force difference / max force %.2e\n",
                precision == qk::md::Precision::kDouble ? "double" : "mixed", max_diff(f1, f3) / max_abs(f1));
    EXPECT_LT(max_diff(f1, f3), tol * max_abs(f1));
    EXPECT_NEAR(e1, e3, tol * std::abs(e1));
  }
  qk::set_num_threads(threads);
}

// Float pair forces (float positions relative to the box, the Ewald correction as a polynomial) against
// double: GROMACS's mixed precision is good to ~1e-6 of the largest force.
TEST(NonbondedKernel, MixedPrecisionForcesMatchDouble) {
  for (const char* system : {"water_pme", "water_rf", "chains"}) {
    Fixture fx(system);
    std::vector<Vec3> fd, fm;
    qk::md::ForceCalculator dbl(fx.top, fx.mdp, fx.conf.box, qk::md::Precision::kDouble);
    qk::md::ForceCalculator mixed(fx.top, fx.mdp, fx.conf.box, qk::md::Precision::kMixed);
    dbl.compute(fx.x(), &fd);
    mixed.compute(fx.x(), &fm);
    const double rel = max_diff(fd, fm) / max_abs(fd);
    std::printf("  %s: mixed vs double forces, max difference / max force %.2e\n", system, rel);
    EXPECT_LT(rel, 1e-5) << system;
    EXPECT_GT(rel, 0.0) << system << ": the mixed path should really be float";
  }
}

// The excluded-pair corrections run over atom ranges in parallel: no exclusion may cross a range (each
// range writes only its own atoms), and the result is the serial pass's.
TEST(ExclusionCorrections, ChunksKeepMoleculesWholeAndEqualTheSerialPass) {
  for (const char* system : {"water_pme", "chains"}) {
    Fixture fx(system);
    const std::vector<int> chunks = qk::md::exclusion_chunks(fx.top, 16);
    ASSERT_GE(chunks.size(), 3u) << system << ": more than one range";
    EXPECT_EQ(chunks.front(), 0);
    EXPECT_EQ(chunks.back(), fx.top.num_atoms());
    for (size_t c = 0; c + 1 < chunks.size(); ++c)
      for (int i = chunks[c]; i < chunks[c + 1]; ++i)
        for (int j : fx.top.exclusions[i]) EXPECT_TRUE(j >= chunks[c] && j < chunks[c + 1]) << system << " " << i;
    qk::md::NonbondedParams p;
    p.rc = fx.mdp.rcoulomb;
    p.ewald = fx.mdp.coulomb_type == qk::md::CoulombType::kPme;
    p.beta = p.ewald ? qk::md::ewald_coefficient(p.rc, fx.mdp.ewald_rtol) : 0;
    p.epsilon_rf = fx.mdp.epsilon_rf;
    p.finish();
    const qk::md::RectBox box(fx.conf.box);
    std::vector<Vec3> serial(fx.top.num_atoms(), Vec3{0, 0, 0}), parallel = serial;
    const qk::md::NonbondedEnergies a = qk::md::coulomb_exclusions_and_self(fx.x(), box, fx.top, p, &serial);
    qk::set_num_threads(3);
    const qk::md::NonbondedEnergies b =
        qk::md::coulomb_exclusions_and_self(fx.x(), box, fx.top, p, &parallel, chunks);
    qk::set_num_threads(2);
    EXPECT_NEAR(a.coulomb, b.coulomb, 1e-9 * std::abs(a.coulomb)) << system;
    EXPECT_LT(max_diff(serial, parallel), 1e-12 * max_abs(serial)) << system;
  }
}
