// Dynamics beyond step 0: energy conservation, SETTLE holding the water
// geometry, the V-rescale thermostat, steepest descent, and md.log's format.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "pbc.h"
#include "qk/base/thread_pool.h"
#include "qk/hpc/md/edr.h"
#include "qk/hpc/md/md.h"
#include "reference_energies.h"

namespace {

using qk::md::test::Fixture;

qk::md::MdpOptions with(const qk::md::MdpOptions& base, const std::string& extra) {
  qk::md::MdpOptions o = qk::md::parse_mdp(extra, "test.mdp");
  o.coulomb_type = base.coulomb_type;
  o.rcoulomb = base.rcoulomb;
  o.rvdw = base.rvdw;
  o.disp_corr = base.disp_corr;
  return o;
}

// 100 steps from 300 K with energies every 10 (11 frames): the run, its
// first and last frame printed under `what`.
qk::md::RunResult hundred_steps(const Fixture& fx, const std::string& dt_and_more, const char* what) {
  const qk::md::MdpOptions mdp = with(fx.mdp, dt_and_more + "nsteps = 100\nnstenergy = 10\ngen_vel = yes\n"
                                                            "gen_temp = 300\ngen_seed = 7\nconstraints = h-bonds\n");
  qk::md::RunResult r = qk::md::run(fx.top, mdp, fx.conf);
  if (r.frames.size() == 11u)
    std::printf("  %s: conserved %.4f -> %.4f kJ/mol, T %.1f -> %.1f K\n", what, r.frames.front().conserved,
                r.frames.back().conserved, r.frames.front().temperature, r.frames.back().temperature);
  return r;
}

}  // namespace

TEST(Md, LeapFrogWithSettleConservesEnergyOfPmeWater) {
  Fixture fx("water_pme");
  const qk::md::RunResult r = hundred_steps(fx, "dt = 0.002\n", "water PME 300 K, 100 steps of 2 fs");
  ASSERT_EQ(r.frames.size(), 11u);
  const qk::md::EnergyFrame &first = r.frames.front(), &last = r.frames.back();
  EXPECT_NEAR(first.temperature, 300, 15);  // generated at 300 K over 3057 degrees of freedom
  // Kinetic and potential energy trade hundreds of kJ/mol; their sum stays put once the random start
  // has settled. GROMACS (gmx_d, same mdp, its own random velocities) shows the same first steps:
  // -15917.9 at step 0, -15906.8 at 10, -15902.3 at 20, -15899.0 at 100 (ours: -15919.3, -15908.1,
  // -15904.5, -15899.3).
  const qk::md::EnergyFrame& settled = r.frames[2];
  EXPECT_LT(std::abs(last.conserved - settled.conserved), 0.002 * first.kinetic);
  EXPECT_LT(std::abs(last.conserved - first.conserved), 0.01 * first.kinetic);
  EXPECT_GT(std::abs(last.potential.potential() - first.potential.potential()), 100.0);
  // SETTLE holds every water at d(OH) = 0.1 and d(HH) = 0.1633 nm.
  const qk::md::RectBox box(fx.conf.box);
  double worst = 0;
  for (const qk::md::Settle& s : fx.top.settles) {
    const auto& a = r.final_conf.atoms;
    auto dist = [&](int i, int j) {
      qk::md::Vec3 d = box.delta(a[i].x, a[j].x);
      return std::sqrt(qk::md::dot(d, d));
    };
    worst = std::max({worst, std::abs(dist(s.ow, s.ow + 1) - s.doh), std::abs(dist(s.ow, s.ow + 2) - s.doh),
                      std::abs(dist(s.ow + 1, s.ow + 2) - s.dhh)});
  }
  EXPECT_LT(worst, 1e-9);
}

