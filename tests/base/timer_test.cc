#include "qk/base/timer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>

namespace {

using qk::TimestampFormat;
using std::chrono::system_clock;

// 2026-12-04 17:51:04.123 UTC.
const system_clock::time_point kWhen = system_clock::from_time_t(1796406664) + std::chrono::milliseconds(123);

// Pins the local time zone for one test, so the local formats are known.
class ScopedTimeZone {
 public:
  explicit ScopedTimeZone(const char* tz) {
    if (const char* old = std::getenv("TZ")) old_ = old;
    ::setenv("TZ", tz, 1);
    ::tzset();
  }
  ~ScopedTimeZone() {
    if (old_)
      ::setenv("TZ", old_->c_str(), 1);
    else
      ::unsetenv("TZ");
    ::tzset();
  }

 private:
  std::optional<std::string> old_;
};

TEST(Timestamp, UtcIsIso8601WhateverTheLocalZone) {
  ScopedTimeZone tz("JST-9");
  EXPECT_EQ(qk::timestamp(TimestampFormat::utc, kWhen), "2026-12-04T17:51:04Z");
}

TEST(Timestamp, LocalIsDateAndTimeInTheLocalZone) {
  {
    ScopedTimeZone tz("UTC0");
    EXPECT_EQ(qk::timestamp(TimestampFormat::local, kWhen), "2026-12-04 17:51:04");
  }
  ScopedTimeZone tz("JST-9");  // UTC+9: past midnight, the next day
  EXPECT_EQ(qk::timestamp(TimestampFormat::local, kWhen), "2026-12-05 02:51:04");
}

TEST(Timestamp, LocalTimeMsIsTheTimeOfDayToTheMillisecond) {
  ScopedTimeZone tz("UTC0");
  EXPECT_EQ(qk::timestamp(TimestampFormat::local_time_ms, kWhen), "17:51:04.123");
  EXPECT_EQ(qk::timestamp(TimestampFormat::local_time_ms, system_clock::from_time_t(0)), "00:00:00.000");
  // Before 1970 the milliseconds still count up within their second.
  EXPECT_EQ(qk::timestamp(TimestampFormat::local_time_ms, system_clock::from_time_t(0) - std::chrono::milliseconds(1)),
            "23:59:59.999");
}

TEST(Timestamp, DefaultsToLocalDateAndTimeNow) {
  ScopedTimeZone tz("UTC0");
  const std::time_t before = std::time(nullptr);
  const std::string s = qk::timestamp();
  const std::time_t after = std::time(nullptr);
  ASSERT_EQ(s.size(), 19u) << s;
  std::tm tm{};
  ASSERT_NE(strptime(s.c_str(), "%Y-%m-%d %H:%M:%S", &tm), nullptr) << s;
  const std::time_t parsed = timegm(&tm);
  EXPECT_GE(parsed, before) << s;
  EXPECT_LE(parsed, after) << s;
}

}  // namespace
