// Domain decomposition (domain_decomposition.h): ranks played by threads,
// each holding only its domain's atoms and a halo from its neighbour, give
// the forces and every energy term of one calculator holding them all.
#include "domain_decomposition.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <fstream>
#include <regex>
#include <thread>
#include <vector>

#include "../../common/scratch_dir.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/hpc/md/forces.h"
#include "qk/hpc/md/md.h"
#include "reference_energies.h"
#include "thread_comm.h"

namespace {

using qk::md::test::ThreadComm;
using qk::md::PotentialTerms;
using qk::md::Vec3;

const qk::test::ScratchRoot kScratch("md_domains");

// A fixture repeated `copies` times along `axis`: its molecules that many times over, the box that much longer.
struct Tiled {
  qk::md::Topology top;
  qk::md::GroFile conf;
  qk::md::MdpOptions mdp;
  // define: a -D the topology is read with (POSRES: the peptide's position restraints).
  Tiled(const std::string& system, int copies, const std::string& define = "", int axis = 0)
      : Tiled(system, axis == 0 ? std::array<int, 3>{copies, 1, 1}
                      : axis == 1 ? std::array<int, 3>{1, copies, 1}
                                  : std::array<int, 3>{1, 1, copies},
              define) {}
  // Repeated copies[d] times along each axis d.
  Tiled(const std::string& system, const std::array<int, 3>& copies_along, const std::string& define = "") {
    const qk::md::test::Fixture fx(system);
    const int copies = copies_along[0] * copies_along[1] * copies_along[2];
    const std::string text = qk::read_file(fx.dir + "/topol.top");
    const size_t at = text.find("[ molecules ]");
    const std::string molecules = text.substr(text.find('\n', at) + 1);
    std::string tiled = text;
    for (int c = 1; c < copies; ++c) tiled += molecules;
    const std::string path = kScratch.fresh(system + "_" + std::to_string(copies_along[0]) + std::to_string(copies_along[1]) +
                                            std::to_string(copies_along[2])) + "/topol.top";
    std::ofstream(path) << tiled;
    mdp = fx.mdp;
    if (!define.empty()) mdp.defines.push_back(define);
    top = qk::md::read_top(path, qk::md::TopOptions{mdp.defines, {fx.dir}});
    conf = fx.conf;
    conf.atoms.clear();
    // Each molecule whole first (the fixtures' are split by the box's faces, which the longer box moves).
    std::vector<qk::md::GroAtom> whole = fx.conf.atoms;
    const qk::md::RectBox box(fx.conf.box);
    int first = 0;
    for (const auto& block : fx.top.molecules)
      for (int m = 0; m < block.count; ++m, first += block.atoms_per_molecule)
        for (int a = first + 1; a < first + block.atoms_per_molecule; ++a) {
          const Vec3 d = box.delta(whole[a].x, whole[first].x);
          for (int k = 0; k < 3; ++k) whole[a].x[k] = whole[first].x[k] + d[k];
        }
    for (int c = 0; c < copies; ++c)
      for (qk::md::GroAtom a : whole) {
        const int along[3] = {c % copies_along[0], c / copies_along[0] % copies_along[1],
                              c / (copies_along[0] * copies_along[1])};
        for (int d = 0; d < 3; ++d) a.x[d] += along[d] * fx.conf.box[d];
        conf.atoms.push_back(a);
      }
    for (int d = 0; d < 3; ++d) conf.box[d] *= copies_along[d];
  }
  std::vector<Vec3> x() const {
    std::vector<Vec3> out;
    for (const qk::md::GroAtom& a : conf.atoms) out.push_back(a.x);
    return out;
  }
};

// Fixed-interval lists with a 0.1 nm buffer (domains need them), pruned every other step to 0.05.
qk::md::PairListSetup lists_for(double rc) {
  qk::md::PairListSetup l;
  l.exact = false;
  l.nstlist = 10;
  l.rlist_outer = rc + 0.1;
  l.rlist_inner = rc + 0.05;
  l.nstlist_prune = 2;
  return l;
}

// Forces and terms over `ranks` domains against one calculator: at the partition (the list built), two
// steps on (pruned, the halo's positions moved), one of them without energies.
void expect_domains_equal_alone(const Tiled& sys, int ranks) {
  SCOPED_TRACE(std::to_string(ranks) + " domains");
  const qk::md::PairListSetup lists = lists_for(sys.mdp.rcoulomb);
  std::vector<std::vector<Vec3>> xs = {sys.x()};
  for (int s = 1; s < 3; ++s) {  // every atom moved a little, differently
    xs.push_back(xs.back());
    for (size_t i = 0; i < xs[s].size(); ++i)
      for (int d = 0; d < 3; ++d) xs[s][i][d] += 0.002 * std::sin(1.0 + i * 0.7 + d * 1.3 + s);
  }
  qk::md::ForceCalculator alone(sys.top, sys.mdp, sys.conf.box, qk::md::Precision::kDouble, lists);
  std::vector<std::vector<Vec3>> f_alone(3);
  std::vector<PotentialTerms> e_alone(3);
  for (int s = 0; s < 3; ++s) e_alone[s] = alone.compute(xs[s], &f_alone[s], s != 1, s);
  ThreadComm comm(ranks);
  std::vector<std::vector<std::vector<Vec3>>> f(3, std::vector<std::vector<Vec3>>(ranks));
  std::vector<std::vector<PotentialTerms>> e(3, std::vector<PotentialTerms>(ranks));
  std::vector<size_t> home(ranks), halo(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        const qk::md::ForceShare share = comm.share(r);
        qk::md::DomainDecomposition dd(sys.top, share);
        EXPECT_EQ(dd.partition(xs[0], sys.conf.box, lists.rlist_outer), "") << "rank " << r;
        home[r] = dd.home().size();
        halo[r] = dd.halo().size();
        qk::md::ForceCalculator ff(sys.top, sys.mdp, sys.conf.box, qk::md::Precision::kDouble, lists);
        ff.set_share(share);
        ff.set_domains(&dd);
        std::vector<Vec3> x = dd.home_positions(), f_home;
        for (int s = 0; s < 3; ++s) {
          if (s > 0)  // the same displacement as the global positions
            for (size_t k = 0; k < x.size(); ++k)
              for (int d = 0; d < 3; ++d) x[k][d] += xs[s][dd.home()[k]][d] - xs[s - 1][dd.home()[k]][d];
          e[s][r] = ff.compute(x, &f_home, s != 1, s);
          dd.gather(f_home, &f[s][r]);
        }
      } catch (const std::exception& ex) {
        ADD_FAILURE() << "rank " << r << ": " << ex.what();
        std::abort();
      }
    });
  for (std::thread& t : threads) t.join();
  size_t total = 0;
  for (int r = 0; r < ranks; ++r) {
    total += home[r];
    EXPECT_GT(halo[r], 0u) << "rank " << r;
    EXPECT_LT(halo[r], sys.top.num_atoms() - home[r]) << "rank " << r << ": the halo is every other atom";
  }
  EXPECT_EQ(total, static_cast<size_t>(sys.top.num_atoms()));
  for (int s = 0; s < 3; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const double fmax = qk::md::test::max_norm(f_alone[s]);
    const std::vector<double> want = qk::md::test::terms_of(e_alone[s]);
    for (int r = 0; r < ranks; ++r) {
      if (s != 1) {
        const std::vector<double> got = qk::md::test::terms_of(e[s][r]);
        for (size_t k = 0; k < want.size(); ++k)
          EXPECT_NEAR(got[k], want[k], 1e-9 * std::abs(want[k]) + 1e-9) << "rank " << r << " term " << k;
      }
      ASSERT_EQ(f[s][r].size(), f_alone[s].size());
      for (size_t i = 0; i < f_alone[s].size(); ++i)
        for (int d = 0; d < 3; ++d)
          ASSERT_NEAR(f[s][r][i][d], f_alone[s][i][d], 1e-10 * fmax) << "rank " << r << " atom " << i << " dim " << d;
    }
  }
}

