#include <gtest/gtest.h>

#include "cli/run_qk.h"
#include "qk/base/version.h"

namespace {
using qk::test::run_qk;

TEST(Cli, VersionPrintsVersionAndRevision) {
  auto r = run_qk("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find(std::string("qk ") + QK_VERSION_STRING), std::string::npos) << r.output;
}

TEST(Cli, HelpListsCommands) {
  auto r = run_qk("help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("check"), std::string::npos) << r.output;
}

TEST(Cli, HelpForOneCommand) {
  auto r = run_qk("help check");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("--size"), std::string::npos) << r.output;
}

TEST(Cli, UnknownCommandFails) {
  EXPECT_NE(run_qk("frobnicate").exit_code, 0);
  auto r = run_qk("help frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown command"), std::string::npos) << r.output;
}

TEST(Cli, CheckRuns) {
  auto r = run_qk("check --size 64");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Build"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Devices"), std::string::npos) << r.output;
}

// Every variable qianka reads is declared in the one registry (qk/base/env.h),
// so `qk check --env` lists it: launchers' variables, the test-only ones and
// the NCCL spellings included.
TEST(Cli, CheckEnvListsEveryVariable) {
  auto r = run_qk("check --size 64 --env");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* name :
       {"QK_FAULT_KILL", "QK_OMP_REEXEC", "OMP_WAIT_POLICY", "QK_STORE_TOKEN", "QK_RUN", "QK_RESTART_COUNT",
        "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
        "SLURM_PROCID", "QK_RANK", "QCCL_ALGO", "QCCL_COMM_ID", "QCCL_DEBUG", "QCCL_DEBUG_SUBSYS",
        "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "QK_LOG_LEVEL", "QK_EXTENSIONS"})
    EXPECT_NE(r.output.find(std::string("\n  ") + name + " "), std::string::npos) << name << "\n" << r.output;
}

TEST(Cli, CheckRejectsBadSize) {
  auto r = run_qk("check --size 3");
  EXPECT_NE(r.exit_code, 0);
}

TEST(Cli, BadLogLevelWarnsButRuns) {
  auto r = run_qk("check --size 64", "QK_LOG_LEVEL=loud");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("QK_LOG_LEVEL"), std::string::npos) << r.output;
}

}  // namespace
