// One logger for all of qianka.
//
//   QK_INFO("loaded {} images from {}", n, dir);
//   QK_DEBUG_SUB("COLL", "ring step {} of {}", i, n);
//
// The level comes from QK_LOG_LEVEL (trace|debug|info|warn|error|off, default
// info); QK_DEBUG=1 is a shorthand for debug. QK_LOG_SUBSYS=COLL,NET limits
// debug/trace lines that name a subsystem. The level is checked before any
// formatting, so a disabled line costs one load and one compare.
// In multi-process runs set_prefix("[rank 3] ") puts the rank on every line.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <string>
#include <string_view>

// "logging", not "log": qk::log is the elementwise logarithm (qk/autograd/functions.h).
namespace qk::logging {

enum class Level : int { trace = 0, debug = 1, info = 2, warn = 3, error = 4, off = 5 };

namespace detail {
extern std::atomic<int> g_level;
bool subsys_enabled(std::string_view subsys);
}  // namespace detail

inline bool enabled(Level lvl) {
  return static_cast<int>(lvl) >= detail::g_level.load(std::memory_order_relaxed);
}
inline bool enabled(Level lvl, std::string_view subsys) {
  return enabled(lvl) && (lvl >= Level::info || detail::subsys_enabled(subsys));
}

Level level();
void set_level(Level lvl);
// Parses "trace".."off" (case-insensitive); throws ValueError on anything else.
Level parse_level(std::string_view s);
const char* level_name(Level lvl);
// Text put before every line, e.g. "[rank 1] ". Empty by default.
void set_prefix(std::string prefix);
const std::string& prefix();
// Writes one line to stderr (one write call, so lines from threads never interleave).
void write(Level lvl, std::string_view subsys, std::string_view msg);

}  // namespace qk::logging

#define QK_LOG_SUB(lvl, subsys, ...)                                                  \
  do {                                                                                \
    if (::qk::logging::enabled(lvl, subsys))                                              \
      ::qk::logging::write(lvl, subsys, ::fmt::format(__VA_ARGS__));                      \
  } while (0)
#define QK_LOG(lvl, ...) QK_LOG_SUB(lvl, "", __VA_ARGS__)

#define QK_TRACE(...) QK_LOG(::qk::logging::Level::trace, __VA_ARGS__)
#define QK_DEBUG(...) QK_LOG(::qk::logging::Level::debug, __VA_ARGS__)
#define QK_INFO(...) QK_LOG(::qk::logging::Level::info, __VA_ARGS__)
#define QK_WARN(...) QK_LOG(::qk::logging::Level::warn, __VA_ARGS__)
#define QK_ERROR(...) QK_LOG(::qk::logging::Level::error, __VA_ARGS__)
#define QK_DEBUG_SUB(subsys, ...) QK_LOG_SUB(::qk::logging::Level::debug, subsys, __VA_ARGS__)
#define QK_TRACE_SUB(subsys, ...) QK_LOG_SUB(::qk::logging::Level::trace, subsys, __VA_ARGS__)