TEST(DomainDecomposition, DomainsGiveTheForcesAndTermsOfOneCalculator) {
  const Tiled water(std::string("water_pme"), 2);  // 5 x 2.5 x 2.5 nm, PME: the grid summed over the ranks
  expect_domains_equal_alone(water, 2);
  const Tiled rf("water_rf", 3);  // reaction field, 7.5 nm: three domains, each with two neighbours
  expect_domains_equal_alone(rf, 3);
  const Tiled argon("argon", 2);  // single atoms, LJ only
  expect_domains_equal_alone(argon, 2);
}

TEST(DomainDecomposition, SlabsCutTheLongestAxis) {
  const Tiled along_z("water_pme", 2, "", 2);  // 2.5 x 2.5 x 5 nm: slabs along z, the list open there
  EXPECT_EQ(qk::md::DomainDecomposition::grid_for(along_z.top, along_z.x(), along_z.conf.box, 1.1, 2).axes[0], 2);
  expect_domains_equal_alone(along_z, 2);
  const Tiled along_y("water_rf", 3, "", 1);
  EXPECT_EQ(qk::md::DomainDecomposition::grid_for(along_y.top, along_y.x(), along_y.conf.box, 1.1, 3).axes[0], 1);
  expect_domains_equal_alone(along_y, 3);
}

