#include "qk/base/log.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <mutex>
#include <vector>

#include "qk/base/env.h"
#include "qk/base/error.h"

namespace qk::logging {

namespace {
QK_ENV_STRING(env_log_level, "QK_LOG_LEVEL", "info",
              "Log level: trace, debug, info, warn, error or off.");
QK_ENV_BOOL(env_debug, "QK_DEBUG", false, "Shorthand for QK_LOG_LEVEL=debug.");
QK_ENV_STRING(env_log_subsys, "QK_LOG_SUBSYS", "",
              "Comma-separated subsystems whose debug/trace lines are shown (empty: all).");

int initial_level() {
  // A bad QK_LOG_LEVEL must not stop the program before it can say why.
  Level lvl = Level::info;
  try {
    lvl = parse_level(env_log_level.get());
  } catch (const Error& e) {
    fmt::print(stderr, "qk: warning: QK_LOG_LEVEL: {}; using info\n", e.message());
  }
  if (env_debug.get() && lvl > Level::debug) lvl = Level::debug;
  return static_cast<int>(lvl);
}

std::string& prefix_storage() {
  static std::string p;
  return p;
}
}  // namespace

namespace detail {
std::atomic<int> g_level{initial_level()};

bool subsys_enabled(std::string_view subsys) {
  static const std::vector<std::string> wanted = [] {
    std::vector<std::string> v;
    std::string s = env_log_subsys.get();
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(',', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) v.push_back(s.substr(start, end - start));
      start = end + 1;
    }
    return v;
  }();
  if (wanted.empty() || subsys.empty()) return true;
  for (const auto& w : wanted)
    if (w == subsys || w == "ALL") return true;
  return false;
}
}  // namespace detail

Level level() { return static_cast<Level>(detail::g_level.load()); }
void set_level(Level lvl) { detail::g_level.store(static_cast<int>(lvl)); }

Level parse_level(std::string_view s) {
  std::string l;
  for (char c : s) l.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (l == "trace") return Level::trace;
  if (l == "debug") return Level::debug;
  if (l == "info") return Level::info;
  if (l == "warn" || l == "warning") return Level::warn;
  if (l == "error") return Level::error;
  if (l == "off" || l == "none") return Level::off;
  QK_THROW(ValueError, "unknown log level '", s, "'; expected trace, debug, info, warn, error or off");
}

const char* level_name(Level lvl) {
  switch (lvl) {
    case Level::trace: return "TRACE";
    case Level::debug: return "DEBUG";
    case Level::info: return "INFO";
    case Level::warn: return "WARN";
    case Level::error: return "ERROR";
    case Level::off: return "OFF";
  }
  return "?";
}

void set_prefix(std::string p) { prefix_storage() = std::move(p); }
const std::string& prefix() { return prefix_storage(); }

void write(Level lvl, std::string_view subsys, std::string_view msg) {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  std::tm tm;
  localtime_r(&t, &tm);
  int ms = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  fmt::memory_buffer buf;
  fmt::format_to(std::back_inserter(buf), "{}{:02}:{:02}:{:02}.{:03} {:<5} ", prefix(), tm.tm_hour,
                 tm.tm_min, tm.tm_sec, ms, level_name(lvl));
  if (!subsys.empty()) fmt::format_to(std::back_inserter(buf), "[{}] ", subsys);
  buf.append(msg);
  buf.push_back('\n');
  // One write(2) per line keeps lines whole across threads and processes.
  const char* p = buf.data();
  size_t left = buf.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace qk::logging
