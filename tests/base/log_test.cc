#include "qk/base/log.h"

#include <gtest/gtest.h>

#include "qk/base/error.h"

namespace {

TEST(Log, ParsesLevels) {
  EXPECT_EQ(qk::log::parse_level("DEBUG"), qk::log::Level::debug);
  EXPECT_EQ(qk::log::parse_level("warn"), qk::log::Level::warn);
  EXPECT_THROW(qk::log::parse_level("loud"), qk::ValueError);
}

TEST(Log, LevelGatesFormatting) {
  qk::log::set_level(qk::log::Level::warn);
  int formatted = 0;
  auto count = [&] { return ++formatted; };
  QK_INFO("{}", count());
  EXPECT_EQ(formatted, 0) << "a disabled line must not evaluate its arguments";
  qk::log::set_level(qk::log::Level::info);
  testing::internal::CaptureStderr();
  qk::log::set_prefix("[rank 3] ");
  QK_INFO("value {}", count());
  qk::log::set_prefix("");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(formatted, 1);
  EXPECT_EQ(err.rfind("[rank 3] ", 0), 0u) << err;
  EXPECT_NE(err.find("INFO  value 1"), std::string::npos) << err;
}

}  // namespace