// Where slabs would be too thin, a grid across the two longest axes: halos from the next cell along each and
// the two diagonal ones ahead (the half shell), the list open along both.
TEST(DomainDecomposition, GridsCutTwoAxesWhereSlabsWouldBeTooThin) {
  const Tiled square("water_pme", {2, 2, 1});  // 5 x 5 x 2.5 nm: 4 slabs would be 1.25 nm, a 2 x 2 grid 2.5
  const qk::md::DomainGrid g = qk::md::DomainDecomposition::grid_for(square.top, square.x(), square.conf.box, 1.1, 4);
  EXPECT_EQ(g.cells[0], 2);
  EXPECT_EQ(g.cells[1], 2);
  expect_domains_equal_alone(square, 4);
  const Tiled oblong("water_rf", {3, 2, 1});  // 7.5 x 5 x 2.5 nm over 6: 3 cells along x, 2 along y
  const qk::md::DomainGrid g6 = qk::md::DomainDecomposition::grid_for(oblong.top, oblong.x(), oblong.conf.box, 1.1, 6);
  EXPECT_EQ(g6.cells[0], 3);
  EXPECT_EQ(g6.cells[1], 2);
  EXPECT_EQ(g6.axes[0], 0);
  EXPECT_EQ(g6.axes[1], 1);
  expect_domains_equal_alone(oblong, 6);
  // 7 ranks: a prime makes slabs only, 0.71 nm wide: nothing fits.
  EXPECT_EQ(qk::md::DomainDecomposition::grid_for(square.top, square.x(), square.conf.box, 1.1, 7).cells[0], 0);
}

TEST(DomainDecomposition, BondedTermsAndExclusionsOfASolvatedPeptideStayWithItsDomain) {
  const Tiled peptide("peptide_water", 3);  // 9 nm: the peptide's reach needs wide slabs
  expect_domains_equal_alone(peptide, 2);
}

TEST(DomainDecomposition, SaysWhenTheSlabsAreTooThin) {
  const Tiled water("water_pme", 1);  // 2.5 nm: 1.25 nm slabs under 1.1 nm and two molecules' reach
  const std::string why =
      qk::md::DomainDecomposition::why_not(water.top, water.x(), water.conf.box, 1.1, 2);
  EXPECT_TRUE(std::regex_search(why, std::regex("2 slabs of a 2.500 nm box are 1.250 nm wide.*at most 1 ranks")))
      << why;
  const Tiled two("water_pme", 2);
  EXPECT_EQ(qk::md::DomainDecomposition::why_not(two.top, two.x(), two.conf.box, 1.1, 2), "");
  EXPECT_NE(qk::md::DomainDecomposition::why_not(two.top, two.x(), two.conf.box, 1.1, 5), "");
  // A calculator's domains need fixed-interval lists.
  ThreadComm comm(2);
  qk::md::DomainDecomposition dd(two.top, comm.share(0));
  qk::md::ForceCalculator exact(two.top, two.mdp, two.conf.box);
  exact.set_share(comm.share(0));
  EXPECT_THROW(exact.set_domains(&dd), qk::Error);
}

