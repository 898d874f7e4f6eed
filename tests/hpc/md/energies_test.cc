// Step-0 potential energy terms against GROMACS 2022.5 (double precision),
// from tests/fixtures/md (tests/fixtures/gen_md.sh wrote them with gmx_d).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>
#include <map>
#include <string>

#include "qk/hpc/md/forces.h"
#include "qk/hpc/md/gro.h"
#include "qk/hpc/md/md.h"
#include "qk/hpc/md/mdp.h"
#include "qk/hpc/md/topology.h"
#include "common/reference_tool.h"
#include "lincs.h"
#include "reference_energies.h"

namespace {

using qk::md::test::Fixture;
using qk::md::test::kRelTol;

void expect_close(const std::string& term, double ours, double gromacs) {
  const double rel = std::abs(ours - gromacs) / std::max(std::abs(gromacs), 1e-300);
  // The validation table of docs/md.md comes from these lines.
  std::printf("  %-15s qk md %20.10f  GROMACS %20.10f  rel %.2e\n", term.c_str(), ours, gromacs, rel);
  EXPECT_LT(rel, kRelTol) << term << ": qk md " << ours << ", GROMACS " << gromacs << " (relative error " << rel
                          << ")";
}

// Our terms by GROMACS's names.
std::map<std::string, double> named_terms(const qk::md::PotentialTerms& e) {
  return {{"Bond", e.bond},           {"Angle", e.angle},           {"LJ-14", e.lj14},
          {"Coulomb-14", e.coulomb14}, {"LJ (SR)", e.lj_sr},        {"Disper. corr.", e.disp_corr},
          {"Coulomb (SR)", e.coulomb_sr}, {"Coul. recip.", e.coul_recip}, {"Potential", e.potential()},
          {"Pres. DC", e.pres_dc},        {"Proper Dih.", e.proper_dih}, {"Ryckaert-Bell.", e.rb_dih},
          {"Improper Dih.", e.improper_dih}, {"Per. Imp. Dih.", e.periodic_improper_dih}};
}

void check_potential_terms(const std::string& system, std::vector<std::string> expected_terms,
                           qk::md::Precision precision);

constexpr qk::md::Precision kBoth[] = {qk::md::Precision::kDouble, qk::md::Precision::kMixed};
const char* name(qk::md::Precision p) { return p == qk::md::Precision::kDouble ? "double" : "mixed"; }

// Every potential term GROMACS reported for the system (and no term it did not), in double precision
// (as gmx_d, which wrote the fixtures) and in mixed precision (float pair forces, as gmx): both within
// issue 34's 1e-4.
void check_potential_terms(const std::string& system, std::vector<std::string> expected_terms) {
  for (qk::md::Precision precision : kBoth) {
    std::printf(" %s precision:\n", name(precision));
    SCOPED_TRACE(name(precision));
    check_potential_terms(system, expected_terms, precision);
  }
}

void check_potential_terms(const std::string& system, std::vector<std::string> expected_terms,
                           qk::md::Precision precision) {
  Fixture fx(system);
  // constraints = h-bonds: the constrained bonds are no longer interactions (GROMACS reports no Bond).
  const qk::md::Topology top = fx.mdp.constraints == qk::md::Constraints::kHBonds
                                   ? qk::md::without_bonds(fx.top, qk::md::h_bond_constraints(fx.top))
                                   : fx.top;
  qk::md::ForceCalculator ff(top, fx.mdp, fx.conf.box, precision);
  std::vector<qk::md::Vec3> f;
  const std::map<std::string, double> ours = named_terms(ff.compute(fx.x(), &f));
  for (const auto& [name, value] : ours) {
    if (!fx.has_ref(name)) {
      EXPECT_EQ(value, 0.0) << name << " is not in GROMACS's energies for " << system;
      continue;
    }
    if (fx.ref(name) == 0) {
      EXPECT_EQ(value, 0.0) << name;  // argon's Coulomb (SR): no charges
    } else {
      expect_close(name, value, fx.ref(name));
    }
    expected_terms.erase(std::remove(expected_terms.begin(), expected_terms.end(), name), expected_terms.end());
  }
  EXPECT_TRUE(expected_terms.empty()) << "terms missing from " << system << "/reference.txt: "
                                      << ::testing::PrintToString(expected_terms);
}

}  // namespace

