#include "qk/base/timer.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <ctime>

namespace qk {

std::string timestamp(TimestampFormat format, std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto whole = floor<seconds>(t);  // floor, so times before 1970 keep ms in [0, 999]
  const std::time_t tt = system_clock::to_time_t(whole);
  std::tm tm{};
  if (format == TimestampFormat::utc)
    gmtime_r(&tt, &tm);
  else
    localtime_r(&tt, &tm);
  char buf[32];
  switch (format) {
    case TimestampFormat::local: std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm); return buf;
    case TimestampFormat::utc: std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm); return buf;
    case TimestampFormat::local_time_ms: {
      const auto ms = duration_cast<milliseconds>(t - whole).count();
      return fmt::format("{:02}:{:02}:{:02}.{:03}", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
    }
  }
  return {};
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string format_duration(double s) {
  if (s < 1.0) return fmt::format("{:.0f}ms", s * 1e3);
  if (s < 60.0) return fmt::format("{:.1f}s", s);
  auto total = static_cast<int64_t>(s + 0.5);
  int64_t h = total / 3600, m = (total % 3600) / 60, sec = total % 60;
  if (h > 0) return fmt::format("{}h{:02}m{:02}s", h, m, sec);
  return fmt::format("{}m{:02}s", m, sec);
}

uint64_t peak_rss_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "VmHWM:", 6) == 0) {
      std::sscanf(line + 6, "%lu", &kb);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

}  // namespace qk