// An MD run: 30 steps of V-rescale NVT from generated velocities, energies every 10.
qk::md::MdpOptions md_mdp(qk::md::MdpOptions mdp) {
  mdp.nsteps = 30;
  mdp.nstenergy = 10;
  mdp.nstcalcenergy = 10;
  mdp.tcoupl = qk::md::Thermostat::kVRescale;
  mdp.ref_t = {300};
  mdp.gen_vel = true;
  mdp.gen_temp = 300;
  mdp.verlet_buffer_tolerance = 1e-9;
  return mdp;
}

// C-rescale every 5 steps toward ref_p (bar) with time constant tau_p (ps), its draws seeded.
void couple_pressure(qk::md::MdpOptions* mdp, double tau_p, double ref_p, int64_t ld_seed) {
  mdp->pcoupl = qk::md::Barostat::kCRescale;
  mdp->nstpcouple = 5;
  mdp->tau_p = tau_p;
  mdp->ref_p = ref_p;
  mdp->ref_p_given = true;
  mdp->compressibility = 4.5e-5;
  mdp->ld_seed = ld_seed;
}

// md::run over `ranks` thread-ranks, in double precision (domains or, with kForces, the forces shared out).
std::vector<qk::md::RunResult> run_on_thread_ranks(const Tiled& sys, const qk::md::MdpOptions& mdp, int ranks,
                                                   qk::md::RunOptions::Decomposition how) {
  ThreadComm comm(ranks);
  std::vector<qk::md::RunResult> got(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        qk::md::RunOptions opt;
        opt.precision = qk::md::Precision::kDouble;
        opt.share = comm.share(r);
        opt.decomposition = how;
        got[r] = qk::md::run(sys.top, mdp, sys.conf, opt);
      } catch (const std::exception& ex) {
        ADD_FAILURE() << "rank " << r << ": " << ex.what();
        std::abort();
      }
    });
  for (std::thread& t : threads) t.join();
  return got;
}