TEST(Energies, WaterPmeStepZeroPotentialMatchesGromacs) {
  check_potential_terms("water_pme", {"LJ (SR)", "Disper. corr.", "Coulomb (SR)", "Coul. recip.", "Potential"});
}
// TIP4P: the charge sits on the massless M site of [ virtual_sites3 ] (vsite.h).
TEST(Energies, Tip4pWaterStepZeroPotentialMatchesGromacs) {
  check_potential_terms("water_tip4p", {"LJ (SR)", "Disper. corr.", "Coulomb (SR)", "Coul. recip.", "Potential"});
}
TEST(Energies, WaterReactionFieldStepZeroPotentialMatchesGromacs) {
  check_potential_terms("water_rf", {"LJ (SR)", "Disper. corr.", "Coulomb (SR)", "Potential"});
}
TEST(Energies, FlexibleWaterStepZeroPotentialMatchesGromacs) {
  check_potential_terms("water_flexible", {"Bond", "Angle", "LJ (SR)", "Coulomb (SR)", "Potential"});
}
TEST(Energies, WaterWithHBondConstraintsStepZeroPotentialMatchesGromacs) {
  check_potential_terms("water_hbonds", {"Angle", "LJ (SR)", "Disper. corr.", "Coulomb (SR)", "Potential"});
}
TEST(Energies, ArgonStepZeroPotentialMatchesGromacs) { check_potential_terms("argon", {"LJ (SR)", "Potential"}); }
TEST(Energies, ChainsWithOneFourPairsStepZeroPotentialMatchesGromacs) {
  check_potential_terms("chains", {"Bond", "Angle", "LJ-14", "Coulomb-14", "LJ (SR)", "Coulomb (SR)",
                                   "Coul. recip.", "Potential"});
}

TEST(Energies, PmeGridAndEwaldCoefficientAreGromacss) {
  Fixture fx("water_pme");
  qk::md::ForceCalculator ff(fx.top, fx.mdp, fx.conf.box);
  // 2.5 nm / 0.12 nm = 20.8 -> 24 from GROMACS's list (gmx grompp: "Using a fourier grid of 24x24x24").
  EXPECT_EQ(ff.pme_grid(), (std::array<int, 3>{24, 24, 24}));
  // md.log: "Using a Gaussian width (1/beta) of 0.320163 nm for Ewald" (rc 1.0, ewald-rtol 1e-5).
  EXPECT_NEAR(1 / ff.ewald_beta(), 0.320163, 5e-7);
  // md.log: "Long Range LJ corr.: <C6> 2.9078e-04".
  EXPECT_NEAR(ff.average_c6(), 2.9078e-04, 5e-9);
}

