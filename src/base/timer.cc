#include "qk/base/timer.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>

namespace qk {

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