// md::run over `ranks` thread-ranks (domains or, with kForces, the forces shared out) against one rank.
void expect_run_over_ranks_equals_alone(const Tiled& sys, int ranks, qk::md::RunOptions::Decomposition how,
                                        const std::string& expect_decomposition, bool barostat = false) {
  SCOPED_TRACE(std::to_string(ranks) + " ranks" + (barostat ? ", C-rescale" : ""));
  qk::md::MdpOptions mdp = md_mdp(sys.mdp);
  if (barostat) couple_pressure(&mdp, 0.2, 1000, 3);  // the box scaled hard, between partitions too
  mdp.gen_seed = 11;  // the same velocities as the lone run
  qk::md::RunOptions alone_opt;
  alone_opt.precision = qk::md::Precision::kDouble;
  const qk::md::RunResult alone = qk::md::run(sys.top, mdp, sys.conf, alone_opt);
  const std::vector<qk::md::RunResult> got = run_on_thread_ranks(sys, mdp, ranks, how);
  ASSERT_EQ(alone.frames.size(), 4u);
  for (int r = 0; r < ranks; ++r) {
    EXPECT_NE(got[r].decomposition.find(expect_decomposition), std::string::npos) << got[r].decomposition;
    ASSERT_EQ(got[r].frames.size(), alone.frames.size());
    for (size_t k = 0; k < alone.frames.size(); ++k) {
      const qk::md::EnergyFrame &a = alone.frames[k], &b = got[r].frames[k];
      const double tol = 1e-8 * std::abs(a.potential.potential());
      EXPECT_NEAR(b.potential.potential(), a.potential.potential(), tol) << "rank " << r << " step " << a.step;
      EXPECT_NEAR(b.kinetic, a.kinetic, tol) << "rank " << r << " step " << a.step;
      EXPECT_NEAR(b.pressure, a.pressure, 1e-6 * std::abs(a.pressure) + 1e-6) << "rank " << r << " step " << a.step;
      EXPECT_EQ(b.group_lambda, got[0].frames[k].group_lambda) << "rank " << r << ": the thermostat differs";
      if (a.constr_rmsd) {
        ASSERT_TRUE(b.constr_rmsd.has_value());
        EXPECT_NEAR(*b.constr_rmsd, *a.constr_rmsd, 1e-6 * *a.constr_rmsd + 1e-12) << "rank " << r;
      }
    }
    // The final structure holds every atom, gathered, on every rank.
    ASSERT_EQ(got[r].final_conf.atoms.size(), alone.final_conf.atoms.size());
    EXPECT_EQ(got[r].final_conf.box, got[0].final_conf.box) << "rank " << r;
    for (int d = 0; d < 3; ++d) EXPECT_NEAR(got[r].final_conf.box[d], alone.final_conf.box[d], 1e-10) << "dim " << d;
    if (barostat) {
      EXPECT_NE(alone.final_conf.box, sys.conf.box) << "the box did not change";
    }
    const qk::md::RectBox box(alone.final_conf.box);
    double worst = 0;
    for (size_t i = 0; i < alone.final_conf.atoms.size(); ++i) {
      const Vec3 d = box.delta(got[r].final_conf.atoms[i].x, alone.final_conf.atoms[i].x);
      worst = std::max({worst, std::abs(d[0]), std::abs(d[1]), std::abs(d[2])});
      EXPECT_EQ(got[r].final_conf.atoms[i].x, got[0].final_conf.atoms[i].x) << "rank " << r << " atom " << i;
    }
    EXPECT_LT(worst, 1e-8) << "rank " << r;
  }
}

TEST(DomainDecomposition, AnMdRunOverDomainsFollowsTheOneRankRun) {
  const Tiled water("water_pme", 2);  // SETTLE water, PME
  expect_run_over_ranks_equals_alone(water, 2, qk::md::RunOptions::Decomposition::kAuto, "domain decomposition: 2 slabs");
  expect_run_over_ranks_equals_alone(water, 2, qk::md::RunOptions::Decomposition::kDomains, "domain decomposition",
                                     /*barostat=*/true);
  const Tiled peptide("peptide_water", 3, "POSRES");  // LINCS h-bonds, bonded terms, ions, position restraints
  ASSERT_EQ(peptide.top.posres.size(), 75u);
  expect_run_over_ranks_equals_alone(peptide, 2, qk::md::RunOptions::Decomposition::kDomains, "domain decomposition");
  const Tiled tip4p("water_tip4p", 2);  // a virtual site per water
  expect_run_over_ranks_equals_alone(tip4p, 2, qk::md::RunOptions::Decomposition::kDomains, "domain decomposition");
  const Tiled square("water_pme", {2, 2, 1});  // a 2 x 2 grid
  expect_run_over_ranks_equals_alone(square, 4, qk::md::RunOptions::Decomposition::kDomains,
                                     "domain decomposition: a 2 x 2 grid across x and y, cells of 2.500 x 2.500 nm");
}

