// `qk hpcg` end to end: a small grid validates on both paths; bad grids and
// an injected asymmetry are reported.
#include <gtest/gtest.h>

#include <string>

#include "cli/run_qk.h"

namespace {

using qk::test::run_qk;

TEST(CliHpcg, SmallGridIsValidOnBothPaths) {
  for (const char* path : {"", " --reference"}) {
    auto r = run_qk(std::string("hpcg --nx 16 --ny 16 --nz 16 --rt 0 --threads 2 --progress 0") +
                    path);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("HPCG result is VALID with a GFLOP/s rating of:"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("CG iterations, MG precond: 1"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(*path ? "(reference path)" : "(optimized path)"), std::string::npos);
  }
}

TEST(CliHpcg, PrintsProgressAndRunsSeveralSets) {
  auto r = run_qk("hpcg --nx 16 --ny 16 --nz 16 --rt 0.5 --threads 1 --progress 0.000001");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("CG sets (50 iterations each)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Benchmark:      1 CG sets"), std::string::npos) << r.output;
}

TEST(CliHpcg, RejectsDimensionsThatCannotCoarsen) {
  auto r = run_qk("hpcg --nx 20 --ny 16 --nz 16 --rt 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("multiples of 8"), std::string::npos) << r.output;
}

TEST(CliHpcg, InjectedAsymmetryIsInvalid) {
  auto r = run_qk("hpcg --nx 16 --ny 16 --nz 16 --rt 0 --progress 0 --inject-asymmetry");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("INVALID"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("SpMV symmetry departure"), std::string::npos) << r.output;
}

}  // namespace