// LINCS on the O-H bonds of flexible water (the angle free): 100 steps of 1 fs from 300 K keep every bond
// at 0.1 nm (GROMACS's LINCS, order 4 and one iteration, leaves ~1e-6 nm) and the total energy (NVE) as
// GROMACS's own run of this mdp does.
TEST(Md, LincsHoldsHydrogenBondsAndConservesEnergy) {
  Fixture fx("water_hbonds");
  const qk::md::RunResult r =
      hundred_steps(fx, "dt = 0.001\ndefine = -DFLEXIBLE\n", "flexible water with LINCS, 100 steps of 1 fs");
  ASSERT_EQ(r.frames.size(), 11u);
  const qk::md::EnergyFrame &first = r.frames.front(), &last = r.frames.back();
  EXPECT_NEAR(first.temperature, 300, 15);
  // The flexible angle and the reaction-field cut-off let the total drift: gmx_d on the same mdp (its own
  // random velocities) goes -16390.1 -> -16375.3 kJ/mol from step 20 to 100 (14.8; ours ~14), 0.33% of the
  // kinetic energy.
  EXPECT_LT(std::abs(last.conserved - r.frames[2].conserved), 0.005 * first.kinetic);
  const qk::md::RectBox box(fx.conf.box);
  double worst = 0;
  for (const qk::md::HarmonicBond& b : fx.top.bonds) {
    const qk::md::Vec3 d = box.delta(r.final_conf.atoms[b.i].x, r.final_conf.atoms[b.j].x);
    worst = std::max(worst, std::abs(std::sqrt(qk::md::dot(d, d)) - b.b0));
  }
  std::printf("  largest O-H deviation from 0.1 nm: %.2e nm\n", worst);
  EXPECT_GT(fx.top.bonds.size(), 1000u);
  EXPECT_LT(worst, 1e-5);
}

TEST(Md, VRescaleBringsWaterToTheReferenceTemperature) {
  Fixture fx("water_rf");
  qk::md::MdpOptions mdp = with(fx.mdp, "dt = 0.002\nnsteps = 150\nnstenergy = 10\ntcoupl = V-rescale\n"
                                        "tc-grps = System\ntau_t = 0.02\nref_t = 250\ngen_vel = yes\ngen_temp = 350\n"
                                        "gen_seed = 3\n");
  qk::md::RunResult r = qk::md::run(fx.top, mdp, fx.conf);
  double mean = 0;
  int n = 0;
  for (const qk::md::EnergyFrame& e : r.frames)
    if (e.step >= 100) {
      mean += e.temperature;
      ++n;
    }
  mean /= n;
  std::printf("  V-rescale from 350 K to 250 K: T at step 0 %.1f K, mean over steps 100-150 %.1f K\n",
              r.frames.front().temperature, mean);
  EXPECT_NEAR(r.frames.front().temperature, 350, 20);
  EXPECT_NEAR(mean, 250, 20);
  // The thermostat's work is booked, so the conserved energy moves far less than the total.
  const double total_change = std::abs(r.frames.back().total - r.frames.front().total);
  const double conserved_change = std::abs(r.frames.back().conserved - r.frames.front().conserved);
  EXPECT_LT(conserved_change, 0.1 * total_change);
}

TEST(Md, SteepestDescentLowersTheEnergyOfArgon) {
  Fixture fx("argon");
  qk::md::GroFile conf = fx.conf;
  conf.atoms[10].x[0] += 0.05;  // a clash for the minimizer to remove
  qk::md::MdpOptions mdp = with(fx.mdp, "integrator = steep\nnsteps = 30\nemtol = 10\nemstep = 0.01\n");
  std::ostringstream log;
  qk::md::RunOptions opt;
  opt.log = &log;
  qk::md::RunResult r = qk::md::run(fx.top, mdp, conf, opt);
  ASSERT_GE(r.frames.size(), 2u);
  for (size_t i = 1; i < r.frames.size(); ++i)
    EXPECT_LT(r.frames[i].potential.potential(), r.frames[i - 1].potential.potential());
  EXPECT_LT(r.frames.back().fmax, r.frames.front().fmax);
  EXPECT_NE(log.str().find("Steepest Descents"), std::string::npos) << log.str();
}

// Long runs say how far they are and when they will finish (every progress_seconds; 0 here: each step).
TEST(Md, ProgressLinesSayTheStepAndTheFinish) {
  Fixture fx("water_rf");
  qk::md::MdpOptions mdp = fx.mdp;
  mdp.nsteps = 4;
  std::ostringstream progress;
  qk::md::RunOptions opt;
  opt.progress = &progress;
  opt.progress_seconds = 0;
  qk::md::run(fx.top, mdp, fx.conf, opt);
  const std::string s = progress.str();
  EXPECT_NE(s.find("step 1 (25%), will finish at "), std::string::npos) << s;
  EXPECT_NE(s.find("step 4 (100%), will finish at "), std::string::npos) << s;
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 4) << s;
}

