// `qk md` end to end on the water box with PME that tests/hpc/md checks
// against GROMACS: md.log's step-0 energies (GROMACS's Potential), the final
// .gro and the Performance line; -h; bad input named.
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

TEST(CliMd, HelpAndBadInput) {
  const auto help = run_qk("md -h");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("-deffnm"), std::string::npos) << help.output;
  const auto missing = run_qk("md -f /nonexistent/run.mdp -c " + kWater + "conf.gro -p " + kWater + "topol.top");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("/nonexistent/run.mdp"), std::string::npos) << missing.output;
  const auto bogus = run_qk("md -bogus");
  EXPECT_NE(bogus.exit_code, 0);
  EXPECT_NE(bogus.output.find("-bogus"), std::string::npos) << bogus.output;
}

}  // namespace