// A box squeezed under a pressure far above the water's until its slabs are too thin for the list: the run
// goes on with the forces shared out, and ends where the one-rank run does.
TEST(DomainDecomposition, SlabsSqueezedTooThinMidRunHandOverToForceDecomposition) {
  Tiled water("water_pme", 4);  // 10 x 2.5 x 2.5 nm, PME
  water.mdp.rcoulomb = water.mdp.rvdw = 0.8;
  const int ranks = 8;  // 1.25 nm slabs
  qk::md::MdpOptions mdp = md_mdp(water.mdp);
  mdp.nsteps = 80;
  couple_pressure(&mdp, 0.1, 40000, 3);
  mdp.gen_seed = 11;
  qk::md::RunOptions alone_opt;
  alone_opt.precision = qk::md::Precision::kDouble;
  const qk::md::RunResult alone = qk::md::run(water.top, mdp, water.conf, alone_opt);
  const std::vector<qk::md::RunResult> got =
      run_on_thread_ranks(water, mdp, ranks, qk::md::RunOptions::Decomposition::kAuto);
  ASSERT_EQ(alone.frames.size(), 9u);
  EXPECT_LT(alone.frames.back().box[0], 0.93 * water.conf.box[0]) << "not squeezed";
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(std::regex_search(got[r].decomposition,
                                  std::regex("^domain decomposition: 8 slabs.*; step [1-7]0: the domains no longer fit "
                                             "\\(8 slabs of a .* at most 7 ranks\\); force decomposition from here on$")))
        << got[r].decomposition;
    ASSERT_EQ(got[r].frames.size(), alone.frames.size());
    for (size_t k = 0; k < alone.frames.size(); ++k) {  // a hot, squeezed box: rounding grows faster
      const qk::md::EnergyFrame &a = alone.frames[k], &b = got[r].frames[k];
      EXPECT_NEAR(b.potential.potential(), a.potential.potential(), 1e-5 * std::abs(a.potential.potential()))
          << "rank " << r << " step " << a.step;
      EXPECT_NEAR(b.box[0], a.box[0], 1e-6) << "rank " << r << " step " << a.step;
    }
    EXPECT_EQ(got[r].final_conf.atoms.size(), alone.final_conf.atoms.size());
  }
}

// Seeds the mdp leaves to the clock (gen-seed, V-rescale's and C-rescale's draws): the ranks take rank 0's,
// so they generate the same velocities (force decomposition, where each integrates every atom, would drift
// apart otherwise), couple alike and scale the box alike.
TEST(DomainDecomposition, RanksAgreeOnTheSeedsTheMdpLeavesToTheClock) {
  const Tiled water("water_pme", 2);
  qk::md::MdpOptions mdp = md_mdp(water.mdp);
  mdp.gen_seed = -1;
  couple_pressure(&mdp, 1.0, 1, -1);
  for (auto how : {qk::md::RunOptions::Decomposition::kDomains, qk::md::RunOptions::Decomposition::kForces}) {
    const std::vector<qk::md::RunResult> got = run_on_thread_ranks(water, mdp, 2, how);
    ASSERT_EQ(got[1].frames.size(), got[0].frames.size());
    for (size_t k = 0; k < got[0].frames.size(); ++k) {
      EXPECT_EQ(got[1].frames[k].group_lambda, got[0].frames[k].group_lambda) << "step " << got[0].frames[k].step;
      EXPECT_EQ(got[1].frames[k].box, got[0].frames[k].box) << "step " << got[0].frames[k].step;
    }
    ASSERT_EQ(got[1].final_conf.atoms.size(), got[0].final_conf.atoms.size());
    for (size_t i = 0; i < got[0].final_conf.atoms.size(); ++i)
      ASSERT_EQ(got[1].final_conf.atoms[i].x, got[0].final_conf.atoms[i].x) << "atom " << i;
  }
}

TEST(DomainDecomposition, RunsThatCannotUseDomainsShareTheForcesAndSayWhy) {
  const Tiled water("water_pme", 1);  // too thin for two slabs
  expect_run_over_ranks_equals_alone(water, 2, qk::md::RunOptions::Decomposition::kAuto,
                                     "force decomposition (every rank holds every atom): 2 slabs of a 2.500 nm box");
  // Asked for domains where they cannot be: an error naming why, on every rank.
  ThreadComm comm(1);
  qk::md::RunOptions opt;
  opt.share = {.rank = 0, .size = 2, .allreduce_sum = [](double*, int64_t) {}, .broadcast_first = {},
               .exchange = [](int, const double*, int64_t, int, double*, int64_t) {}};
  opt.decomposition = qk::md::RunOptions::Decomposition::kDomains;
  try {
    qk::md::run(water.top, md_mdp(water.mdp), water.conf, opt);
    ADD_FAILURE() << "no error";
  } catch (const qk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("domain decomposition over 2 ranks: 2 slabs"), std::string::npos) << e.what();
  }
}

}  // namespace