namespace {

// Every dihedral kind qk md reads (gen_md.sh's chains_dihedrals: lookups with wildcards, funct 9's
// consecutive lines, the two-type form, numbers inline).
TEST(Energies, ChainsWithDihedralsStepZeroPotentialMatchesGromacs) {
  check_potential_terms("chains_dihedrals", {"Bond", "Angle", "Proper Dih.", "Ryckaert-Bell.", "Improper Dih.",
                                             "Per. Imp. Dih.", "LJ-14", "Coulomb-14", "LJ (SR)", "Coulomb (SR)",
                                             "Coul. recip.", "Potential"});
}

// A tetrapeptide in AMBER99SB-ILDN as gmx pdb2gmx writes it (gen_md.sh's peptide): its topology
// #includes GROMACS's own force field (gromacs-data), whose [ dihedraltypes ] give the propers
// (funct 9, several terms each, X wildcards) and the impropers (funct 4).
bool have_amber99sb_ildn() {
  return std::filesystem::exists(qk::md::gromacs_top_dir() + "/amber99sb-ildn.ff/forcefield.itp");
}
TEST(Energies, AmberPeptideStepZeroPotentialMatchesGromacs) {
  if (!have_amber99sb_ildn())
    QK_MISSING_REFERENCE_TOOL("GROMACS's amber99sb-ildn.ff in " + qk::md::gromacs_top_dir() +
                              " (Debian: gromacs-data, installed with gromacs)");
  check_potential_terms("peptide", {"Bond", "Angle", "Proper Dih.", "Per. Imp. Dih.", "LJ-14", "Coulomb-14",
                                    "LJ (SR)", "Disper. corr.", "Coulomb (SR)", "Coul. recip.", "Potential"});
}

// One md step from the fixture (nsteps = 0, as GROMACS's reference run): the
// leap-frog kinetic energy average, the temperature and the pressure need the
// forces, the update, SETTLE and its virial to be right.
void check_step_zero_dynamics(const std::string& system) {
  for (qk::md::Precision precision : kBoth) {
    std::printf(" %s precision:\n", name(precision));
    SCOPED_TRACE(name(precision));
    Fixture fx(system);
    qk::md::RunOptions opt;
    opt.precision = precision;
    qk::md::RunResult r = qk::md::run(fx.top, fx.mdp, fx.conf, opt);
    ASSERT_EQ(r.frames.size(), 1u);
    const qk::md::EnergyFrame& e = r.frames[0];
    expect_close("Potential", e.potential.potential(), fx.ref("Potential"));
    expect_close("Kinetic En.", e.kinetic, fx.ref("Kinetic En."));
    expect_close("Total Energy", e.total, fx.ref("Total Energy"));
    expect_close("Temperature", e.temperature, fx.ref("Temperature"));
    expect_close("Pressure", e.pressure, fx.ref("Pressure"));
  }
}

}  // namespace

TEST(Energies, WaterPmeStepZeroKineticTemperaturePressureMatchGromacs) { check_step_zero_dynamics("water_pme"); }
TEST(Energies, Tip4pWaterStepZeroKineticTemperaturePressureMatchGromacs) { check_step_zero_dynamics("water_tip4p"); }
TEST(Energies, WaterReactionFieldStepZeroKineticTemperaturePressureMatchGromacs) {
  check_step_zero_dynamics("water_rf");
}
// LINCS (order 4, one iteration) on the O-H bonds of flexible water: the step's kinetic energy, temperature
// (3N - 1020 - 3 degrees of freedom) and pressure (the constraint virial) need it to move as GROMACS's does.
TEST(Energies, WaterWithLincsStepZeroKineticTemperaturePressureMatchGromacs) {
  check_step_zero_dynamics("water_hbonds");
}
TEST(Energies, ArgonStepZeroKineticTemperaturePressureMatchGromacs) { check_step_zero_dynamics("argon"); }
TEST(Energies, FlexibleWaterStepZeroKineticTemperaturePressureMatchGromacs) {
  check_step_zero_dynamics("water_flexible");
}
TEST(Energies, ChainsStepZeroKineticTemperaturePressureMatchGromacs) { check_step_zero_dynamics("chains"); }
TEST(Energies, AmberPeptideStepZeroKineticTemperaturePressureMatchGromacs) {
  if (!have_amber99sb_ildn())
    QK_MISSING_REFERENCE_TOOL("GROMACS's amber99sb-ildn.ff in " + qk::md::gromacs_top_dir());
  check_step_zero_dynamics("peptide");
}
// The pressure needs the dihedrals' virial.
TEST(Energies, ChainsWithDihedralsStepZeroKineticTemperaturePressureMatchGromacs) {
  check_step_zero_dynamics("chains_dihedrals");
}