TEST(Md, LogHasGromacsEnergyBlocksAndPerformance) {
  Fixture fx("water_pme");
  qk::md::MdpOptions mdp = fx.mdp;
  mdp.nsteps = 4;
  mdp.nstenergy = 2;
  std::ostringstream log;
  qk::md::RunOptions opt;
  opt.log = &log;
  qk::md::RunResult r = qk::md::run(fx.top, mdp, fx.conf, opt);
  ASSERT_EQ(r.frames.size(), 3u);  // steps 0, 2, 4
  const std::string s = log.str();
  EXPECT_NE(s.find("           Step           Time\n              2        0.00400\n"), std::string::npos) << s;
  EXPECT_NE(s.find("        LJ (SR)  Disper. corr.   Coulomb (SR)   Coul. recip.      Potential\n"),
            std::string::npos)
      << s;
  // No thermostat: no Conserved En., as in GROMACS's NVE blocks.
  EXPECT_NE(s.find("    Kinetic En.   Total Energy    Temperature Pres. DC (bar) Pressure (bar)\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find(" Pressure (bar)\n"), std::string::npos) << s;
  EXPECT_NE(s.find("Performance:"), std::string::npos) << s;
  EXPECT_GT(r.ns_per_day, 0);
  // The first block's potential, as md.log prints it (%15.5e).
  char expect[32];
  std::snprintf(expect, sizeof expect, "%15.5e", r.frames[0].potential.potential());
  EXPECT_NE(s.find(expect), std::string::npos) << s;
}

// mdrun's time accounting: every part of the step, how often it ran, and parts that add up to the run.
// Energies computed every nstcalcenergy steps between the written ones: each .edr frame carries GROMACS's
// sums over them (the sum equal to the values a run writing every such step reports) and md.log closes
// with their averages, as mdrun's "A V E R A G E S".
TEST(Md, EnergyFileSumsEveryComputedStepAndTheLogAveragesThem) {
  Fixture fx("water_pme");
  qk::md::MdpOptions mdp = fx.mdp;
  mdp.nsteps = 20;
  mdp.nstcalcenergy = 2;
  mdp.nstenergy = 10;
  const std::string dir = ::testing::TempDir();
  std::ostringstream log;
  qk::md::RunOptions opt;
  opt.log = &log;
  opt.energy_file = dir + "/qk_sums_" + std::to_string(::getpid()) + ".edr";
  opt.precision = qk::md::Precision::kDouble;
  qk::md::run(fx.top, mdp, fx.conf, opt);
  const qk::md::EdrFile f = qk::md::read_edr(opt.energy_file);
  ASSERT_EQ(f.frames.size(), 3u);  // steps 0, 10, 20
  EXPECT_EQ(f.frames[0].nsum, 0);  // step 0 alone: not stored
  ASSERT_EQ(f.frames[1].nsum, 5);  // steps 2, 4, 6, 8, 10
  ASSERT_EQ(f.frames[2].nsum, 5);
  // The same run writing every second step.
  mdp.nstenergy = 2;
  qk::md::RunOptions double_only;
  double_only.precision = qk::md::Precision::kDouble;
  const qk::md::RunResult every = qk::md::run(fx.top, mdp, fx.conf, double_only);
  ASSERT_EQ(every.frames.size(), 11u);
  size_t potential = 0;
  while (f.terms[potential].name != "Potential") ++potential;
  double want = 0;
  for (const qk::md::EnergyFrame& e : every.frames)
    if (e.step >= 12) want += e.potential.potential();
  EXPECT_NEAR(f.frames[2].esum[potential], want, 1e-9 * std::abs(want));
  const std::string s = log.str();
  EXPECT_NE(s.find("\t<====  A V E R A G E S  ====>\n"), std::string::npos) << s;
  EXPECT_NE(s.find("\tStatistics over 21 steps using 11 frames\n"), std::string::npos) << s;
  EXPECT_NE(s.find("   Total Virial (kJ/mol)\n"), std::string::npos) << s;
  EXPECT_LT(s.find("A V E R A G E S"), s.find("Performance:"));
  std::remove(opt.energy_file.c_str());
}

TEST(Md, TimeAccountingCoversTheRun) {
  Fixture fx("water_pme");
  qk::md::MdpOptions mdp = fx.mdp;
  mdp.nsteps = 20;
  mdp.nstenergy = 10;
  std::ostringstream log;
  qk::md::RunOptions opt;
  opt.log = &log;
  const qk::md::RunResult r = qk::md::run(fx.top, mdp, fx.conf, opt);
  const qk::md::ForceTimes& ft = r.force_times;
  // NVE from rest (the fixture's .gro has no velocities): grompp's 10% buffer, rebuilt every 10 steps, no
  // dynamic pruning; so steps 0, 10 and 20 build and none prunes.
  const qk::md::PairListSetup lists = qk::md::pair_list_setup(fx.top, mdp, fx.conf);
  ASSERT_FALSE(lists.exact);
  EXPECT_DOUBLE_EQ(lists.rlist_outer, 1.1);
  EXPECT_EQ(lists.nstlist_prune, 0);
  EXPECT_EQ(r.pair_list_builds, 3);
  EXPECT_EQ(r.pair_list_prunes, 0);
  for (double t : {ft.list_build, ft.nonbonded, ft.pme, r.update_seconds, r.constraint_seconds}) EXPECT_GT(t, 0);
  for (double t : {ft.list_prune, ft.other, r.output_seconds, r.rest_seconds}) EXPECT_GE(t, 0);
  // rest is the remainder of the run's wall time, so the charged parts must fit inside it: a part
  // charged twice (a lap that does not move the mark) would overflow it.
  const double charged = ft.list_build + ft.list_prune + ft.nonbonded + ft.pme + ft.other + r.update_seconds +
                         r.constraint_seconds + r.output_seconds;
  EXPECT_LE(charged, r.wall_seconds * (1 + 1e-9));
  EXPECT_NEAR(charged + r.rest_seconds, r.wall_seconds, 1e-6 + 1e-6 * r.wall_seconds);
  const std::string s = log.str();
  EXPECT_NE(s.find("     R E A L   C Y C L E   A N D   T I M E   A C C O U N T I N G\n"), std::string::npos) << s;
  // 21 force evaluations (steps 0..20), each part's row with the threads and the calls.
  char row[96];
  std::snprintf(row, sizeof row, " %-20s%8d%12d", "Nonbonded force", qk::num_threads(), 21);
  EXPECT_NE(s.find(row), std::string::npos) << s;
  std::snprintf(row, sizeof row, " %-20s%8d%12lld", "Pair list build", qk::num_threads(),
                static_cast<long long>(r.pair_list_builds));
  EXPECT_NE(s.find(row), std::string::npos) << s;
  for (const char* part : {" PME mesh ", " Update ", " Constraints ", " Write output ", " Rest ", " Total "})
    EXPECT_NE(s.find(part), std::string::npos) << part << "\n" << s;
  EXPECT_LT(s.find("A C C O U N T I N G"), s.find("Performance:"));
}

// GROMACS's steepest descent on the PME water (tests/fixtures/md/water_pme/steep_reference.txt): the same
// steps accepted and rejected, the same energies. This needs GROMACS's minimization rules: every mass 1,
// forces projected onto the SETTLE constraints before Fmax and the step, a step SETTLE cannot solve rejected.
TEST(Md, SteepestDescentTakesGromacssStepsOnSettleWater) {
  Fixture fx("water_pme");
  qk::md::MdpOptions mdp = qk::md::read_mdp(fx.dir + "/steep.mdp");
  std::vector<std::pair<int64_t, double>> gromacs;
  std::ifstream in(fx.dir + "/steep_reference.txt");
  int64_t step;
  double potential;
  while (in >> step >> potential) gromacs.emplace_back(step, potential);
  ASSERT_GT(gromacs.size(), 10u);
  qk::md::RunOptions opt;
  opt.precision = qk::md::Precision::kDouble;  // gmx_d's run: each accept or reject hangs on small differences
  qk::md::RunResult r = qk::md::run(fx.top, mdp, fx.conf, opt);
  ASSERT_EQ(r.frames.size(), gromacs.size());
  // GROMACS 2022.5 counts Disper. corr. twice in a minimization's Potential (gen_md.sh says more).
  const double disp_corr = fx.ref("Disper. corr.");
  double worst = 0;
  for (size_t k = 0; k < gromacs.size(); ++k) {
    EXPECT_EQ(r.frames[k].step, gromacs[k].first) << "accepted step " << k;
    const double ours = r.frames[k].potential.potential() + disp_corr;
    worst = std::max(worst, std::abs(ours - gromacs[k].second) / std::abs(gromacs[k].second));
  }
  std::printf("  steep: %zu accepted steps as GROMACS's, worst relative energy difference %.2e\n", gromacs.size(),
              worst);
  // 1e-9 at step 0 (the force fields' own difference, GROMACS's tabulated kernels) grows with the step
  // length to ~2e-6 by step 25 (0.04 kJ/mol); other minimization rules miss by 1e-2 from step 1 on.
  EXPECT_LT(worst, 1e-5);
}
