// `qk hpl` end to end: HPL's output format, HPL.dat input, and clear errors.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "cli/run_qk.h"

namespace {

using qk::test::run_qk;

TEST(CliHpl, FlagsRunAndPrintHplFormat) {
  auto r = run_qk("hpl -n 200,64 --nb 32 --threads 1 --progress 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("T/V                N    NB     P     Q               Time"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("WR11C2R4         200    32     1     1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("||Ax-b||_oo/(eps*(||A||_oo*||x||_oo+||b||_oo)*N)="), std::string::npos);
  EXPECT_NE(r.output.find("2 tests completed and passed residual checks"), std::string::npos)
      << r.output;
}

TEST(CliHpl, ReadsAnHplDatFile) {
  const std::string path = std::string(QK_BINARY_DIR) + "/cli_hpl_test.dat";
  std::ofstream(path) << "HPLinpack benchmark input file\nqk test\nHPL.out  output\n6  device\n"
                         "2  # of N\n50 77  Ns\n1  # of NBs\n16  NBs\n0  PMAP\n1  # grids\n1  Ps\n"
                         "1  Qs\n16.0  threshold\n1  # pfact\n0  PFACTs\n1  # nbmin\n2  NBMINs\n"
                         "1  # ndiv\n2  NDIVs\n2  # rfact\n0 2  RFACTs\n1  # bcast\n0  BCASTs\n"
                         "1  # depth\n0  DEPTHs\n2  SWAP\n64  swapping threshold\n";
  auto r = run_qk("hpl '" + path + "' --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WR00L2L2          50    16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("WR00R2L2          77    16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("4 tests completed and passed"), std::string::npos) << r.output;
}

TEST(CliHpl, MalformedDatNamesTheLine) {
  const std::string path = std::string(QK_BINARY_DIR) + "/cli_hpl_bad.dat";
  std::ofstream(path) << "HPL\nx\nHPL.out\n6\n1\nabc  Ns\n";
  auto r = run_qk("hpl '" + path + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("line 6"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"abc\""), std::string::npos) << r.output;
}

TEST(CliHpl, GridLargerThanTheJobIsRefused) {
  auto r = run_qk("hpl -n 100 -P 2 -Q 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("needs 4 ranks, but this job has 1"), std::string::npos) << r.output;
}

TEST(CliHpl, TooLargeNIsRefusedWithAnEstimate) {
  auto r = run_qk("hpl -n 3000000");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("is available"), std::string::npos) << r.output;
}

TEST(CliHpl, PrintsProgressForLongRuns) {
  auto r = run_qk("hpl -n 600 --nb 16 --threads 1 --progress 0.000001");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("qk hpl: N=600 column "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Gflops so far"), std::string::npos) << r.output;
}

TEST(CliHpl, InjectedFaultFails) {
  auto r = run_qk("hpl -n 150 --nb 32 --threads 1 --inject-fault");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("FAILED"), std::string::npos) << r.output;
}

}  // namespace
