// Forces are minus the gradient of the energy: central finite differences of
// ForceCalculator's potential on small systems, every interaction kind on.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "pbc.h"
#include "qk/hpc/md/forces.h"
#include "reference_energies.h"
#include "vsite.h"

namespace {

using qk::md::Vec3;

// A few atoms' forces against (E(x - h) - E(x + h)) / 2h.
void check_forces_are_gradients(const qk::md::Topology& top, const qk::md::MdpOptions& mdp, const Vec3& box,
                                std::vector<Vec3> x, const std::vector<int>& atoms) {
  qk::md::ForceCalculator ff(top, mdp, box);
  std::vector<Vec3> f, scratch;
  ff.compute(x, &f);
  const double h = 1e-5;
  for (int a : atoms)
    for (int d = 0; d < 3; ++d) {
      const double x0 = x[a][d];
      x[a][d] = x0 + h;
      const double ep = ff.compute(x, &scratch).potential();
      x[a][d] = x0 - h;
      const double em = ff.compute(x, &scratch).potential();
      x[a][d] = x0;
      const double fd = (em - ep) / (2 * h);
      EXPECT_NEAR(f[a][d], fd, 1e-4 * std::abs(fd) + 2e-3) << "atom " << a << " dim " << d;
    }
}

// The first n waters of the PME fixture (molecules are whole there) in its box.
std::vector<Vec3> first_atoms(const qk::md::test::Fixture& fx, int n) {
  std::vector<Vec3> x = fx.x();
  x.resize(n);
  return x;
}

qk::md::Topology water_topology(int molecules, const std::vector<std::string>& defines, const std::string& dir,
                                const std::string& force_field = "water_pme/spc_ff.itp") {
  // A fixture's force field with fewer molecules.
  std::ofstream(dir + "/small.top") << "#include \"" << QK_SOURCE_DIR << "/tests/fixtures/md/" << force_field
                                    << "\"\n[ system ]\nsmall\n"
                                       "[ molecules ]\nSOL "
                                    << molecules << "\n";
  return qk::md::read_top(dir + "/small.top", qk::md::TopOptions{defines, {}});
}

std::string temp_dir() {
  std::string d = (std::filesystem::temp_directory_path() /
                   ("qk_md_forces_" + std::to_string(::getpid())))
                      .string();
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace

TEST(Forces, FlexibleWaterWithPmeAreEnergyGradients) {
  qk::md::test::Fixture fx("water_pme");
  std::string dir = temp_dir();
  qk::md::Topology top = water_topology(40, {"FLEXIBLE"}, dir);  // bonds and angles on
  std::filesystem::remove_all(dir);
  ASSERT_EQ(top.bonds.size(), 80u);
  check_forces_are_gradients(top, fx.mdp, fx.conf.box, first_atoms(fx, 120), {0, 1, 2, 50, 119});
}

TEST(Forces, RigidWaterWithReactionFieldAreEnergyGradients) {
  qk::md::test::Fixture fx("water_rf");
  std::string dir = temp_dir();
  qk::md::Topology top = water_topology(40, {}, dir);
  std::filesystem::remove_all(dir);
  check_forces_are_gradients(top, fx.mdp, fx.conf.box, first_atoms(fx, 120), {0, 4, 77, 118});
}

TEST(Forces, ArgonAreEnergyGradients) {
  qk::md::test::Fixture fx("argon");
  check_forces_are_gradients(fx.top, fx.mdp, fx.conf.box, fx.x(), {0, 250, 499});
}

TEST(Forces, OneFourPairsAreEnergyGradients) {
  // A four-atom chain with a 1-4 pair (gen-pairs: fudgeLJ x LJ, fudgeQQ x Coulomb).
  std::string dir = temp_dir();
  std::ofstream(dir + "/chain.top") << "[ defaults ]\n1 2 yes 0.5 0.8333\n"
                                       "[ atomtypes ]\nC 12.011 0.0 A 0.34 0.36\n"
                                       "[ moleculetype ]\nCHAIN 3\n"
                                       "[ atoms ]\n1 C 1 X C1 1 0.3\n2 C 1 X C2 1 -0.3\n3 C 1 X C3 1 0.2\n"
                                       "4 C 1 X C4 1 -0.2\n"
                                       "[ bonds ]\n1 2 1 0.15 2e5\n2 3 1 0.15 2e5\n3 4 1 0.15 2e5\n"
                                       "[ angles ]\n1 2 3 1 112 400\n2 3 4 1 112 400\n"
                                       "[ pairs ]\n1 4 1\n"
                                       "[ system ]\nchain\n[ molecules ]\nCHAIN 2\n";
  qk::md::Topology top = qk::md::read_top(dir + "/chain.top");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(top.pairs.size(), 2u);
  qk::md::MdpOptions mdp = qk::md::parse_mdp("coulombtype = PME\nrcoulomb = 0.9\nrvdw = 0.9\n", "chain.mdp");
  std::vector<Vec3> x = {{0.50, 0.50, 0.50}, {0.64, 0.55, 0.50}, {0.70, 0.68, 0.55}, {0.84, 0.70, 0.62},
                         {1.40, 1.10, 0.90}, {1.52, 1.18, 0.95}, {1.55, 1.30, 1.05}, {1.69, 1.33, 1.10}};
  check_forces_are_gradients(top, mdp, Vec3{2.1, 2.1, 2.1}, x, {0, 1, 2, 3, 6});
}

TEST(Forces, DihedralsOfEveryKindAreEnergyGradients) {
  // Five atoms: proper periodic (9, and 1 alike: both consecutive [dihedraltypes] lines), Ryckaert-
  // Bellemans (3), harmonic improper (2, the two-type form: outer atoms' types) and periodic improper (4).
  std::string dir = temp_dir();
  std::ofstream(dir + "/dih.top") << "[ defaults ]\n1 2 yes 0.5 0.8333\n"
                                     "[ atomtypes ]\nCA 15.0 0.0 A 0.34 0.36\nCB 14.0 0.0 A 0.34 0.36\n"
                                     "[ dihedraltypes ]\n"
                                     "X CB CB X 9 10.0 2.0 1\nX CB CB X 9 170.0 1.0 2\n"
                                     "CA CB CB CA 3 9.28 12.16 -13.12 -3.06 26.24 -31.5\n"
                                     "CA CB 2 25.0 60.0\n"
                                     "[ moleculetype ]\nM 3\n"
                                     "[ atoms ]\n1 CA 1 X C1 1 0.1\n2 CB 1 X C2 1 -0.1\n3 CB 1 X C3 1 0.1\n"
                                     "4 CA 1 X C4 1 -0.1\n5 CB 1 X C5 1 0.0\n"
                                     "[ bonds ]\n1 2 1 0.15 2e5\n2 3 1 0.15 2e5\n3 4 1 0.15 2e5\n3 5 1 0.15 2e5\n"
                                     "[ dihedrals ]\n1 2 3 4 9\n1 2 3 4 1\n1 2 3 4 3\n1 2 5 3 2\n"
                                     "2 3 4 5 4 180.0 5.0 3\n"
                                     "[ system ]\nd\n[ molecules ]\nM 2\n";
  qk::md::Topology top = qk::md::read_top(dir + "/dih.top");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(top.dihedrals.size(), 2u * 7);  // 9 and 1: 2 terms each (as grompp 2022.5); 3, 2, 4: one each
  EXPECT_EQ(top.dihedrals[0].multiplicity, 1);
  EXPECT_EQ(top.dihedrals[1].multiplicity, 2);
  EXPECT_EQ(top.dihedrals[2].funct, 1);
  EXPECT_EQ(top.dihedrals[3].k_phi, 1.0);
  EXPECT_EQ(top.dihedrals[5].funct, 2);
  EXPECT_EQ(top.dihedrals[5].k_phi, 60.0);
  qk::md::MdpOptions mdp = qk::md::parse_mdp("coulombtype = Reaction-Field\nrcoulomb = 0.9\nrvdw = 0.9\n", "d.mdp");
  std::vector<Vec3> x = {{0.50, 0.50, 0.50}, {0.64, 0.55, 0.50}, {0.70, 0.68, 0.55}, {0.84, 0.70, 0.62},
                         {0.66, 0.74, 0.42}, {1.40, 1.10, 0.90}, {1.52, 1.18, 0.95}, {1.55, 1.30, 1.05},
                         {1.69, 1.33, 1.10}, {1.50, 1.42, 1.02}};
  check_forces_are_gradients(top, mdp, Vec3{2.1, 2.1, 2.1}, x, {0, 1, 2, 3, 4, 7});
}

// TIP4P: the energy as a function of the real atoms (the M sites built from them); their forces after the
// sites' are spread back are its gradient, the sites' own forces zero.
TEST(Forces, Tip4pSiteForcesSpreadToTheEnergyGradientOfItsAtoms) {
  qk::md::test::Fixture fx("water_tip4p");
  std::string dir = temp_dir();
  const qk::md::Topology top = water_topology(40, {}, dir, "water_tip4p/tip4p_ff.itp");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(top.vsites3.size(), 40u);
  const qk::md::RectBox box(fx.conf.box);
  std::vector<Vec3> x = first_atoms(fx, 160), f, scratch;
  qk::md::ForceCalculator ff(top, fx.mdp, fx.conf.box);
  auto energy = [&](std::vector<Vec3> at) {
    qk::md::construct_virtual_sites(top, box, &at);
    return ff.compute(at, &scratch).potential();
  };
  qk::md::construct_virtual_sites(top, box, &x);
  ff.compute(x, &f);
  const Vec3 site_force = f[3];
  qk::md::spread_virtual_site_forces(top, &f);
  EXPECT_GT(std::abs(site_force[0]) + std::abs(site_force[1]) + std::abs(site_force[2]), 1.0);
  EXPECT_EQ(f[3], (Vec3{0, 0, 0}));
  const double h = 1e-5;
  for (int a : {0, 1, 2, 81})
    for (int d = 0; d < 3; ++d) {
      std::vector<Vec3> p = x, m = x;
      p[a][d] += h;
      m[a][d] -= h;
      const double fd = (energy(m) - energy(p)) / (2 * h);
      EXPECT_NEAR(f[a][d], fd, 1e-4 * std::abs(fd) + 2e-3) << "atom " << a << " dim " << d;
    }
}