TEST(Energies, OddPmeGridFromGromacssList) {
  // 3.0 nm / 0.12 nm = 25 -> 25 (gmx grompp: "Using a fourier grid of 25x25x25").
  Fixture fx("chains");
  qk::md::ForceCalculator ff(fx.top, fx.mdp, fx.conf.box);
  EXPECT_EQ(ff.pme_grid(), (std::array<int, 3>{25, 25, 25}));
  EXPECT_NEAR(ff.average_c6(), 7.2592e-03, 5e-8);  // md.log: "Long Range LJ corr.: <C6> 7.2592e-03"
}

// Position restraints (-DPOSRES: pdb2gmx's heavy-atom restraints of the peptide in water) to the structure
// before minimization (grompp's -r), with fixed references and with their centre scaled by the box
// (refcoord-scaling com: the same positions here, another virial): step 0 against gmx_d
// (tests/fixtures/gen_md.sh peptide_water: posres_<no|com>_reference.txt).
TEST(Energies, PositionRestraintsStepZeroMatchGromacs) {
  if (!std::filesystem::exists(qk::md::gromacs_top_dir() + "/amber99sb-ildn.ff/forcefield.itp"))
    QK_MISSING_REFERENCE_TOOL("GROMACS's amber99sb-ildn.ff in " + qk::md::gromacs_top_dir() +
                              " (Debian: gromacs-data, installed with gromacs)");
  const std::string dir = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/peptide_water/";
  const qk::md::GroFile conf = qk::md::read_gro(dir + "conf.gro");
  const qk::md::GroFile reference = qk::md::read_gro(dir + "restraint.gro");
  for (const auto& [scaling, mode] : {std::pair{"no", qk::md::RefCoordScaling::kNo}, {"com", qk::md::RefCoordScaling::kCom}}) {
    SCOPED_TRACE(std::string("refcoord-scaling ") + scaling);
    qk::md::MdpOptions mdp = qk::md::read_mdp(dir + "run.mdp");
    mdp.defines.push_back("POSRES");
    mdp.refcoord_scaling = mode;
    const qk::md::Topology top = qk::md::read_top(dir + "topol.top", qk::md::TopOptions{mdp.defines, {}});
    ASSERT_EQ(top.posres.size(), 25u);  // the peptide's heavy atoms (pdb2gmx's posre.itp)
    std::map<std::string, double> want;
    std::ifstream in(dir + "posres_" + scaling + "_reference.txt");
    for (std::string line; std::getline(in, line);)
      want[line.substr(0, line.find('\t'))] = std::stod(line.substr(line.find('\t') + 1));
    qk::md::RunOptions opt;
    opt.precision = qk::md::Precision::kDouble;
    opt.restraint_reference = &reference;
    const qk::md::RunResult r = qk::md::run(top, mdp, conf, opt);
    ASSERT_EQ(r.frames.size(), 1u);
    const qk::md::EnergyFrame& e = r.frames[0];
    expect_close("Position Rest.", e.potential.posres, want.at("Position Rest."));
    expect_close("Potential", e.potential.potential(), want.at("Potential"));
    expect_close("Pressure", e.pressure, want.at("Pressure"));
  }
}

