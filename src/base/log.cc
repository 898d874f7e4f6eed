#include "qk/base/log.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <vector>

#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/timer.h"

namespace qk::logging {

namespace {
QK_ENV_STRING(env_log_level, "QK_LOG_LEVEL", "info",
              "Log level: trace, debug, info, warn, error or off.");
QK_ENV_BOOL(env_debug, "QK_DEBUG", false, "Shorthand for QK_LOG_LEVEL=debug.");
QK_ENV_STRING(env_log_subsys, "QK_LOG_SUBSYS", "",
              "Subsystems whose debug/trace lines are shown: INIT,COLL,... , ALL, or ^ before the list "
              "for all but those (empty: all).");
// NCCL's spellings of the same level and filter (qk/base/log.h), for the
// scripts of NCCL users; the QCCL_ name wins when both are set.
QK_ENV_OPTIONAL_STRING(env_qccl_debug, "QCCL_DEBUG",
                       "NCCL_DEBUG's values: VERSION, WARN, INFO (= QK_LOG_LEVEL=debug) or TRACE (= trace); "
                       "only ever makes the log more verbose.");
QK_ENV_OPTIONAL_STRING(env_nccl_debug, "NCCL_DEBUG", "As QCCL_DEBUG, when QCCL_DEBUG is unset.");
QK_ENV_OPTIONAL_STRING(env_qccl_subsys, "QCCL_DEBUG_SUBSYS",
                       "As QK_LOG_SUBSYS (NCCL_DEBUG_SUBSYS syntax), when QK_LOG_SUBSYS is unset.");
QK_ENV_OPTIONAL_STRING(env_nccl_subsys, "NCCL_DEBUG_SUBSYS",
                       "As QK_LOG_SUBSYS, when QK_LOG_SUBSYS and QCCL_DEBUG_SUBSYS are unset.");

std::string upper(std::string_view s) {
  std::string u;
  for (char c : s) u.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return u;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

struct FilterState {
  std::mutex mu;
  SubsysFilter filter;
  std::atomic<bool> version{false};
};
FilterState& filter_state() {
  static FilterState s;
  return s;
}

// A bad setting must not stop the program before it can say why.
void bad_setting(const char* name, const Error& e, const char* fallback) {
  fmt::print(stderr, "qk: warning: {}: {}; {}\n", name, e.message(), fallback);
}

// Reads every logging variable; stores the filter and returns the level.
int load_from_env() {
  Level lvl = Level::info;
  try {
    lvl = parse_level(env_log_level.reload());
  } catch (const Error& e) {
    bad_setting("QK_LOG_LEVEL", e, "using info");
  }
  try {
    if (env_debug.reload() && lvl > Level::debug) lvl = Level::debug;
  } catch (const Error& e) {
    bad_setting("QK_DEBUG", e, "ignored");
  }
  bool version = false;
  const env::Var<std::string>& dbg = env_qccl_debug.lookup() ? env_qccl_debug : env_nccl_debug;
  if (auto v = dbg.lookup()) {
    try {
      NcclDebug d = parse_nccl_debug(*v);
      version = d.version;
      if (d.level && *d.level < lvl) lvl = *d.level;
    } catch (const Error& e) {
      bad_setting(dbg.name(), e, "ignored");
    }
  }
  std::string spec;
  for (const env::Var<std::string>* v : {&env_log_subsys, &env_qccl_subsys, &env_nccl_subsys})
    if (auto s = v->lookup()) {
      spec = *s;
      break;
    }
  FilterState& st = filter_state();
  {
    std::lock_guard<std::mutex> g(st.mu);
    st.filter = parse_subsys(spec);
  }
  st.version.store(version);
  return static_cast<int>(lvl);
}

std::string& prefix_storage() {
  static std::string p;
  return p;
}
}  // namespace

namespace detail {
std::atomic<int> g_level{load_from_env()};

bool subsys_enabled(std::string_view subsys) {
  if (subsys.empty()) return true;
  FilterState& st = filter_state();
  std::lock_guard<std::mutex> g(st.mu);
  return st.filter.allows(subsys);
}
}  // namespace detail

Level level() { return static_cast<Level>(detail::g_level.load()); }
void set_level(Level lvl) { detail::g_level.store(static_cast<int>(lvl)); }

void reload_from_env() { detail::g_level.store(load_from_env()); }
bool version_requested() { return filter_state().version.load(); }

Level parse_level(std::string_view s) {
  const std::string l = upper(s);
  if (l == "TRACE") return Level::trace;
  if (l == "DEBUG") return Level::debug;
  if (l == "INFO") return Level::info;
  if (l == "WARN" || l == "WARNING") return Level::warn;
  if (l == "ERROR") return Level::error;
  if (l == "OFF" || l == "NONE") return Level::off;
  QK_THROW(ValueError, "unknown log level '", s, "'; expected trace, debug, info, warn, error or off");
}

NcclDebug parse_nccl_debug(std::string_view s) {
  const std::string l = upper(s);
  if (l == "VERSION") return {std::nullopt, true};
  if (l == "WARN" || l == "NONE" || l.empty()) return {};
  if (l == "INFO") return {Level::debug, false};
  if (l == "TRACE") return {Level::trace, false};
  QK_THROW(ValueError, "expected NCCL_DEBUG's VERSION, WARN, INFO or TRACE (or NONE), got '", s, "'");
}

bool SubsysFilter::allows(std::string_view subsys) const {
  bool listed = false;
  for (const auto& n : names)
    if (n == "ALL" || iequals(n, subsys)) listed = true;
  return negate ? !listed : names.empty() || listed;
}

SubsysFilter parse_subsys(std::string_view spec) {
  SubsysFilter f;
  std::string s = upper(spec);
  s.erase(std::remove_if(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }),
          s.end());
  if (!s.empty() && s[0] == '^') {
    f.negate = true;
    s.erase(0, 1);
  }
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) f.names.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return f;
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
  fmt::memory_buffer buf;
  fmt::format_to(std::back_inserter(buf), "{}{} {:<5} ", prefix(), timestamp(TimestampFormat::local_time_ms),
                 level_name(lvl));
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
