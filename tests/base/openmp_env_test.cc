// OMP_WAIT_POLICY=PASSIVE reaches OpenMP in every program that links qianka
// (src/base/openmp_env.cc), with nothing to call: libgomp, asked with
// OMP_DISPLAY_ENV=VERBOSE, reports its spin count (0 when passive).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "common/run_command.h"

namespace {

#ifdef QK_OPENMP_PROBE
std::string spin_count(const std::string& env) {
  auto r = qk::test::run_command("env -u OMP_WAIT_POLICY -u QK_OMP_REEXEC -u GOMP_SPINCOUNT " + env +
                                 " OMP_DISPLAY_ENV=VERBOSE " + QK_OPENMP_PROBE);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto at = r.output.find("GOMP_SPINCOUNT = '");
  if (at == std::string::npos) return "(not shown: " + r.output + ")";
  at += std::strlen("GOMP_SPINCOUNT = '");
  return r.output.substr(at, r.output.find('\'', at) - at);
}

TEST(OpenmpEnv, PassiveBeforeOpenmpStarts) { EXPECT_EQ(spin_count(""), "0"); }

TEST(OpenmpEnv, KeepsThePolicyTheUserSet) {
  EXPECT_NE(spin_count("OMP_WAIT_POLICY=ACTIVE"), "0");
  EXPECT_EQ(spin_count("OMP_WAIT_POLICY=PASSIVE"), "0");
}

TEST(OpenmpEnv, ReexecCanBeTurnedOff) {
  std::string spins = spin_count("QK_OMP_REEXEC=0");
  EXPECT_NE(spins, "0");
  EXPECT_EQ(spins.find("not shown"), std::string::npos) << spins;
}
#else
TEST(OpenmpEnv, NeedsOpenmp) { GTEST_SKIP() << "no OpenMP runtime found at configure time"; }
#endif

}  // namespace
