#include "qk/base/log.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

#include "qk/base/error.h"

namespace {

TEST(Log, ParsesLevels) {
  EXPECT_EQ(qk::logging::parse_level("DEBUG"), qk::logging::Level::debug);
  EXPECT_EQ(qk::logging::parse_level("warn"), qk::logging::Level::warn);
  EXPECT_THROW(qk::logging::parse_level("loud"), qk::ValueError);
}

TEST(Log, LevelGatesFormatting) {
  qk::logging::set_level(qk::logging::Level::warn);
  int formatted = 0;
  auto count = [&] { return ++formatted; };
  QK_INFO("{}", count());
  EXPECT_EQ(formatted, 0) << "a disabled line must not evaluate its arguments";
  qk::logging::set_level(qk::logging::Level::info);
  testing::internal::CaptureStderr();
  qk::logging::set_prefix("[rank 3] ");
  QK_INFO("value {}", count());
  qk::logging::set_prefix("");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(formatted, 1);
  EXPECT_EQ(err.rfind("[rank 3] ", 0), 0u) << err;
  EXPECT_NE(err.find("INFO  value 1"), std::string::npos) << err;
}

using qk::logging::Level;

TEST(Log, NcclDebugValuesMapOntoTheOneLevel) {
  using qk::logging::parse_nccl_debug;
  EXPECT_EQ(parse_nccl_debug("INFO").level, Level::debug);
  EXPECT_EQ(parse_nccl_debug("trace").level, Level::trace);
  EXPECT_FALSE(parse_nccl_debug("WARN").level.has_value());  // warnings show at the default level
  EXPECT_FALSE(parse_nccl_debug("NONE").level.has_value());
  EXPECT_TRUE(parse_nccl_debug("Version").version);
  EXPECT_FALSE(parse_nccl_debug("VERSION").level.has_value());
  EXPECT_FALSE(parse_nccl_debug("INFO").version);
  EXPECT_THROW(parse_nccl_debug("DEBUG"), qk::ValueError);  // not one of NCCL's
}

TEST(Log, SubsystemsFollowNcclSyntax) {
  using qk::logging::parse_subsys;
  EXPECT_TRUE(parse_subsys("").allows("COLL"));
  EXPECT_TRUE(parse_subsys("ALL").allows("NET"));
  auto f = parse_subsys("init, coll");
  EXPECT_TRUE(f.allows("INIT"));
  EXPECT_TRUE(f.allows("coll"));
  EXPECT_FALSE(f.allows("NET"));
  auto neg = parse_subsys("^INIT,COLL");
  EXPECT_FALSE(neg.allows("INIT"));
  EXPECT_FALSE(neg.allows("COLL"));
  EXPECT_TRUE(neg.allows("P2P"));
  EXPECT_TRUE(neg.allows("TUNING"));
  EXPECT_FALSE(parse_subsys("^ALL").allows("INIT"));
}

// The variables, in every combination that matters: one level, one filter.
class LogEnv : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"QK_LOG_LEVEL",      "QK_DEBUG",   "QK_LOG_SUBSYS",
                                          "QCCL_DEBUG",        "NCCL_DEBUG", "QCCL_DEBUG_SUBSYS",
                                          "NCCL_DEBUG_SUBSYS"};
  void SetUp() override { clear(); }
  void TearDown() override {
    clear();
    qk::logging::reload_from_env();
  }
  static void clear() {
    for (const char* v : kVars) ::unsetenv(v);
  }
  static Level load(std::initializer_list<std::pair<const char*, const char*>> vars) {
    clear();
    for (auto [k, v] : vars) ::setenv(k, v, 1);
    qk::logging::reload_from_env();
    return qk::logging::level();
  }
};

TEST_F(LogEnv, QcclAndNcclDebugOnlyMakeTheLogMoreVerbose) {
  EXPECT_EQ(load({}), Level::info);
  EXPECT_EQ(load({{"QCCL_DEBUG", "INFO"}}), Level::debug);
  EXPECT_EQ(load({{"NCCL_DEBUG", "INFO"}}), Level::debug);
  EXPECT_EQ(load({{"NCCL_DEBUG", "TRACE"}}), Level::trace);
  EXPECT_EQ(load({{"QCCL_DEBUG", "WARN"}}), Level::info);
  EXPECT_EQ(load({{"QK_LOG_LEVEL", "error"}, {"NCCL_DEBUG", "WARN"}}), Level::error);
  EXPECT_EQ(load({{"QK_LOG_LEVEL", "warn"}, {"QCCL_DEBUG", "INFO"}}), Level::debug);
  EXPECT_EQ(load({{"QK_LOG_LEVEL", "trace"}, {"QCCL_DEBUG", "INFO"}}), Level::trace);
  // QCCL_DEBUG wins over NCCL_DEBUG.
  EXPECT_EQ(load({{"QCCL_DEBUG", "WARN"}, {"NCCL_DEBUG", "TRACE"}}), Level::info);
  EXPECT_EQ(load({{"QK_DEBUG", "1"}}), Level::debug);
  load({{"NCCL_DEBUG", "VERSION"}});
  EXPECT_TRUE(qk::logging::version_requested());
  EXPECT_EQ(qk::logging::level(), Level::info);
  load({});
  EXPECT_FALSE(qk::logging::version_requested());
}

TEST_F(LogEnv, BadValuesAreReportedAndIgnored) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(load({{"QCCL_DEBUG", "LOUD"}, {"QK_LOG_LEVEL", "loud"}}), Level::info);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("QCCL_DEBUG"), std::string::npos) << err;
  EXPECT_NE(err.find("QK_LOG_LEVEL"), std::string::npos) << err;
}

TEST_F(LogEnv, OneSubsystemFilterUnderThreeNames) {
  load({{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_SUBSYS", "^INIT"}});
  EXPECT_FALSE(qk::logging::enabled(Level::debug, "INIT"));
  EXPECT_TRUE(qk::logging::enabled(Level::debug, "COLL"));
  EXPECT_TRUE(qk::logging::enabled(Level::debug, ""));  // lines without a subsystem
  EXPECT_TRUE(qk::logging::enabled(Level::warn, "INIT"));  // warnings always
  load({{"QCCL_DEBUG", "INFO"}, {"QCCL_DEBUG_SUBSYS", "COLL"}, {"NCCL_DEBUG_SUBSYS", "INIT"}});
  EXPECT_TRUE(qk::logging::enabled(Level::debug, "COLL"));
  EXPECT_FALSE(qk::logging::enabled(Level::debug, "INIT"));
  load({{"QK_LOG_LEVEL", "debug"}, {"QK_LOG_SUBSYS", "NET"}, {"QCCL_DEBUG_SUBSYS", "COLL"}});
  EXPECT_TRUE(qk::logging::enabled(Level::debug, "NET"));
  EXPECT_FALSE(qk::logging::enabled(Level::debug, "COLL"));
  load({{"NCCL_DEBUG", "INFO"}});
  EXPECT_TRUE(qk::logging::enabled(Level::debug, "TUNING"));
}

}  // namespace
