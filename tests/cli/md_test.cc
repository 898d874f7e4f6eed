// `qk md` end to end on the water box with PME that tests/hpc/md checks
// against GROMACS: md.log's step-0 energies (GROMACS's Potential), the final
// .gro and the Performance line; the .trr of a trajectory mdp; -h; bad input named.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli/run_qk.h"
#include "cli/scratch_dir.h"
#include "qk/base/file_io.h"

namespace {

using qk::test::run_qk;

const qk::test::ScratchRoot kScratch("md");

const std::string kWater = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/water_pme/";

TEST(CliMd, WaterBoxWritesGromacsLogAndFinalCoordinates) {
  const std::string dir = kScratch.fresh("water");
  const auto r = run_qk("md -f " + kWater + "run.mdp -c " + kWater + "conf.gro -p " + kWater +
                        "topol.top -deffnm " + dir + "/w -nsteps 5 -nt 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(std::filesystem::exists(dir + "/w.log")) << r.output;
  const std::string log = qk::read_file(dir + "/w.log");
  EXPECT_NE(log.find("Potential"), std::string::npos) << log;
  EXPECT_NE(log.find("-1.98330e+04"), std::string::npos) << "GROMACS's step-0 Potential\n" << log;
  EXPECT_NE(log.find("Performance:"), std::string::npos) << log;
  EXPECT_TRUE(std::filesystem::exists(dir + "/w.gro")) << r.output;
}

// The argon trajectory mdp (positions every step, velocities and forces every second, compressed positions
// every step): NAME.trr and NAME.xtc with the frames gmx mdrun writes for it (tests/hpc/md/trr_test.cc and
// xtc_test.cc compare their contents).
TEST(CliMd, TrajectoryMdpWritesTheTrrAndXtc) {
  const std::string argon = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/argon/";
  const std::string dir = kScratch.fresh("argon");
  const auto r = run_qk("md -f " + argon + "traj.mdp -c " + argon + "conf.gro -p " + argon + "topol.top -deffnm " +
                        dir + "/a -nt 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(dir + "/a.trr"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir + "/a.xtc"), std::string::npos) << r.output;
  // Packed sizes follow the positions' last grid point, which float rounding may move: within 2%.
  const double xtc = static_cast<double>(qk::read_file(dir + "/a.xtc").size()),
               gmx_xtc = static_cast<double>(qk::read_file(argon + "traj_reference.xtc").size());
  EXPECT_NEAR(xtc / gmx_xtc, 1.0, 0.02);
  const std::string ours = qk::read_file(dir + "/a.trr"), theirs = qk::read_file(argon + "traj_reference.trr");
  EXPECT_EQ(ours.size(), theirs.size()) << "the same 3 frames and blocks as gmx mdrun's";
  const auto other = run_qk("md -f " + argon + "traj.mdp -c " + argon + "conf.gro -p " + argon + "topol.top -g " +
                            dir + "/b.log -o " + dir + "/b.gro -trr " + dir + "/elsewhere.trr -nt 1");
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/elsewhere.trr")) << other.output;
}

TEST(CliMd, HelpAndBadInput) {
  const auto help = run_qk("md -h");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("-deffnm"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("-trr FILE"), std::string::npos) << help.output;
  const auto missing = run_qk("md -f /nonexistent/run.mdp -c " + kWater + "conf.gro -p " + kWater + "topol.top");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("/nonexistent/run.mdp"), std::string::npos) << missing.output;
  const auto bogus = run_qk("md -bogus");
  EXPECT_NE(bogus.exit_code, 0);
  EXPECT_NE(bogus.output.find("-bogus"), std::string::npos) << bogus.output;
}

}  // namespace
