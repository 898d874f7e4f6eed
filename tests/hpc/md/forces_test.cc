// Forces are minus the gradient of the energy: central finite differences of
// ForceCalculator's potential on small systems, every interaction kind on.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "qk/hpc/md/forces.h"
#include "reference_energies.h"

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

qk::md::Topology water_topology(int molecules, const std::vector<std::string>& defines, const std::string& dir) {
  // The fixture's force field with fewer molecules.
  std::ofstream(dir + "/small.top") << "#include \"" << QK_SOURCE_DIR
                                    << "/tests/fixtures/md/water_pme/spc_ff.itp\"\n[ system ]\nsmall\n"
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
