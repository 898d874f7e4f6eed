#include "qk/base/log.h"

#include <gtest/gtest.h>

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

}  // namespace