// constraints = all-bonds: every bond of the chains a LINCS constraint; the start constrained first and one
// step taken, as gmx_d's (tests/fixtures/gen_md.sh chains_allbonds: chains/allbonds_reference.txt).
TEST(Energies, AllBondsConstrainedStepZeroMatchesGromacs) {
  const std::string dir = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/chains/";
  qk::md::MdpOptions mdp = qk::md::read_mdp(dir + "run.mdp");
  mdp.constraints = qk::md::Constraints::kAllBonds;
  const qk::md::Topology top = qk::md::read_top(dir + "topol.top");
  const qk::md::GroFile conf = qk::md::read_gro(dir + "conf.gro");
  ASSERT_EQ(qk::md::bond_constraints(top, mdp).size(), top.bonds.size());
  std::map<std::string, double> want;
  std::ifstream in(dir + "allbonds_reference.txt");
  for (std::string line; std::getline(in, line);)
    want[line.substr(0, line.find('\t'))] = std::stod(line.substr(line.find('\t') + 1));
  ASSERT_EQ(want.count("Bond"), 0u) << "GROMACS has no bond terms left";
  qk::md::RunOptions opt;
  opt.precision = qk::md::Precision::kDouble;
  const qk::md::RunResult r = qk::md::run(top, mdp, conf, opt);
  ASSERT_EQ(r.frames.size(), 1u);
  const qk::md::EnergyFrame& e = r.frames[0];
  EXPECT_EQ(e.potential.bond, 0.0);
  expect_close("Angle", e.potential.angle, want.at("Angle"));
  expect_close("Potential", e.potential.potential(), want.at("Potential"));
  expect_close("Pressure", e.pressure, want.at("Pressure"));
  // 3 per atom, less one per bond and the centre of mass's 3.
  EXPECT_DOUBLE_EQ(qk::md::degrees_of_freedom(top, mdp), 3.0 * 600 - 450 - 3);
  // LINCS's "Constr. rmsd", as GROMACS reports it (both at rounding level after one double-precision step).
  ASSERT_TRUE(e.constr_rmsd.has_value());
  EXPECT_LT(*e.constr_rmsd, 1e-8);
  EXPECT_LT(want.at("Constr. rmsd"), 1e-8);
}

// [ constraints ] (funct 1: a bond for the exclusions too) in place of the chains' [ bonds ], at the bonds'
// lengths: the same system as all-bonds above, so GROMACS's same step 0, with the mdp's constraints = none.
TEST(Energies, TopologyConstraintsHoldLikeAllBonds) {
  const std::string dir = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/chains/";
  const qk::md::Topology bonded = qk::md::read_top(dir + "topol.top");
  std::string text;
  {
    std::ifstream in(dir + "topol.top");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string bonds = "[ bonds ]\n1 2 1\n2 3 1\n3 4 1\n";
  ASSERT_NE(text.find(bonds), std::string::npos);
  char constraints[256];
  std::snprintf(constraints, sizeof constraints, "[ constraints ]\n1 2 1 %.17g\n2 3 1 %.17g\n3 4 1 %.17g\n",
                bonded.bonds[0].b0, bonded.bonds[1].b0, bonded.bonds[2].b0);
  text.replace(text.find(bonds), bonds.size(), constraints);
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("qk_constraints_" + std::to_string(::getpid()) + ".top");
  { std::ofstream(path) << text; }
  const qk::md::Topology top = qk::md::read_top(path.string());
  std::filesystem::remove(path);
  ASSERT_TRUE(top.bonds.empty());
  ASSERT_EQ(top.constraints.size(), 450u);
  EXPECT_EQ(top.exclusions, bonded.exclusions) << "funct 1 counts as a bond for nrexcl";
  qk::md::MdpOptions mdp = qk::md::read_mdp(dir + "run.mdp");
  ASSERT_EQ(mdp.constraints, qk::md::Constraints::kNone);
  std::map<std::string, double> want;
  std::ifstream in(dir + "allbonds_reference.txt");
  for (std::string line; std::getline(in, line);)
    want[line.substr(0, line.find('\t'))] = std::stod(line.substr(line.find('\t') + 1));
  qk::md::RunOptions opt;
  opt.precision = qk::md::Precision::kDouble;
  const qk::md::RunResult r = qk::md::run(top, mdp, qk::md::read_gro(dir + "conf.gro"), opt);
  ASSERT_EQ(r.frames.size(), 1u);
  expect_close("Potential", r.frames[0].potential.potential(), want.at("Potential"));
  expect_close("Pressure", r.frames[0].pressure, want.at("Pressure"));
  EXPECT_DOUBLE_EQ(qk::md::degrees_of_freedom(top, mdp), 3.0 * 600 - 450 - 3);
}
