// Wall-clock timing, timestamps, and human-readable sizes and durations for
// progress lines.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace qk {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double millis() const { return seconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point start_;
};

// How timestamp() writes a wall-clock time.
enum class TimestampFormat {
  local,         // "2026-12-04 18:51:04": local time (Megatron's log lines)
  utc,           // "2026-12-04T17:51:04Z": ISO 8601 in UTC (records written to files)
  local_time_ms  // "18:51:04.123": local time of day to the millisecond (log line prefix)
};

// The time `t` (by default now) as text, e.g.
//   qk::timestamp()                          -> "2026-12-04 18:51:04"
//   qk::timestamp(qk::TimestampFormat::utc)  -> "2026-12-04T17:51:04Z"
std::string timestamp(TimestampFormat format = TimestampFormat::local,
                      std::chrono::system_clock::time_point t = std::chrono::system_clock::now());

// "1.5 GiB", "512 B".
std::string format_bytes(uint64_t bytes);
// "1h02m03s", "4m05s", "12.3s", "45ms".
std::string format_duration(double seconds);
// Peak resident set size of this process in bytes (VmHWM), 0 if unknown.
uint64_t peak_rss_bytes();

}  // namespace qk
