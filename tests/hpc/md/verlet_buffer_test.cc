// The pair list's buffers and intervals from verlet-buffer-tolerance against
// what GROMACS 2022.5's mdrun chose for the same systems
// (tests/fixtures/gen_md.sh pairlists: <system>/pairlist_reference.txt),
// with a V-rescale thermostat (nstlist raised, dynamic pruning) and without
// one (NVE from gen-vel 300 K); and the cases that keep exact lists.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "qk/base/error.h"
#include "qk/hpc/md/forces.h"
#include "qk/hpc/md/gro.h"
#include "qk/hpc/md/md.h"
#include "qk/hpc/md/mdp.h"
#include "qk/hpc/md/topology.h"
#include "verlet_buffer.h"

namespace {

const std::string kFixtures = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/";

struct Expected {
  int nstlist = 0, prune = 0;
  double rlist = 0, inner = 0;
};

Expected reference(const std::string& system, const std::string& kind) {
  std::ifstream in(kFixtures + system + "/pairlist_reference.txt");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string k, w1, w2, w3, w4;
    Expected e;
    s >> k >> w1 >> e.nstlist >> w2 >> e.rlist >> w3 >> e.prune >> w4 >> e.inner;
    if (k == kind) return e;
  }
  ADD_FAILURE() << "no " << kind << " line in " << system << "/pairlist_reference.txt";
  return {};
}

qk::md::MdpOptions mdp_for(const std::string& system, bool thermostat) {
  qk::md::MdpOptions mdp = qk::md::read_mdp(kFixtures + system + "/run.mdp");
  if (thermostat) {
    mdp.tcoupl = qk::md::Thermostat::kVRescale;
    mdp.ref_t = {300};
    mdp.gen_vel = false;
  } else {
    mdp.tcoupl = qk::md::Thermostat::kNo;
    mdp.gen_vel = true;
    mdp.gen_temp = 300;
  }
  return mdp;
}

TEST(VerletBuffer, ListSetupsEqualGromacsForWaterAndArgon) {  // TIP4P: its M site moves with an effective mass
  for (const std::string system : {"water_pme", "water_rf", "water_hbonds", "water_tip4p", "argon"}) {
    qk::md::TopOptions opts;
    opts.defines = qk::md::read_mdp(kFixtures + system + "/run.mdp").defines;
    const qk::md::Topology top = qk::md::read_top(kFixtures + system + "/topol.top", opts);
    const qk::md::GroFile conf = qk::md::read_gro(kFixtures + system + "/conf.gro");
    for (const bool nvt : {true, false}) {
      SCOPED_TRACE(system + (nvt ? " with V-rescale" : " NVE"));
      const Expected want = reference(system, nvt ? "nvt" : "nve");
      const qk::md::PairListSetup got = qk::md::pair_list_setup(top, mdp_for(system, nvt), conf);
      EXPECT_FALSE(got.exact);
      EXPECT_EQ(got.nstlist, want.nstlist);
      EXPECT_EQ(got.nstlist_prune, want.prune);
      // GROMACS computes in float: one 0.001 nm step of its bisection either way.
      EXPECT_NEAR(got.rlist_outer, want.rlist, 1.5e-3);
      EXPECT_NEAR(got.rlist_inner, want.inner, 1.5e-3);
      EXPECT_DOUBLE_EQ(got.temperature, 300);
    }
  }
}

TEST(VerletBuffer, TheBufferGrowsWithTheListLifetimeAndShrinksWithTheTolerance) {
  const qk::md::Topology top = qk::md::read_top(kFixtures + "water_pme/topol.top");
  qk::md::MdpOptions mdp = mdp_for("water_pme", true);
  const double volume = 2.5 * 2.5 * 2.5;
  const double r10 = qk::md::verlet_buffer_rlist(top, {}, mdp, volume, 300, 10, 9);
  const double r40 = qk::md::verlet_buffer_rlist(top, {}, mdp, volume, 300, 40, 39);
  EXPECT_GT(r40, r10);
  mdp.verlet_buffer_tolerance = 0.0005;
  EXPECT_GT(qk::md::verlet_buffer_rlist(top, {}, mdp, volume, 300, 40, 39), r40);
  // An atom list (1x1 clusters) needs more buffer than GROMACS's 4x4 cluster list.
  mdp.verlet_buffer_tolerance = 0.005;
  EXPECT_GT(qk::md::verlet_buffer_rlist(top, {}, mdp, volume, 300, 40, 39, {1, 1}), r40);
  // Nothing moves at 0 K.
  EXPECT_DOUBLE_EQ(qk::md::verlet_buffer_rlist(top, {}, mdp, volume, 0, 40, 39), 1.0);
}

TEST(VerletBuffer, MinimizationToleranceMinusOneAndSmallBoxesKeepExactLists) {
  const qk::md::Topology top = qk::md::read_top(kFixtures + "water_pme/topol.top");
  const qk::md::GroFile conf = qk::md::read_gro(kFixtures + "water_pme/conf.gro");
  qk::md::MdpOptions mdp = mdp_for("water_pme", true);
  mdp.verlet_buffer_tolerance = -1;
  EXPECT_TRUE(qk::md::pair_list_setup(top, mdp, conf).exact);
  mdp.verlet_buffer_tolerance = 0.005;
  mdp.integrator = qk::md::Integrator::kSteep;
  EXPECT_TRUE(qk::md::pair_list_setup(top, mdp, conf).exact);
  // A list kept 100 steps at a tolerance so tight that it would not fit in half of the 2.5 nm box.
  mdp.integrator = qk::md::Integrator::kMd;
  mdp.verlet_buffer_tolerance = 1e-12;
  mdp.nstlist = 100;
  const qk::md::PairListSetup tight = qk::md::pair_list_setup(top, mdp, conf);
  EXPECT_TRUE(tight.exact);
  EXPECT_NE(tight.note.find("half the box"), std::string::npos) << tight.note;
  // NVE from rest: GROMACS's 10% buffer.
  mdp.verlet_buffer_tolerance = 0.005;
  mdp.nstlist = 10;
  mdp.tcoupl = qk::md::Thermostat::kNo;
  mdp.gen_vel = false;
  qk::md::GroFile still = conf;
  still.has_velocities = false;
  const qk::md::PairListSetup cold = qk::md::pair_list_setup(top, mdp, still);
  EXPECT_FALSE(cold.exact);
  EXPECT_NEAR(cold.rlist_outer, 1.1, 1e-12);
  EXPECT_EQ(cold.nstlist, 10);
}

TEST(VerletBuffer, MdpKeysAreReadAndCheckedAtTheEdge) {
  const qk::md::MdpOptions o =
      qk::md::parse_mdp("nstlist = 25\nverlet-buffer-tolerance = 0.001\n", "t.mdp");
  EXPECT_EQ(o.nstlist, 25);
  EXPECT_DOUBLE_EQ(o.verlet_buffer_tolerance, 0.001);
  EXPECT_DOUBLE_EQ(qk::md::parse_mdp("verlet-buffer-tolerance = -1\n", "t.mdp").verlet_buffer_tolerance, -1);
  EXPECT_THROW(qk::md::parse_mdp("verlet-buffer-tolerance = 0\n", "t.mdp"), qk::Error);
  EXPECT_THROW(qk::md::parse_mdp("nstlist = 0\n", "t.mdp"), qk::Error);
}

}  // namespace

namespace {

// GROMACS's schedule in ForceCalculator: a build at the first call and at multiples of nstlist, a prune
// every nstlist_prune steps between; at a build the energies equal an exact list's.
TEST(VerletBuffer, ForcesFollowTheListScheduleAndEqualExactListsAtABuild) {
  const qk::md::Topology top = qk::md::read_top(kFixtures + "water_pme/topol.top");
  const qk::md::GroFile conf = qk::md::read_gro(kFixtures + "water_pme/conf.gro");
  const qk::md::MdpOptions mdp = qk::md::read_mdp(kFixtures + "water_pme/run.mdp");
  std::vector<qk::md::Vec3> x(conf.atoms.size()), f;
  for (size_t i = 0; i < x.size(); ++i) x[i] = conf.atoms[i].x;
  qk::md::PairListSetup lists;
  lists.exact = false;
  lists.nstlist = 10;
  lists.rlist_outer = 1.1;
  lists.nstlist_prune = 3;
  lists.rlist_inner = 1.02;
  qk::md::ForceCalculator scheduled(top, mdp, conf.box, qk::md::Precision::kDouble, lists);
  qk::md::ForceCalculator exact(top, mdp, conf.box, qk::md::Precision::kDouble);
  const double want = exact.compute(x, &f).potential();
  // Starting at step 5, as a resumed run: builds at 5, 10 and 20; prunes at each build and at 6, 9, 13,
  // 16, 19 and 23.
  for (int64_t step = 5; step <= 25; ++step) {
    const double got = scheduled.compute(x, &f, true, step).potential();
    if (step == 5) {
      EXPECT_NEAR(got, want, 1e-10 * std::abs(want));
    }
  }
  EXPECT_EQ(scheduled.pair_list_builds(), 3);
  EXPECT_EQ(scheduled.pair_list_prunes(), 9);
  EXPECT_DOUBLE_EQ(scheduled.rlist(), 1.1);
  EXPECT_DOUBLE_EQ(scheduled.rlist_inner(), 1.02);
  // A setup that does not fit the box is refused.
  lists.rlist_outer = 1.3;  // half the 2.5 nm box is 1.25
  EXPECT_THROW(qk::md::ForceCalculator(top, mdp, conf.box, qk::md::Precision::kDouble, lists), qk::Error);
}

}  // namespace
